"""Example skill: the host's clock."""

from __future__ import annotations

import asyncio
import datetime


class TimeSkill:
    """The host's clock (the sandbox has its own, but this one is the host's, with its time zone)."""

    def get_current_time(self, tz: str = "UTC") -> str:
        """The current time as an ISO 8601 string, in UTC or in the host's local zone (tz="local")."""
        now = datetime.datetime.now(datetime.timezone.utc)
        return (now.astimezone() if tz == "local" else now).isoformat()

    def add_days(self, date: str, days: int = 1) -> str:
        """The ISO date `days` after `date`."""
        return (datetime.date.fromisoformat(date) + datetime.timedelta(days=days)).isoformat()

    async def wait_then_time(self, seconds: float = 0.1) -> str:
        """Wait on the host (async skill), then tell the time."""
        await asyncio.sleep(seconds)
        return self.get_current_time()
