"""Fetch, once, what the sandbox needs: Pyodide (through Deno) and the guest wheels."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import paths

GUEST_REQUIREMENTS = paths.PACKAGE_DIR / "guest-requirements.txt"
GUEST_PYTHON = "3.14"


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


def pyodide_is_cached() -> bool:
    return (paths.pyodide_dir(deno_dir()) / "pyodide.asm.wasm").is_file()


async def ensure_pyodide(say: Callable[[str], None]) -> Path:
    """Make Deno fetch the pinned Pyodide (per host_ts/deno.lock) unless it is cached."""
    target = paths.pyodide_dir(deno_dir())
    if pyodide_is_cached():
        return target
    say(
        f"sandbox-kernel: first start: fetching Pyodide {paths.pyodide_version()} through Deno into {deno_dir()} (once)"
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
    if code != 0 or not pyodide_is_cached():
        raise ProvisionError(
            f"could not fetch Pyodide through Deno (exit {code}); is the npm registry reachable?\n{out[-2000:]}"
        )
    return target


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
    say(f"sandbox-kernel: first start: downloading IPython wheels for the sandbox into {folder} (once)")
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


async def ensure_all(say: Callable[[str], None]) -> tuple[Path, list[Path]]:
    """Everything a sandbox start needs; fast when already cached."""
    pyodide = await ensure_pyodide(say)
    wheels = await ensure_guest_wheels(say)
    return pyodide, wheels
