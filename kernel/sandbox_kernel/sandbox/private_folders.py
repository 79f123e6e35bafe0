"""Each sandbox's private folder (its socket, Deno's scratch DENO_DIR), and the sweep of ones left behind.

A folder is removed with its sandbox however the sandbox ends; only a kernel killed outright (SIGKILL) cannot
remove its own. Folder names carry the kernel's pid, so a later kernel removes those whose kernel is gone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "sbk-"
_NAME = re.compile(rf"{PREFIX}(\d+)-")


def make() -> Path:
    """A new 0700 private folder in the temporary directory, named for this kernel process."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def sweep(folder: Path | None = None) -> list[Path]:
    """Remove private folders (ours: same owner) whose kernel process no longer runs; returns them."""
    removed = []
    for entry in Path(folder or tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        match = _NAME.match(entry.name)
        try:
            mine = entry.is_dir() and not entry.is_symlink() and entry.stat().st_uid == os.getuid()
        except OSError:
            continue
        if match and mine and not alive(int(match[1])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
