"""Example skill: a small key-value store kept on the host for the kernel's lifetime, within quotas."""

from __future__ import annotations

import json
from typing import Any

from sandbox_kernel.protocol.bridge_data import encode


class QuotaExceeded(ValueError):
    """A store that would pass its quota (the guest sees the message)."""


class KeyValueSkill:
    """A key-value store on the host: values survive sandbox restarts (not kernel restarts)."""

    max_keys = 1000
    max_key_chars = 256
    max_total_bytes = 10 << 20  # all values together, as JSON

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}

    def set(self, key: str, value: Any) -> None:
        """Store JSON data (or bytes) under `key` (at most 1000 keys and 10 MiB in all)."""
        if not isinstance(key, str) or not 0 < len(key) <= self.max_key_chars:
            raise QuotaExceeded(f"keys are strings of 1 to {self.max_key_chars} characters")
        size = len(json.dumps(encode(value)))
        if key not in self._data and len(self._data) >= self.max_keys:
            raise QuotaExceeded(f"the store holds {self.max_keys} keys already (its quota); delete some first")
        total = sum(self._sizes.values()) - self._sizes.get(key, 0) + size
        if total > self.max_total_bytes:
            raise QuotaExceeded(
                f"storing {size} bytes would pass the store's quota of {self.max_total_bytes} bytes; delete some first"
            )
        self._data[key] = value
        self._sizes[key] = size

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under `key`, or `default`."""
        return self._data.get(key, default)

    def keys(self) -> list[str]:
        """All keys, sorted."""
        return sorted(self._data)

    def delete(self, key: str) -> bool:
        """Remove `key` (returns True); a missing key fails with KeyError (SkillError in the guest)."""
        del self._data[key]
        del self._sizes[key]
        return True
