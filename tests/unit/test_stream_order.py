"""Stream text is held and sent per stream as ipykernel's OutStream does: stdout then stderr at a flush."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandbox_kernel.jupyter.output import FLUSH_INTERVAL, OutputRouter

Sent = list[tuple[str, Any]]


def router_and_sent() -> tuple[OutputRouter, Sent]:
    sent: Sent = []

    def send(msg_type: str, content: dict[str, Any], metadata: dict[str, Any], buffers: Any = None) -> None:
        sent.append((msg_type, (content["name"], content["text"]) if msg_type == "stream" else content))

    return OutputRouter(send), sent


Timer = tuple[float, Any, tuple[Any, ...]]  # (delay, callback, its arguments)


def held_timers(monkeypatch: pytest.MonkeyPatch) -> list[Timer]:
    """The running loop's call_later, recording each timer instead of starting it: the test runs them out."""
    timers: list[Timer] = []

    def call_later(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        timers.append((delay, callback, args))
        return asyncio.TimerHandle(0.0, lambda: None, (), asyncio.get_running_loop())

    monkeypatch.setattr(asyncio.get_running_loop(), "call_later", call_later)
    return timers


def test_a_quick_cell_shows_its_stdout_then_its_stderr() -> None:
    async def cell() -> Sent:
        router, sent = router_and_sent()
        for name, text in [("stderr", "b\n"), ("stdout", "a\n"), ("stderr", "c\n"), ("stdout", "d")]:
            router.stream(name, text)
        router.publish("display_data", {"data": {"text/plain": "1"}, "metadata": {}})
        router.stream("stderr", "e\n")
        router.stream("stdout", "f\n")
        router.flush()  # the request's end
        return sent

    assert asyncio.run(cell()) == [
        ("stream", ("stdout", "a\nd")),
        ("stream", ("stderr", "b\nc\n")),
        ("display_data", {"data": {"text/plain": "1"}, "metadata": {}}),
        ("stream", ("stdout", "f\n")),
        ("stream", ("stderr", "e\n")),
    ]


def test_each_stream_is_sent_by_its_own_timer_from_its_first_held_text(monkeypatch: pytest.MonkeyPatch) -> None:
    async def cell() -> tuple[list[float], Sent]:
        timers = held_timers(monkeypatch)
        router, sent = router_and_sent()
        router.stream("stderr", "first\n")
        router.stream("stdout", "second\n")
        router.stream("stderr", "third\n")  # held with the first: no second timer
        delays = [delay for delay, _, _ in timers]
        _, send_stderr, args = timers[0]
        send_stderr(*args)  # stderr's interval ends first: only its text goes
        early = list(sent)
        _, send_stdout, args = timers[1]
        send_stdout(*args)
        return delays, [*early, ("then", None), *sent[len(early) :]]

    delays, sent = asyncio.run(cell())
    assert delays == [FLUSH_INTERVAL, FLUSH_INTERVAL]
    assert sent == [("stream", ("stderr", "first\nthird\n")), ("then", None), ("stream", ("stdout", "second\n"))]


def test_a_flush_leaves_the_timers_running_as_ipykernels_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """ipykernel's own order after a display: the timers started before it send what was printed after it."""

    async def cell() -> tuple[int, Sent]:
        timers = held_timers(monkeypatch)
        router, sent = router_and_sent()
        router.stream("stderr", "b\n")
        router.stream("stdout", "a\n")
        router.publish("display_data", {"data": {"text/plain": "1"}, "metadata": {}})
        router.stream("stdout", "c\n")
        router.stream("stderr", "d\n")
        started = len(timers)
        for _, ran_out, args in timers:  # stderr's timer, started first, runs out first
            ran_out(*args)
        return started, sent

    started, sent = asyncio.run(cell())
    assert started == 2
    assert sent[3:] == [("stream", ("stderr", "d\n")), ("stream", ("stdout", "c\n"))]


def test_nothing_is_sent_for_a_stream_with_no_text() -> None:
    async def cell() -> Sent:
        router, sent = router_and_sent()
        router.stream("stdout", "")
        router.flush()
        return sent

    assert asyncio.run(cell()) == []
