"""sys.stdout / sys.stderr replacements that stream each write to the kernel."""

from __future__ import annotations

import io
from collections.abc import Callable

from . import _host


class _TextStream(io.TextIOBase):
    """What the guest's standard streams have in common: a name, UTF-8, no terminal."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]  # read-only here; typeshed declares io's a plain attribute
        return "utf-8"

    def isatty(self) -> bool:
        return False


class BridgeStream(_TextStream):
    """A text stream whose writes go to the kernel a line at a time (see `_host.write`); flush() sends the rest."""

    def __init__(self, kind: int, name: str) -> None:
        super().__init__(name)
        self._kind = kind

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if s:
            _host.write(self._kind, s)
        return len(s)

    def flush(self) -> None:
        _host.flush_streams()


class InputStream(_TextStream):
    """sys.stdin: each line read is asked of the frontend, as input() asks; EOF once it answers with Ctrl-D.

    So a script run by `sandbox-kernel run` reads the command's piped stdin with input() or sys.stdin alike.
    """

    def __init__(self, ask: Callable[[], str]) -> None:
        super().__init__("<stdin>")
        self._ask = ask
        self._line = ""
        self._eof = False

    def readable(self) -> bool:
        return True

    def reset(self) -> None:
        """A new cell: what was not read is gone, and an EOF seen before no longer holds."""
        self._line, self._eof = "", False

    # typeshed's io.TextIOBase also inherits IOBase's bytes readline; a text stream's returns str
    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        if not self._line and not self._eof:
            try:
                self._line = self._ask() + "\n"
            except EOFError:
                self._eof = True
        cut = len(self._line) if size is None or size < 0 else size
        line, self._line = self._line[:cut], self._line[cut:]
        return line

    def read(self, size: int | None = -1) -> str:
        parts: list[str] = []
        left = -1 if size is None or size < 0 else size
        while left != 0:
            line = self.readline(left)
            if not line:
                break
            parts.append(line)
            left = left - len(line) if left > 0 else left
        return "".join(parts)
