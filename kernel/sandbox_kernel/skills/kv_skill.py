"""Example skill: a small key-value store kept on the host for the kernel's lifetime."""

from __future__ import annotations

from typing import Any


class KeyValueSkill:
    """A key-value store on the host: values survive sandbox restarts (not kernel restarts)."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        """Store JSON data (or bytes) under `key`."""
        self._data[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under `key`, or `default`."""
        return self._data.get(key, default)

    def keys(self) -> list[str]:
        """All keys, sorted."""
        return sorted(self._data)

    def delete(self, key: str) -> bool:
        """Remove `key`; True if it was there. A missing key raises KeyError."""
        del self._data[key]
        return True
