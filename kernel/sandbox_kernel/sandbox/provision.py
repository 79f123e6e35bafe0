"""Fetch, once, what the sandbox needs: Pyodide (through Deno) and the guest wheels; build the start-up snapshot."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from sandbox_kernel import paths

GUEST_REQUIREMENTS = Path(__file__).with_name("guest-requirements.txt")
PYODIDE_MANIFEST = paths.host_dir() / "pyodide-files.json"
OFFLINE_FIX = (
    "Run `sandbox-kernel fetch` where the npm registry can be reached; for a machine without it, copy the folder "
    "{cache} from a machine where `sandbox-kernel fetch` ran (or point SANDBOX_KERNEL_CACHE at such a copy)"
)
GUEST_PYTHON = "3.14"
# Deno's words for a network that could not be used at all (no route, no name resolution, refused, timed out).
OFFLINE_MARKS = (
    "tcp connect error", "dns error", "connection refused", "network is unreachable", "timed out",
    "failed to lookup address", "no route to host", "temporary failure in name resolution",
)  # fmt: skip


class ProvisionError(RuntimeError):
    """A one-time download failed; the message says what and how to retry."""


async def _run(argv: list[str], env: dict[str, str] | None, cwd: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def deno_dir() -> Path:
    return paths.cache_dir() / "deno"


def pyodide_manifest() -> dict[str, tuple[int, str]]:
    """Each file of the pinned Pyodide package: (size, sha256), from host_ts/pyodide-files.json."""
    data = json.loads(PYODIDE_MANIFEST.read_text())
    if data.get("version") != paths.pyodide_version():
        raise ProvisionError(
            f"{PYODIDE_MANIFEST} describes Pyodide {data.get('version')}, but host_ts/deno.json pins "
            f"{paths.pyodide_version()}: run `python -m sandbox_kernel.sandbox.provision --write-manifest` after a fetch"
        )
    return {name: (int(size), str(digest)) for name, (size, digest) in data["files"].items()}


def write_pyodide_manifest() -> Path:
    """Record the cached Pyodide's files in host_ts/pyodide-files.json (for maintainers, after a version bump)."""
    folder = paths.pyodide_dir(deno_dir())
    rows = [f"  {json.dumps(f.name)}: [{f.stat().st_size}, {json.dumps(_sha256(f))}]" for f in sorted(folder.iterdir())]
    version = json.dumps(paths.pyodide_version())
    python = json.dumps(json.loads((folder / "pyodide-lock.json").read_text())["info"]["python"])
    PYODIDE_MANIFEST.write_text(
        f'{{"version": {version}, "python": {python}, "files": {{\n' + ",\n".join(rows) + "\n}}\n"
    )
    return PYODIDE_MANIFEST


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pyodide_problems(thorough: bool = False) -> list[str]:
    """What is wrong with the cached Pyodide ([] when it is whole): missing files, sizes, and with
    `thorough` also contents (sha256, ~20 ms)."""
    folder = paths.pyodide_dir(deno_dir())
    problems = []
    for name, (size, digest) in pyodide_manifest().items():
        path = folder / name
        try:
            actual = path.stat().st_size
        except OSError:
            problems.append(f"{name} is missing")
            continue
        if actual != size:
            problems.append(f"{name} has {actual} bytes instead of {size}")
        elif thorough and _sha256(path) != digest:
            problems.append(f"{name} is damaged (its sha256 differs)")
    return problems


