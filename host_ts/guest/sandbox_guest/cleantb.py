"""Tracebacks that show the user's own frames only, for errors the sandbox raises on purpose."""

from __future__ import annotations

import re
import traceback
from types import TracebackType
from typing import Any

GLUE = re.compile(r"/sandbox_guest/")
INTERNAL = re.compile(r"/(sandbox_guest|IPython|_pyodide|pyodide)/")  # the glue's, IPython's and Pyodide's files
_CELL = re.compile(r'File "<ipython-input-(\d+)-[0-9a-f]+>"')


def without_frames(tb: TracebackType | None, internal: re.Pattern[str] = INTERNAL) -> TracebackType | None:
    """`tb` without the frames whose file `internal` matches (by default the glue's, IPython's and Pyodide's),
    relinked in place; None when no other frame is left."""
    kept = []
    while tb is not None:
        if not internal.search(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    head = None
    for entry in reversed(kept):
        entry.tb_next = head
        head = entry
    return head


class CleanTraceback:
    """Mixin: IPython renders the exception without the sandbox's internal frames, in its usual form (as
    ipykernel shows the same error raised in the cell); with `message_only` set, as a UsageError: the message
    alone (e.g. for a magic, whose line is all the cell's frame would show)."""

    message_only = False

    def _render_traceback_(self) -> list[str]:
        last = f"{type(self).__name__}: {self}"
        if self.message_only:
            return [last]
        tb = without_frames(self.__traceback__)  # type: ignore[attr-defined]
        shell = _shell()
        if shell is not None and tb is not None:
            try:
                lines: list[str] = shell.InteractiveTB.structured_traceback(type(self), self, tb, tb_offset=0)
                return lines
            except Exception:
                pass  # the plain form below
        shown = [_CELL.sub(r"Cell In[\1]", line) for line in traceback.format_list(traceback.extract_tb(tb))]
        lines = ["Traceback (most recent call last):\n", *shown] if shown else []
        return [*lines, last]


def _shell() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance() if InteractiveShell.initialized() else None
