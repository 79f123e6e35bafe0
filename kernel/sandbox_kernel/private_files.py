"""Files and folders that only their owner may read (checkpoints, the audit log), made so whatever the umask.

What the kernel creates is 0600 (files) or 0700 (folders). Folders that already exist are the user's and are left
as they are, except the kernel's own data folder (<jupyter data dir>/sandbox-kernel, where its checkpoint key and
audit log live), which is tightened to 0700.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

FILE_MODE = 0o600
FOLDER_MODE = 0o700
log = logging.getLogger(__name__)


def kernel_data_folder() -> Path:
    """The kernel's own folder in the Jupyter data dir (checkpoint key, audit log)."""
    return Path(jupyter_data_dir()) / "sandbox-kernel"


def make_folders(folder: Path) -> None:
    """`folder` and its missing parents, created 0700; existing ones are kept as they are (but see tighten_own)."""
    missing = []
    current = folder
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to change
        if stat.S_IMODE(path.stat().st_mode) != FOLDER_MODE:  # a umask that takes the owner's own bits
            path.chmod(FOLDER_MODE)
    tighten_own(folder)


def tighten_own(folder: Path) -> None:
    """Make the kernel's own data folder 0700 if an earlier version left it open to others (no other folder)."""
    try:
        if folder.resolve() != kernel_data_folder().resolve() or folder.is_symlink():
            return
        mode = stat.S_IMODE(folder.stat().st_mode)
        if mode & 0o077:
            folder.chmod(FOLDER_MODE)
            log.warning("sandbox-kernel: made its folder %s private (mode %o -> 700)", folder, mode)
    except OSError as exc:
        log.warning("sandbox-kernel: could not make its folder %s private: %s", folder, exc)


def create(path: Path, flags: int = os.O_WRONLY) -> int:
    """A new file at `path` (FileExistsError if there is one), 0600 whatever the umask; returns its descriptor."""
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken bits from the owner too
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: Path) -> int:
    """`path` opened for appending: created 0600, or, if it exists and others may read or write it, made 0600
    (mode bits of the owner kept) with a warning in the log. Returns its descriptor."""
    for _ in range(3):  # between "exists" and "open" another process may remove or create it
        try:
            return create(path, os.O_WRONLY | os.O_APPEND)
        except FileExistsError:
            pass
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            continue
        _tighten(fd, path)
        return fd
    raise OSError(f"{path} keeps appearing and disappearing; cannot open it")


def _tighten(fd: int, path: Path) -> None:
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if not mode & 0o077:
        return
    try:
        os.fchmod(fd, mode & 0o700)
        log.warning("sandbox-kernel: %s could be read by other users (mode %o); made it %o", path, mode, mode & 0o700)
    except OSError as exc:
        log.warning("sandbox-kernel: %s can be read by other users (mode %o) and stays so: %s", path, mode, exc)


def copy(source: Path, target: Path) -> None:
    """`target` gets `source`'s bytes in a new 0600 file (written beside it, then renamed over it: never half)."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    partial.unlink(missing_ok=True)
    fd = create(partial)
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