async def ensure_pyodide(say: Callable[[str], None], thorough: bool = False, problems: list[str] | None = None) -> Path:
    """The pinned Pyodide, whole: fetched through Deno (per host_ts/deno.lock) when it is missing, and fetched
    again when the cached copy fails its check (`thorough`: contents too; `problems`: already found by the
    caller). Files are checked and removed in a worker thread, never on the event loop."""
    target = paths.pyodide_dir(deno_dir())
    if problems is None:
        problems = await asyncio.to_thread(pyodide_problems, thorough)
    if not problems:
        return target
    damaged = target.exists()
    if damaged:
        say(f"sandbox-kernel: the cached Pyodide in {target} is damaged ({'; '.join(problems[:3])}): fetching it again")
        await asyncio.to_thread(shutil.rmtree, target)
    else:
        say(
            f"sandbox-kernel: fetching Pyodide {paths.pyodide_version()} through Deno into {deno_dir()} (once per cache)"
        )
    host = paths.host_dir()
    # A trusted, one-time step: it keeps the user's environment (proxies, CA bundles).
    env = {**os.environ, "DENO_DIR": str(deno_dir()), "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"}
    argv = [
        paths.deno_executable(),
        "install",
        "--frozen",
        "--entrypoint",
        str(host / "main.ts"),
        str(host / "worker.ts"),
    ]
    code, out = await _run(argv, env, host)
    if code != 0:
        what = f"{'fetch Pyodide again' if damaged else 'fetch Pyodide'} {paths.pyodide_version()}"
        raise ProvisionError(f"could not {what}: {deno_failure(out)}. {OFFLINE_FIX.format(cache=paths.cache_dir())}")
    left = await asyncio.to_thread(pyodide_problems, True)
    if left:
        raise ProvisionError(
            f"Pyodide fetched into {target} does not match {PYODIDE_MANIFEST.name} ({'; '.join(left[:3])}); "
            "the package's host_ts/deno.lock and pyodide-files.json disagree: reinstall sandbox-kernel"
        )
    return target


