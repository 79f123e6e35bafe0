"""sys.stdout / sys.stderr replacements that stream each write to the kernel."""

from __future__ import annotations

import io

from . import _host


class BridgeStream(io.TextIOBase):
    """A text stream whose writes go straight to the kernel, unbuffered."""

    def __init__(self, kind: int, name: str) -> None:
        super().__init__()
        self._kind = kind
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if s:
            _host.write(self._kind, s)
        return len(s)

    def flush(self) -> None:
        _host.flush_streams()
