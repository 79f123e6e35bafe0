"""Tracebacks that show the user's own frames only, for errors the sandbox raises on purpose."""

from __future__ import annotations

import re
import traceback

_INTERNAL = re.compile(r"/(sandbox_guest|IPython|_pyodide|pyodide)/")
_CELL = re.compile(r'File "<ipython-input-(\d+)-[0-9a-f]+>"')


class CleanTraceback:
    """Mixin: IPython renders the exception without the sandbox's internal frames."""

    def _render_traceback_(self) -> list[str]:
        frames = [f for f in traceback.extract_tb(self.__traceback__) if not _INTERNAL.search(f.filename)]  # type: ignore[attr-defined]
        shown = [_CELL.sub(r"Cell In[\1]", line) for line in traceback.format_list(frames)]
        lines = ["Traceback (most recent call last):\n", *shown] if shown else []
        return [*lines, f"{type(self).__name__}: {self}"]