def deno_failure(output: str) -> str:
    """Why a `deno install` failed, in words: 'the npm registry could not be reached' when the network failed (with
    the cause and the address Deno tried), else Deno's own error line with its deepest cause."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if line.lower().startswith("error")), None)
    if first is None:
        return f"Deno said: {(lines or ['nothing'])[-1][:300]}"
    causes = []  # Deno's numbered causes ("0: error sending request for url (...)", "1: ..."), up to its backtrace
    for line in lines[first + 1 :]:
        cause = re.fullmatch(r"\d+: (.*)", line)
        if cause is None:
            break
        causes.append(cause[1])
    text = " ".join([lines[first], *causes])
    url = re.search(r"for url \((\S+?)\)", text)
    address = f" at {url[1]}" if url else ""
    deepest = (causes or [lines[first].removeprefix("error: ")])[-1][:200]
    if any(mark in text.lower() for mark in OFFLINE_MARKS):
        return f"the npm registry{address} could not be reached ({deepest}): this machine seems to be offline"
    return f"Deno said: {lines[first][:300]}" + (f" ({deepest}{address})" if causes else "")


def wheels_dir() -> Path:
    digest = hashlib.sha256(GUEST_REQUIREMENTS.read_bytes()).hexdigest()[:16]
    return paths.cache_dir() / "guest-wheels" / digest


def guest_wheels() -> list[Path]:
    """The downloaded guest wheels, or [] if they are not all there yet."""
    folder = wheels_dir()
    if not (folder / ".complete").is_file():
        return []
    return sorted(folder.glob("*.whl"))


async def ensure_guest_wheels(say: Callable[[str], None]) -> list[Path]:
    """Download the pinned, hash-checked guest wheels unless they are cached."""
    wheels = guest_wheels()
    if wheels:
        return wheels
    folder = wheels_dir()
    say(f"sandbox-kernel: downloading IPython wheels for the sandbox into {folder} (once)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=folder.parent))
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--python-version", GUEST_PYTHON, "--implementation", "py",
        "--abi", "none", "--platform", "any", "-r", str(GUEST_REQUIREMENTS), "-d", str(staging),
    ]  # fmt: skip
    code, out = await _run(argv, None, staging)
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise ProvisionError(
            f"could not download the guest wheels with pip (exit {code}); is the package index reachable?\n{out[-2000:]}"
        )
    _publish(staging, folder)
    return guest_wheels()


def _publish(staging: Path, folder: Path) -> None:
    """Move a finished download into place in one rename."""
    (staging / ".complete").write_text("ok\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def guest_site_dir() -> Path:
    """The guest wheels, extracted once: the sandbox mounts this folder read-only."""
    return wheels_dir() / "site"


def _extract(wheels: list[Path], target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".site-", dir=target.parent))
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(staging)
    (staging / ".complete").write_text("ok\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


async def ensure_guest_site(say: Callable[[str], None]) -> Path:
    """Download and extract the guest wheels unless that was done before."""
    wheels = await ensure_guest_wheels(say)
    site = guest_site_dir()
    if not (site / ".complete").is_file():
        await asyncio.to_thread(_extract, wheels, site)
    return site


async def ensure_all(say: Callable[[str], None], thorough: bool = False) -> tuple[Path, Path]:
    """Everything a sandbox start needs (Pyodide, the guest's site folder); fast when cached."""
    pyodide = await ensure_pyodide(say, thorough)
    site = await ensure_guest_site(say)
    return pyodide, site


def guest_versions() -> dict[str, str]:
    """The guest's Python, Pyodide and IPython versions as pinned on the host (known before anything is fetched:
    the Python version is in host_ts/pyodide-files.json, beside the pinned Pyodide's files)."""
    python = json.loads(PYODIDE_MANIFEST.read_text())["python"]
    pins = dict(line.split(" ")[0].split("==") for line in GUEST_REQUIREMENTS.read_text().splitlines() if "==" in line)
    return {
        "python_version": str(python),
        "pyodide_version": paths.pyodide_version(),
        "ipython_version": pins.get("ipython", "?"),
    }


@functools.cache
def _snapshot_key() -> str:
    """A digest of what the snapshot is made of: Pyodide, Deno, guest wheels and builder code (fixed for the life
    of this process, so it is read once, not at every sandbox start)."""
    from importlib.metadata import version

    host = paths.host_dir()
    key = hashlib.sha256()
    for part in (paths.pyodide_version(), version("deno"), GUEST_REQUIREMENTS.read_text()):
        key.update(part.encode())
    for name in ("snapshot.ts", "snapshot_layout.ts", "free_heap.ts"):
        key.update((host / name).read_bytes())
    for source in sorted((host / "guest").rglob("*.py")):  # the guest's own code is in the snapshot too
        key.update(source.read_bytes())
    return key.hexdigest()[:16]


def snapshot_path() -> Path:
    """The memory snapshot for this exact set of Pyodide, Deno, guest wheels and builder code."""
    return paths.cache_dir() / "snapshots" / f"pyodide-{paths.pyodide_version()}-{_snapshot_key()}.bin"


def snapshot_if_ready() -> Path | None:
    path = snapshot_path()
    return path if path.is_file() else None


async def build_snapshot(say: Callable[[str], None]) -> Path:
    """Make the snapshot (a Deno run of host_ts/snapshot.ts that may write only that file's folder)."""
    pyodide = await ensure_pyodide(say)
    site = await ensure_guest_site(say)
    target = snapshot_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    host = paths.host_dir()
    say(f"sandbox-kernel: building the start-up snapshot {target.name} (once, a few seconds)")
    env = {"DENO_DIR": str(deno_dir()), "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"}
    argv = [
        paths.deno_executable(), "run", "--no-prompt", "--cached-only", f"--config={host / 'deno.json'}",
        f"--allow-read={host},{pyodide},{site},{target.parent}", f"--allow-write={target.parent}",
        str(host / "snapshot.ts"), str(site), str(host / "guest"), str(target),
    ]  # fmt: skip
    code, out = await _run(argv, env, target.parent)
    if code != 0 or not target.is_file():
        raise ProvisionError(f"could not build the start-up snapshot (exit {code}):\n{out[-2000:]}")
    return target


def share_read_only(folder: Path) -> None:
    """Let every user read `folder` and all in it, and none but its owner write there: a cache made by one user
    (root, building an image) for the kernels of others. npm packages and temporary folders come with 0600/0700."""
    os.chmod(folder, 0o755)
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                os.chmod(path, 0o755)
            elif stat.S_ISREG(mode):
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)


def snapshot_not_writable(broken: bool = False) -> str:
    """Why kernels of a cache this user may not write start without a snapshot (`broken`: the one there could not
    be restored), and the fix: for the kernel's log and doctor."""
    target = snapshot_path()
    what = f"The start-up snapshot {target.name}" + (" (the one there could not be restored)" if broken else "")
    text = paths.read_only_cache(what, target.parent, "this user may not write there", paths.FIX_SNAPSHOT)
    return f"{text}; sandboxes start without it (about 3 s instead of 0.7 s)"


def drop_snapshot() -> None:
    """Forget a snapshot that failed to restore (it is rebuilt)."""
    snapshot_path().unlink(missing_ok=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-manifest"]:
        print(write_pyodide_manifest())
    else:
        sys.exit("usage: python -m sandbox_kernel.sandbox.provision --write-manifest")
