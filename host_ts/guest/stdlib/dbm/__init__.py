"""`dbm` for the sandbox: Pyodide's standard library leaves the package out (it has no gdbm, ndbm or sqlite build to
back it), so `shelve.open` failed. This one has CPython's interface (`open`, `whichdb`, `error`) over the pure-Python
backend `dbm.dumb`, whose files are the same as CPython's `dbm.dumb` files (readable on either side of a mount).
"""

from __future__ import annotations

import builtins
import os
import struct
from types import ModuleType
from typing import Any

__all__ = ["error", "open", "whichdb"]


class error(Exception):  # CPython's name
    pass


_names = ["dbm.dumb"]  # the backends this Python has, tried in order for a new database (CPython's list is longer)
_defaultmod: ModuleType | None = None
_modules: dict[str, ModuleType] = {}

_Error = error
error = (_Error, OSError)  # type: ignore[misc,assignment]  # as CPython: `except dbm.error` catches any backend's


def open(file: Any, flag: str = "r", mode: int = 0o666) -> Any:  # CPython's name
    """Open the database at `file` (flag 'r' read-only, 'w' read-write, 'c' created if missing, 'n' always new)."""
    global _defaultmod
    if _defaultmod is None:
        from . import dumb

        _defaultmod = _modules["dbm.dumb"] = dumb
    kind = whichdb(file) if "n" not in flag else None
    if kind is None:
        if "c" not in flag and "n" not in flag:
            raise _Error("db file doesn't exist; use 'c' or 'n' flag to create a new db")
        module = _defaultmod
    elif kind == "":
        raise _Error("db type could not be determined")
    elif kind not in _modules:
        raise _Error(f"db type is {kind}, but the module is not available (the sandbox's dbm has dbm.dumb only)")
    else:
        module = _modules[kind]
    return module.open(file, flag, mode)


def whichdb(filename: Any) -> str | None:
    """The backend that made the database at `filename` ("dbm.dumb", "dbm.sqlite3", "dbm.gnu", "dbm.ndbm"), "" for a
    file of no known kind, None when there is no such database."""
    filename = os.fsencode(filename)
    if _readable(filename + b".pag") and _readable(filename + b".dir"):
        return "dbm.ndbm"
    if _readable(filename + b".db"):
        return "dbm.ndbm"  # (CPython says so only when its ndbm opens it; it is not dumb's either way)
    try:
        os.stat(filename + b".dat")
        if os.stat(filename + b".dir").st_size == 0:
            return "dbm.dumb"  # a dumb database without keys
        with _open_binary(filename + b".dir") as f:
            if f.read(1) in (b"'", b'"'):
                return "dbm.dumb"
    except OSError:
        pass
    try:
        with _open_binary(filename) as f:
            head = f.read(16)
    except OSError:
        return None
    if head.startswith(b"SQLite format 3\0"):
        return "dbm.sqlite3"
    if len(head) < 4:
        return ""
    (magic,) = struct.unpack("=l", head[:4])
    if magic in (0x13579ACE, 0x13579ACD, 0x13579ACF):
        return "dbm.gnu"
    return ""


def _open_binary(path: bytes) -> Any:
    return builtins.open(path, "rb")


def _readable(path: bytes) -> bool:
    try:
        _open_binary(path).close()
    except OSError:
        return False
    return True
