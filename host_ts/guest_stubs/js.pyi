"""Pyodide's `js` module: the JavaScript global scope (only what the guest glue uses)."""

from typing import Any

class Object:
    @staticmethod
    def fromEntries(entries: Any, /) -> Any: ...

def __getattr__(name: str) -> Any: ...
