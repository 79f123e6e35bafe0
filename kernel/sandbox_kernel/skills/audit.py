"""Append-only JSON-lines audit log of skill calls, flushed per call; readable by its owner only (0600); rotated at
a size (audit.jsonl -> audit.jsonl.1 -> ... -> audit.jsonl.N, the oldest dropped)."""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any, TextIO

from sandbox_kernel import private_files


def digest(args: Any, kwargs: Any) -> str:
    """A SHA-256 of the call's arguments (the log never holds the arguments themselves)."""
    text = json.dumps({"args": args, "kwargs": kwargs}, sort_keys=True, default=repr)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def default_path() -> Path:
    """SandboxKernel.audit_log's default: audit.jsonl in the kernel's own folder of the Jupyter data dir."""
    return private_files.kernel_data_folder() / "audit.jsonl"


def rotated(path: Path, backups: int) -> list[Path]:
    """The older files of the log at `path`, newest first (path.1 ... path.N)."""
    return [path.with_name(f"{path.name}.{n}") for n in range(1, backups + 1)]


class AuditLog:
    """One line per skill call, flushed to the OS before the call's answer goes back.

    The file stays open in append mode; a flush per line means a dying kernel loses nothing. Once it holds
    `max_bytes` (0: never) it becomes path.1 (path.1 becomes path.2, ..., path.`backups` is dropped) and a new file
    is started. Kernels of one user share the default log: the rotation is done under a lock on the file, and a
    kernel whose file was rotated by another opens the new one before its next line.
    """

    def __init__(self, path: Path | None, max_bytes: int = 0, backups: int = 0) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._file: TextIO | None = None
        if path is not None:
            private_files.make_folders(path.parent)  # folders it creates are 0700
            self._open()

    def _open(self) -> None:
        assert self.path is not None
        if self._file is not None:
            self._file.close()
        self._file = os.fdopen(private_files.open_append(self.path), "a", encoding="utf-8")  # 0600

    def _is_current(self, fd: int) -> bool:
        """Whether `path` is still the file this log writes to (not rotated away by another kernel)."""
        assert self.path is not None
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)

    def record(self, **entry: Any) -> None:
        if self._file is None:
            return
        if not self._is_current(self._file.fileno()):
            self._open()
            assert self._file is not None
        entry = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(), **entry}
        self._file.write(json.dumps(entry, default=repr) + "\n")
        self._file.flush()
        if self.max_bytes and os.fstat(self._file.fileno()).st_size >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """path -> path.1 -> ... (the oldest dropped), then a new path; once, whichever kernel gets the lock."""
        assert self._file is not None and self.path is not None
        fd = self._file.fileno()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if self._is_current(fd) and os.fstat(fd).st_size >= self.max_bytes:  # else another kernel rotated it
                older = rotated(self.path, self.backups)
                for newer, old in reversed(list(zip([self.path, *older][: len(older)], older, strict=True))):
                    if newer.exists():
                        newer.replace(old)
                if not self.backups:
                    self.path.unlink(missing_ok=True)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._open()
