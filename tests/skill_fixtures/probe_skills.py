"""Skills used by the tests: each one exercises one path of the bridge."""

from __future__ import annotations

import asyncio
import time
from typing import Any


class ProbeSkill:
    """Echoes, sleeps, fails and returns odd things, for the tests."""

    def echo(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Return what was passed."""
        return {"args": list(args), "kwargs": kwargs}

    async def echo_async(self, value: Any) -> Any:
        """Async skill: return `value` after yielding to the loop."""
        await asyncio.sleep(0.01)
        return value

    def slow(self, seconds: float) -> str:
        """Sleep on the host (in a thread)."""
        time.sleep(seconds)
        return "slept"

    def fail_with_path(self) -> None:
        """Raise an error whose message holds a host path."""
        raise FileNotFoundError(2, "No such file or directory", "/root/host-only/secret.txt")

    def big(self, n: int) -> str:
        """A string of n characters."""
        return "x" * n

    def not_data(self) -> Any:
        """Return something that is not JSON data."""
        return object()

    def _private(self) -> str:
        return "must never be reachable"


class GuardedSkill:
    """Policies in the tests: deny, ask."""

    def touch(self) -> str:
        """Return 'touched'."""
        return "touched"

    def other(self) -> str:
        """Return 'other'."""
        return "other"
