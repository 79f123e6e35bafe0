"""The threads that run synchronous skill methods (skills/threads.py): results, errors, no blocking, bounds."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sandbox_kernel.skills.threads import SkillThreads


def test_a_result_comes_back_from_another_thread() -> None:
    threads = SkillThreads(2)

    async def scenario() -> tuple[str, str]:
        return await threads.run(lambda: threading.current_thread().name), threading.current_thread().name

    on_thread, on_loop = asyncio.run(scenario())
    assert on_thread.startswith("skill-") and on_thread != on_loop


def test_an_exception_is_raised_to_the_caller() -> None:
    def fails() -> None:
        raise KeyError("nope")

    async def scenario() -> None:
        await SkillThreads(1).run(fails)

    with pytest.raises(KeyError, match="nope"):
        asyncio.run(scenario())


def test_a_blocked_skill_neither_blocks_the_loop_nor_another_call() -> None:
    threads = SkillThreads(4)
    release = threading.Event()

    async def scenario() -> tuple[str, int, bool]:
        blocked = asyncio.ensure_future(threads.run(lambda: release.wait(30)))
        ticks = 0
        quick = asyncio.ensure_future(threads.run(lambda: "quick"))
        while not quick.done():  # the loop keeps running while a thread is blocked
            ticks += 1
            await asyncio.sleep(0.001)
        result = await quick
        release.set()
        return result, ticks, await blocked

    result, ticks, released = asyncio.run(scenario())
    assert (result, released) == ("quick", True)
    assert ticks >= 1


def test_threads_are_started_as_needed_up_to_the_bound() -> None:
    threads = SkillThreads(2)
    release = threading.Event()
    two_running = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, at most

    def hold() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running)
            if running[0] == 2:
                two_running.set()
        release.wait(30)
        with lock:
            running[0] -= 1

    async def scenario() -> None:
        calls = [asyncio.ensure_future(threads.run(hold)) for _ in range(3)]
        assert await asyncio.to_thread(two_running.wait, 10)
        assert threads.threads == 2, "the third call found no idle thread and none may be added: it waits"
        release.set()
        await asyncio.gather(*calls)

    asyncio.run(scenario())
    assert running == [0, 2]  # all three ran, never more than two at once
    asyncio.run(threads.run(lambda: None))  # sequential calls reuse the idle threads
    assert threads.threads == 2


def test_a_call_given_up_on_finishes_on_its_thread_and_its_result_is_dropped() -> None:
    threads = SkillThreads(1)
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(30)
        finished.set()
        return "late"

    async def scenario() -> str:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(threads.run(slow), 0.05)
        release.set()
        return await threads.run(lambda: "next")  # the same thread serves the next call once free

    assert asyncio.run(scenario()) == "next"
    assert finished.wait(10)
