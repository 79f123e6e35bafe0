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
CACHE_PARTS = frozenset({"deno", "guest-wheels", "packages", "pyodide-packages", "snapshots"})


def cache_dir() -> Path:
    """The user's cache: $SANDBOX_KERNEL_CACHE, else sandbox-kernel/ in $XDG_CACHE_HOME or ~/.cache."""
    base = os.environ.get("SANDBOX_KERNEL_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sandbox-kernel"


def cache_not_writable(what: str, error: OSError) -> str:
    """Why `what` cannot be kept in the cache, when the cache is read-only (e.g. baked into an image), with the fix."""
    return (
        f"{what} cannot be kept in the cache {cache_dir()} ({error.strerror or error}): it is read-only for this "
        "kernel (a cache baked into an image by `sandbox-kernel fetch --to DIR` is). Fetch it there when the cache "
        "is made (e.g. `SANDBOX_KERNEL_CACHE=DIR sandbox-kernel run -c 'import NAME'` at build time), or point "
        "SANDBOX_KERNEL_CACHE at a writable copy of that folder"
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
