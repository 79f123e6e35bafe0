"""SandboxPool with fake sandboxes: which sandboxes it launches, when, and what it reports."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from sandbox_kernel.sandbox.pool import SandboxPool
from sandbox_kernel.sandbox.supervision import StopCause


class FakeSandbox:
    def __init__(self, number: int) -> None:
        self.number = number
        self.alive = True
        self.death_reason: str | None = None
        self.death_reported = False

    async def kill(self, why: str, cause: StopCause = StopCause.CRASH) -> None:
        self.alive, self.death_reason = False, f"stopped because {why}"


class Launcher:
    def __init__(self) -> None:
        self.launched: list[FakeSandbox] = []

    async def __call__(self) -> Any:
        sandbox = FakeSandbox(len(self.launched) + 1)
        self.launched.append(sandbox)
        return sandbox


async def nothing(_: Any) -> None:
    return None


async def settle() -> None:
    """Let the pool's background tasks run to completion (they await nothing slow)."""
    for _ in range(10):
        await asyncio.sleep(0)


def pool_with(keep_spare: bool, spare_after_restart: bool) -> tuple[SandboxPool, Launcher]:
    launch = Launcher()
    return SandboxPool(launch, nothing, keep_spare, logging.getLogger("test"), spare_after_restart), launch


@pytest.mark.parametrize(
    ("keep_spare", "after_restart", "at_start", "after_a_restart"),
    [
        (True, False, 2, 3),  # always: the restart promotes the spare (2) and launches the next spare (3)
        (False, False, 1, 2),  # never: each restart launches one
        (False, True, 1, 3),  # 'auto' without cell_timeout: none at first; the restart launches one and a spare
    ],
    ids=["always", "never", "auto"],
)
def test_spares_are_launched_as_the_policy_says(keep_spare, after_restart, at_start, after_a_restart):
    async def go() -> tuple[int, int, bool]:
        pool, launch = pool_with(keep_spare, after_restart)
        first = await pool.get()
        await settle()
        at_start_count = len(launch.launched)
        await pool.restart("a test", StopCause.TIMEOUT)
        second = await pool.get()
        await settle()
        return at_start_count, len(launch.launched), first is not second and second.alive

    started, after, fresh = asyncio.run(go())
    assert (started, after) == (at_start, after_a_restart) and fresh


def test_a_restart_may_leave_the_next_spare_until_asked():
    async def go() -> list[int]:
        pool, launch = pool_with(True, False)
        await pool.get()
        await settle()
        counts = [len(launch.launched)]  # the first sandbox and a spare
        await pool.restart("a restore", StopCause.INTERRUPT, spare_now=False)
        await pool.get()
        await settle()
        counts.append(len(launch.launched))  # the spare became current; no next one yet
        pool.start_spare()
        pool.start_spare()
        await settle()
        counts.append(len(launch.launched))  # one next spare, however often asked
        return counts

    assert asyncio.run(go()) == [2, 2, 3]


@pytest.mark.parametrize(
    ("keep_spare", "after_restart", "launched"), [(False, True, 2), (False, False, 1), (True, False, 2)]
)
def test_expecting_restarts_launches_a_spare_under_auto(keep_spare, after_restart, launched):
    async def go() -> int:
        pool, launch = pool_with(keep_spare, after_restart)
        await pool.get()
        await settle()
        pool.expect_restarts("a test")
        await settle()
        return len(launch.launched)

    assert asyncio.run(go()) == launched


def test_a_start_abandoned_while_its_spare_boots_leaves_the_spare_to_the_next_start():
    """A restart during a start that awaits a booting spare: the next start takes that spare; none is orphaned."""

    async def go() -> tuple[int, int]:
        gate = asyncio.Event()
        launch = Launcher()

        async def slow_spares() -> Any:
            if launch.launched:  # every launch after the first boots until the gate opens
                await gate.wait()
            return await launch()

        pool = SandboxPool(slow_spares, nothing, True, logging.getLogger("test"))
        await pool.get()
        await settle()  # the spare's launch is under way, held at the gate
        await pool.restart("one", StopCause.INTERRUPT)
        await settle()  # that start now awaits the booting spare
        await pool.restart("two", StopCause.INTERRUPT)
        await settle()
        gate.set()
        current = await pool.get()
        await settle()
        return current.number, len(launch.launched)

    assert asyncio.run(go()) == (2, 3)  # the first spare became current; one next spare; nothing else launched


def test_a_death_between_requests_is_reported_once_and_starts_the_spare_policy():
    async def go() -> tuple[str | None, str | None, int]:
        pool, launch = pool_with(False, True)
        first = await pool.get()
        first.alive, first.death_reason = False, "the sandbox process was killed by SIGKILL"
        await pool.get()
        await settle()
        return pool.take_unreported_death(), pool.take_unreported_death(), len(launch.launched)

    told, again, launched = asyncio.run(go())
    assert told == "the sandbox process was killed by SIGKILL" and again is None
    assert launched == 3  # the replacement and, from now on, a spare


def test_a_death_a_request_reported_is_not_reported_again():
    async def go() -> tuple[str | None, bool]:
        pool, _ = pool_with(False, False)
        first = await pool.get()
        first.alive, first.death_reason = False, "crashed"
        pool.died_under_request(first)
        second = await pool.get()
        return pool.take_unreported_death(), second is not first

    assert asyncio.run(go()) == (None, True)


@pytest.mark.parametrize("killed", [True, False], ids=["killed-meanwhile", "alive"])
def test_a_spare_killed_while_it_warms_is_not_a_warming_failure(caplog, killed):
    """At shutdown the kernel kills every sandbox, a spare still warming up included (after a checkpoint or fork,
    'auto' keeps one): its warm request then fails because it was stopped on purpose, which its own end reports.
    A warm that fails on a live spare is still logged (the control)."""

    async def warm(sandbox: Any) -> None:
        if killed:
            await sandbox.kill("the kernel shut down")
        raise RuntimeError("the sandbox died: the sandbox was stopped because the kernel shut down")

    async def go():
        launch = Launcher()
        pool = SandboxPool(launch, nothing, True, logging.getLogger("test"), warm=warm)
        pool.start_spare()
        await settle()
        return launch

    with caplog.at_level(logging.WARNING, logger="test"):
        launch = asyncio.run(go())
    assert len(launch.launched) == 1
    warned = [r.getMessage() for r in caplog.records if "warming the spare sandbox failed" in r.getMessage()]
    assert warned == ([] if killed else [
        "warming the spare sandbox failed: RuntimeError('the sandbox died: the sandbox was stopped because the "
        "kernel shut down')"
    ])  # fmt: skip
