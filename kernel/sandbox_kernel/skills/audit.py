"""Append-only JSON-lines audit log of skill calls, flushed per call; readable by its owner only (0600)."""

from __future__ import annotations

import datetime
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


class AuditLog:
    """One line per skill call, flushed to the OS before the call's answer goes back.

    The file stays open in append mode; a flush per line means a dying kernel loses nothing.
    """

    def __init__(self, path: Path | None) -> None:
        self._file: TextIO | None = None
        if path is not None:
            private_files.make_folders(path.parent)  # folders it creates are 0700
            self._file = os.fdopen(private_files.open_append(path), "a", encoding="utf-8")  # 0600

    def record(self, **entry: Any) -> None:
        if self._file is None:
            return
        entry = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(), **entry}
        self._file.write(json.dumps(entry, default=repr) + "\n")
        self._file.flush()
