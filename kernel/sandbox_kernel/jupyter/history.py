"""Input history of one kernel, answering Jupyter history_request (tail, range, search)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any


@dataclass
class Entry:
    session: int
    line: int
    source: str
    output: str | None = None


class History:
    """Cells stored with store_history=True, numbered by execution count."""

    def __init__(self, session: int = 1) -> None:
        self.session = session
        self.entries: list[Entry] = []

    def add(self, line: int, source: str) -> Entry:
        entry = Entry(self.session, line, source)
        self.entries.append(entry)
        return entry

    def query(  # the fields of a Jupyter history_request, as ipykernel passes them
        self,
        hist_access_type: str,
        output: bool = False,
        raw: bool = True,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
        **_: Any,
    ) -> list[list[Any]]:
        """Entries as the protocol wants them: [session, line, input] or [.., (input, output)].

        Inputs are kept as typed, so `raw` changes nothing.
        """
        if hist_access_type == "tail":
            found = self._unique(self.entries) if unique else list(self.entries)
            found = found[-n:] if n else found
        elif hist_access_type == "range":
            wanted = self.session if not session else (self.session + session if session < 0 else session)
            found = [
                e
                for e in self.entries
                if e.session == wanted and (start is None or e.line >= start) and (stop is None or e.line < stop)
            ]
        elif hist_access_type == "search":
            glob = pattern or "*"
            found = [e for e in self.entries if fnmatch.fnmatchcase(e.source, glob)]
            if unique:
                found = self._unique(found)
            if n:
                found = found[-n:]
        else:
            raise ValueError(f"unknown hist_access_type {hist_access_type!r}; use tail, range or search")
        if output:
            return [[e.session, e.line, (e.source, e.output)] for e in found]
        return [[e.session, e.line, e.source] for e in found]

    @staticmethod
    def _unique(entries: list[Entry]) -> list[Entry]:
        """Keep the latest occurrence of each input, in order."""
        seen: set[str] = set()
        kept: list[Entry] = []
        for entry in reversed(entries):
            if entry.source not in seen:
                seen.add(entry.source)
                kept.append(entry)
        return kept[::-1]
