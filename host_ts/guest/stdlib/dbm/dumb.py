"""A simple, slow dbm in pure Python, in the file format of CPython's `dbm.dumb`.

A database NAME is three files: NAME.dir, the index (one line per key: `'key', (offset, size)`, the key as Latin-1
text), NAME.dat, the values (each at a 512-byte boundary), and NAME.bak, the index before its last rewrite. The
index is kept in memory and written back on `sync()`, `close()` and every deletion.
"""

from __future__ import annotations

import ast
import builtins
import os
from collections.abc import Iterator, MutableMapping
from typing import Any

__all__ = ["error", "open"]

_BLOCK = 512
error = OSError


def _as_bytes(key: Any, what: str) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError(f"{what} must be bytes or strings")


class _Database(MutableMapping[bytes, bytes]):
    def __init__(self, base: Any, mode: int, flag: str) -> None:
        base = os.fsencode(base)
        self._mode = mode
        self._readonly = flag == "r"
        self._dirfile, self._datfile, self._bakfile = base + b".dir", base + b".dat", base + b".bak"
        self._index: dict[bytes, tuple[int, int]] | None = None
        if flag == "n":
            for path in (self._dirfile, self._bakfile, self._datfile):
                try:
                    os.remove(path)
                except OSError:
                    pass
        try:
            builtins.open(self._datfile, "rb").close()
        except OSError:
            if flag not in ("c", "n"):
                raise
            builtins.open(self._datfile, "wb").close()
            self._chmod(self._datfile)
        self._load(flag)

    def _load(self, flag: str) -> None:
        self._modified = False
        index: dict[bytes, tuple[int, int]] = {}
        try:
            f = builtins.open(self._dirfile, encoding="Latin-1")
        except OSError:
            if flag not in ("c", "n"):
                raise
            self._modified = True  # the index file is written at the first sync, even when empty
        else:
            with f:
                for line in f:
                    key, (pos, size) = ast.literal_eval(line.rstrip())
                    index[key.encode("Latin-1")] = (pos, size)
        self._index = index

    def _open_index(self) -> dict[bytes, tuple[int, int]]:
        if self._index is None:
            raise error("DBM object has already been closed")
        return self._index

    def _writable(self) -> dict[bytes, tuple[int, int]]:
        if self._readonly:
            raise error("The database is opened for reading only")
        index = self._open_index()
        self._modified = True
        return index

    def _commit(self) -> None:
        if self._index is None or not self._modified:
            return
        try:
            os.unlink(self._bakfile)
        except OSError:
            pass
        try:
            os.rename(self._dirfile, self._bakfile)  # the index before this rewrite
        except OSError:
            pass
        with builtins.open(self._dirfile, "w", encoding="Latin-1") as f:
            self._chmod(self._dirfile)
            f.writelines(_index_line(key, place) for key, place in self._index.items())
        self._modified = False

    sync = _commit

    def __getitem__(self, key: Any) -> bytes:
        pos, size = self._open_index()[_as_bytes(key, "keys")]
        with builtins.open(self._datfile, "rb") as f:
            f.seek(pos)
            return f.read(size)

    def _append(self, value: bytes) -> tuple[int, int]:
        with builtins.open(self._datfile, "rb+") as f:
            end = f.seek(0, 2)
            pos = -(-end // _BLOCK) * _BLOCK
            f.write(b"\0" * (pos - end) + value)
        return pos, len(value)

    def _overwrite(self, pos: int, value: bytes) -> tuple[int, int]:
        with builtins.open(self._datfile, "rb+") as f:
            f.seek(pos)
            f.write(value)
        return pos, len(value)

    def __setitem__(self, key: Any, value: Any) -> None:
        raw_key, raw_value = _as_bytes(key, "keys"), _as_bytes(value, "values")
        index = self._writable()
        if raw_key not in index:
            index[raw_key] = self._append(raw_value)
            with builtins.open(self._dirfile, "a", encoding="Latin-1") as f:  # the index grows line by line
                self._chmod(self._dirfile)
                f.write(_index_line(raw_key, index[raw_key]))
            return
        pos, size = index[raw_key]
        fits = -(-len(raw_value) // _BLOCK) <= -(-size // _BLOCK)  # in the blocks the old value had
        index[raw_key] = self._overwrite(pos, raw_value) if fits else self._append(raw_value)

    def __delitem__(self, key: Any) -> None:
        raw_key = _as_bytes(key, "keys")
        del self._writable()[raw_key]  # (its blocks in the .dat file stay unused until reorganize())
        self._commit()

    def reorganize(self) -> None:
        """Rewrite the .dat file with the current values only (space of deleted or moved values is given back)."""
        index = self._writable()
        values = [(key, self[key]) for key in index]
        builtins.open(self._datfile, "wb").close()
        for key, value in values:
            index[key] = self._append(value)
        self._commit()

    def keys(self) -> list[bytes]:  # type: ignore[override]  # a list, as CPython's dbm.dumb
        return list(self._open_index())

    def items(self) -> list[tuple[bytes, bytes]]:  # type: ignore[override]
        return [(key, self[key]) for key in self.keys()]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (str, bytes, bytearray)):
            return False
        return _as_bytes(key, "keys") in self._open_index()

    def __iter__(self) -> Iterator[bytes]:
        return iter(list(self._open_index()))

    iterkeys = __iter__

    def __len__(self) -> int:
        return len(self._open_index())

    def close(self) -> None:
        try:
            self._commit()
        finally:
            self._index = None

    def __del__(self) -> None:
        if getattr(self, "_index", None) is not None:
            self.close()

    def __enter__(self) -> _Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _chmod(self, path: bytes) -> None:
        os.chmod(path, self._mode)


def _index_line(key: bytes, place: tuple[int, int]) -> str:
    return f"{key.decode('Latin-1')!r}, {place!r}\n"


def open(file: Any, flag: str = "c", mode: int = 0o666) -> _Database:  # CPython's name
    """Open the database `file` (flag 'r' read-only, 'w' read-write, 'c' created if missing, 'n' always new);
    `mode` (less the umask) is given to the files it creates."""
    if flag not in ("r", "w", "c", "n"):
        raise ValueError("Flag must be one of 'r', 'w', 'c', or 'n'")
    umask = os.umask(0)
    os.umask(umask)
    return _Database(file, mode & ~umask, flag)
