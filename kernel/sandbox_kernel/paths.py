"""Where the kernel finds its parts (Deno host code, caches, the Deno binary)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _bundled_or_repo(name: str) -> Path:
    """A top-level project folder: bundled in the wheel, or beside `kernel/` in a checkout."""
    bundled = PACKAGE_DIR / name
    if bundled.is_dir():
        return bundled
    repo = PACKAGE_DIR.parent.parent / name
    if repo.is_dir():
        return repo
    raise FileNotFoundError(f"sandbox-kernel is incomplete: folder {name!r} not found near {PACKAGE_DIR}")


def host_dir() -> Path:
    """The Deno host program (host_ts/)."""
    return _bundled_or_repo("host_ts")


def kernelspec_dir() -> Path:
    """The kernelspec template and logos (kernelspec/)."""
    return _bundled_or_repo("kernelspec")


# What the kernel keeps in its cache folder (`sandbox-kernel uninstall --cache` removes a folder only of these).
CACHE_PARTS = frozenset({"deno", "guest-wheels", "packages", "pip-wheelhouse", "pyodide-packages", "snapshots"})


def cache_dir() -> Path:
    """The user's cache: $SANDBOX_KERNEL_CACHE, else sandbox-kernel/ in $XDG_CACHE_HOME or ~/.cache."""
    base = os.environ.get("SANDBOX_KERNEL_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sandbox-kernel"


def cache_writable(folder: Path) -> bool:
    """Whether this process may make or change `folder` in the cache: its nearest existing folder is writable (a
    read-only mount says no to every user, root too)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK)


# What to do when the cache is read-only, by what could not be kept there (the end of `cache_not_writable`'s words).
FIX_PYODIDE_PACKAGE = (
    "Fetch it there where the cache is made, as its owner: `sandbox-kernel fetch --to {cache} --import NAME` (in an "
    "image: as root, e.g. USER root before that RUN); or point SANDBOX_KERNEL_CACHE at a writable copy of that folder"
)
FIX_KERNEL_SETTINGS = (
    "Run `sandbox-kernel fetch --to {cache}` where the cache is made, with the kernel's settings (it reads "
    "sandbox_kernel_config.py, and takes --SandboxKernel.packages=... and --SandboxKernel.wheelhouse=... too): it "
    "resolves them into the cache; or point SANDBOX_KERNEL_CACHE at a writable folder"
)
FIX_PIP = (
    "Preinstall them instead: SandboxKernel.packages, resolved into the cache by `sandbox-kernel fetch --to {cache}` "
    "with that setting where the cache is made; or point SANDBOX_KERNEL_CACHE at a writable folder"
)
FIX_SNAPSHOT = (
    "Make it there with `sandbox-kernel fetch --to {cache}` where the cache is made, or point SANDBOX_KERNEL_CACHE at "
    "a writable copy of that folder"
)


def cache_not_writable(what: str, error: OSError, fix: str = FIX_PYODIDE_PACKAGE) -> str:
    """Why `what` cannot be kept in the cache, when the cache is read-only (e.g. baked into an image): the folder
    that could not be written, why, and `fix` (one of the FIX_ texts: `{cache}` becomes the cache's path)."""
    return read_only_cache(what, error.filename, error.strerror or str(error), fix)


def read_only_cache(what: str, folder: object, why: str, fix: str) -> str:
    """`what` cannot be kept in the cache: `folder` (None: unknown) cannot be written, because `why`; then `fix`."""
    return (
        f"{what} cannot be kept in the cache {cache_dir()}: {folder or 'it'} cannot be written ({why}), as in a "
        "cache baked into an image by `sandbox-kernel fetch --to DIR`, which kernels only read. "
        + fix.format(cache=cache_dir())
    )


def deno_executable() -> str:
    """The Deno binary shipped by the `deno` PyPI package (or $SANDBOX_KERNEL_DENO)."""
    override = os.environ.get("SANDBOX_KERNEL_DENO")
    if override:
        return override
    from deno import find_deno_bin

    return str(find_deno_bin())


def pyodide_version() -> str:
    """The Pyodide version pinned in host_ts/deno.json."""
    imports = json.loads((host_dir() / "deno.json").read_text())["imports"]
    match = re.fullmatch(r"npm:pyodide@([\w.\-]+)", imports["pyodide"])
    if not match:
        raise ValueError(f"host_ts/deno.json pins pyodide as {imports['pyodide']!r}; expected npm:pyodide@VERSION")
    return match.group(1)


def pyodide_dir(deno_dir: Path) -> Path:
    """Where Deno keeps the pinned Pyodide package inside `deno_dir`."""
    return deno_dir / "npm" / "registry.npmjs.org" / "pyodide" / pyodide_version()
