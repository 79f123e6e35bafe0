"""AsyncSandboxPool (client/pool.py), on real kernels: sandboxes started ahead of need, each handed out once."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from conftest import sandbox_pids
from sandbox_kernel import AsyncSandboxPool
from sandbox_kernel.client.agent import AsyncSandbox
from sandbox_kernel.client.local_kernel import KernelNotInstalled


def kernel_pid(sandbox: AsyncSandbox) -> int:
    return int(sandbox.kernel.km.provisioner.pid)  # type: ignore[union-attr]


def gone(pid: int, timeout: float = 20) -> bool:
    """Whether process `pid` ends (or is a zombie) within `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as f:
                if "State:\tZ" in f.read():
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


async def until_ready(pool: AsyncSandboxPool, count: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while pool.ready < count:
        assert time.monotonic() < deadline, "the pool did not fill"
        await asyncio.sleep(0.05)


def test_sandboxes_are_handed_out_started_fresh_and_once() -> None:
    async def scenario() -> None:
        async with AsyncSandboxPool(size=1) as pool:
            await until_ready(pool, 1)
            first = await pool.take()
            first_pid = kernel_pid(first)
            # Taken ready: its kernel's sandbox process is already up (Python started and warmed).
            assert len(sandbox_pids(kernel_pid(first))) == 1
            async with first:
                r = await first.run("1+1")
                assert r.text == "2"
                assert r.execution_count == 1  # the warm-up cell left no history
                names = await first.run("sorted(n for n in globals() if 'warm' in n), In[:2]")
                assert names.text == "([], ['', '1+1'])"  # nothing of the warm-up in the namespace or the history
            second = await pool.take()
            async with second:
                assert kernel_pid(second) != first_pid
                assert gone(first_pid), "a closed sandbox's kernel ends: it is never handed out again"
                assert (await second.run("1+1")).execution_count == 1
            assert pool.ready <= 1

    asyncio.run(scenario())


def test_a_sandbox_that_died_while_it_waited_is_not_handed_out() -> None:
    async def scenario() -> None:
        async with AsyncSandboxPool(size=1, warm=False) as pool:
            await until_ready(pool, 1)
            waiting = pool._ready._queue[0]  # type: ignore[attr-defined]
            dead = kernel_pid(waiting)
            os.kill(dead, signal.SIGKILL)
            # Until the process has ended (all its threads: its main thread is a zombie a little before that).
            for _ in range(400):  # 20 s at most
                if await waiting.kernel.gone() is not None:
                    break
                await asyncio.sleep(0.05)
            taken = await pool.take(timeout=180)
            async with taken:
                assert kernel_pid(taken) != dead
                assert (await taken.run("6*7")).text == "42"

    asyncio.run(scenario())


def test_close_stops_the_sandboxes_nobody_took() -> None:
    async def scenario() -> list[int]:
        pool = AsyncSandboxPool(size=2, warm=False)
        async with pool:
            await until_ready(pool, 2)
            pids = [kernel_pid(sb) for sb in list(pool._ready._queue)]  # type: ignore[attr-defined]
        assert pool.ready == 0
        with pytest.raises(RuntimeError, match="closed"):
            await pool.take()
        return pids

    pids = asyncio.run(scenario())
    assert len(set(pids)) == 2
    assert all(gone(pid) for pid in pids)


def test_a_start_that_fails_is_raised_by_take_not_waited_on() -> None:
    async def scenario() -> None:
        async with AsyncSandboxPool(kernel_name="no-such-kernel") as pool:
            with pytest.raises(KernelNotInstalled):
                await pool.take(timeout=60)

    asyncio.run(scenario())


def test_its_keywords_are_checked_before_anything_starts() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        AsyncSandboxPool(no_such_option=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="at least one"):
        AsyncSandboxPool(size=0)
