"""Python packages for the sandbox, resolved on the host (the guest needs no network for them).

Two sources: pure-Python wheels from the package index or a local wheelhouse (`SandboxKernel.packages`),
and Pyodide's own compiled packages (numpy, ...) from the Pyodide index (`SandboxKernel.pyodide_index`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import paths

GUEST_PYTHON = "3.14"
FETCH_TIMEOUT = 15.0  # seconds per Pyodide package download


class PackageError(RuntimeError):
    """A package that cannot be provided; the message says what to do."""


def default_pyodide_index() -> str:
    return f"https://cdn.jsdelivr.net/pyodide/v{paths.pyodide_version()}/full/"


def is_guest_wheel(name: str) -> bool:
    """Pure-Python (`none-any`) or Pyodide-platform (`pyemscripten`/`emscripten`) wheels only."""
    tags = name[:-4].split("-")[-3:] if name.endswith(".whl") else []
    return len(tags) == 3 and (tags[1:] == ["none", "any"] or "emscripten" in tags[2])


async def _pip_download(specs: list[str], wheelhouse: Path | None, target: Path) -> tuple[int, str]:
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
        "--python-version", GUEST_PYTHON, "--implementation", "py", "--abi", "none", "--platform", "any",
        "-d", str(target), *specs,
    ]  # fmt: skip
    if wheelhouse is not None:
        argv[4:4] = ["--no-index", "--find-links", str(wheelhouse)]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def _finish(staging: Path, folder: Path) -> list[Path]:
    """Check the download holds only guest wheels, then move it into place in one rename."""
    native = [p.name for p in staging.glob("*.whl") if not is_guest_wheel(p.name)]
    if native:
        shutil.rmtree(staging, ignore_errors=True)
        raise PackageError(
            f"SandboxKernel.packages: {native} are native CPython wheels; the sandbox needs pure-Python or Pyodide wheels"
        )
    (staging / ".complete").write_text("ok\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return sorted(folder.glob("*.whl"))


async def preinstall_wheels(
    specs: list[str], wheelhouse: Path | None, say: Callable[[str], None]
) -> tuple[Path, list[Path]]:
    """Wheels (with dependencies) for `SandboxKernel.packages`, cached by the request's digest."""
    key = json.dumps({"specs": specs, "wheelhouse": str(wheelhouse) if wheelhouse else None}, sort_keys=True)
    folder = paths.cache_dir() / "packages" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if (folder / ".complete").is_file():
        return folder, sorted(folder.glob("*.whl"))
    say(f"sandbox-kernel: resolving SandboxKernel.packages {specs} on the host into {folder}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=folder.parent))
    code, out = await _pip_download(specs, wheelhouse, staging)
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        where = f"the wheelhouse {wheelhouse}" if wheelhouse else "the package index"
        raise PackageError(
            f"SandboxKernel.packages {specs}: no pure-Python (py3-none-any) wheels found in {where} for all of "
            "them and their dependencies. Compiled packages need Pyodide builds: import them and they load from "
            f"SandboxKernel.pyodide_index.\npip said: {out.strip()[-1500:]}"
        )
    return folder, await asyncio.to_thread(_finish, staging, folder)


class PyodideIndex:
    """Pyodide's compiled packages: the lock file says what exists, files are fetched on the host."""

    def __init__(self, source: str, cache: Path, bundled_lock: Path) -> None:
        self.source = source if source.endswith("/") or not source.startswith(("http://", "https://")) else source + "/"
        self.cache = cache
        self.local = None if self.source.startswith(("http://", "https://")) else Path(self.source)
        own_lock = self.local / "pyodide-lock.json" if self.local else None
        self.lock_path = own_lock if own_lock and own_lock.is_file() else bundled_lock
        self.lock_text = self.lock_path.read_text()  # handed to every sandbox start as it is
        self.lock: dict[str, Any] = json.loads(self.lock_text)
        self.packages: dict[str, dict[str, Any]] = self.lock["packages"]
        self.by_import = {imp: name for name, pkg in self.packages.items() for imp in pkg.get("imports", [])}

    def canonical(self, spec: str) -> str:
        """The lock file's name for a requirement like 'Attrs>=23' (PEP 503 normalised)."""
        name = re.split(r"[<>=!~\[; ]", spec.strip(), maxsplit=1)[0]
        return re.sub(r"[-_.]+", "-", name).lower()

    def closure(self, names: Iterable[str]) -> list[str]:
        """`names` with every dependency, per the lock file."""
        todo, seen = list(names), []
        while todo:
            name = todo.pop()
            if name in seen or name not in self.packages:
                continue
            seen.append(name)
            todo.extend(self.packages[name].get("depends", []))
        return seen

    def missing_files(self, names: Iterable[str]) -> list[dict[str, Any]]:
        return [
            self.packages[n] for n in self.closure(names) if not (self.cache / self.packages[n]["file_name"]).is_file()
        ]

    def fetch(self, names: list[str]) -> None:
        """Put the files of `names` (and their dependencies) into the cache, checking sha256."""
        self.cache.mkdir(parents=True, exist_ok=True)
        for pkg in self.missing_files(names):
            file_name = pkg["file_name"]
            try:
                if self.local is not None:
                    data = (self.local / file_name).read_bytes()
                else:
                    with urllib.request.urlopen(self.source + file_name, timeout=FETCH_TIMEOUT) as resp:
                        data = resp.read()
            except OSError as exc:
                raise PackageError(
                    f"{pkg['name']} is provided by the Pyodide index, and it could not be fetched from "
                    f"{self.source} ({type(exc).__name__}: {exc}). The kernel fetches these on the host, outside the "
                    "sandbox, so SandboxKernel.allow_net does not apply: set SandboxKernel.pyodide_index to a "
                    "reachable mirror URL or a local folder holding the Pyodide packages (with their pyodide-lock.json)."
                ) from None
            digest = hashlib.sha256(data).hexdigest()
            if digest != pkg["sha256"]:
                raise PackageError(
                    f"{file_name} from {self.source} has sha256 {digest}, but the lock file says {pkg['sha256']}"
                )
            partial = self.cache / f".{file_name}.part"
            partial.write_bytes(data)
            partial.rename(self.cache / file_name)
