"""The dispatcher of guest traffic, with fake services: checked, bounded, and every request answered once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from sandbox_kernel.dispatcher import MAX_OPEN_REQUESTS, RequestDispatcher
from sandbox_kernel.output import OutputRouter
from sandbox_kernel.sanitize import OutputSanitizer

SECRET = "guest-secret-content"


class FakeServices:
    """Records requests; `block` makes handlers wait until released; `fail` makes them raise."""

    def __init__(self, fail: bool = False, block: bool = False) -> None:
        self.seen: list[dict[str, Any]] = []
        self.fail = fail
        self.release = asyncio.Event()
        if not block:
            self.release.set()

    async def _serve(self, event: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(event)
        await self.release.wait()
        if self.fail:
            raise TypeError(f"handler bug {SECRET}")
        return {"value": event["type"]}

    input_request = skill_call = load_packages = pip_installed = _serve


class Harness:
    def __init__(self, services: FakeServices, max_bytes: int | None = 10_000) -> None:
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.router = OutputRouter(lambda t, c, m: self.sent.append((t, c, m)), max_bytes)
        self.dispatcher = RequestDispatcher(
            self.router,
            OutputSanitizer(),
            services,
            lambda n, a: self.answers.append((n, a)),
            logging.getLogger("test"),
            request_bytes=2_000,
        )

    def event(self, event: Any) -> None:
        self.dispatcher.on_event(event if isinstance(event, bytes) else json.dumps(event).encode())

    def texts(self) -> str:
        return json.dumps(self.sent)


def run(coro_fn):
    return asyncio.run(coro_fn())


def test_display_is_cleaned_and_published():
    async def go():
        h = Harness(FakeServices())
        h.event(
            {
                "type": "iopub",
                "msg_type": "display_data",
                "content": {
                    "data": {"text/html": "<b>x</b><script>1</script>", "application/javascript": "1"},
                    "metadata": {},
                    "transient": {},
                },
            }
        )
        h.dispatcher.finish()
        return h

    h = run(go)
    displays = [c for t, c, _ in h.sent if t == "display_data"]
    assert displays == [{"data": {"text/html": "<b>x</b>"}, "metadata": {}, "transient": {}}]
    notices = [(c["text"], m) for t, c, m in h.sent if t == "stream"]
    assert len(notices) == 1 and "application/javascript" in notices[0][0]
    assert notices[0][1] == {"sandbox_kernel": {"notice": "output_dropped"}}


def test_requests_are_answered_once_each():
    async def go():
        services = FakeServices()
        h = Harness(services)
        h.event({"type": "skill_call", "n": 5, "skill": "S", "method": "m", "args": [], "kwargs": {}})
        h.event({"type": "input_request", "n": 6, "prompt": "p", "password": False})
        await asyncio.gather(*h.dispatcher.open)
        return h

    h = run(go)
    assert sorted(h.answers) == [(5, {"value": "skill_call"}), (6, {"value": "input_request"})]


def test_a_failing_handler_still_answers_and_never_leaks_its_message():
    async def go():
        h = Harness(FakeServices(fail=True))
        h.event({"type": "load_packages", "n": 9, "imports": ["x"]})
        await asyncio.gather(*h.dispatcher.open, return_exceptions=True)
        return h

    h = run(go)
    assert len(h.answers) == 1 and h.answers[0][0] == 9
    error = h.answers[0][1]["error"]
    assert error["type"] == "SandboxError" and "TypeError" in error["message"] and SECRET not in error["message"]


def test_malformed_requests_with_a_number_are_answered():
    async def go():
        h = Harness(FakeServices())
        h.event({"type": "pip_installed", "n": 3, "specs": [{"not": "a string"}]})  # the old wedge
        h.event({"type": "pip_installed", "n": "x", "specs": 5})  # no usable number: nothing to answer
        h.event({"type": "nonsense", "n": 4, "x": SECRET})
        h.dispatcher.finish()
        return h

    h = run(go)
    assert [n for n, _ in h.answers] == [3, 4]
    assert all(a["error"]["type"] == "SandboxProtocolError" for _, a in h.answers)
    assert h.dispatcher.invalid == 3
    notices = [c["text"] for t, c, _ in h.sent if t == "stream"]
    assert len(notices) == 1 and "and 2 more" in notices[0] and SECRET not in h.texts()


def test_too_many_open_requests_are_refused_at_once():
    async def go():
        services = FakeServices(block=True)
        h = Harness(services)
        for n in range(1, MAX_OPEN_REQUESTS + 3):
            h.event({"type": "input_request", "n": n, "prompt": "p", "password": False})
        await asyncio.sleep(0)
        refused = list(h.answers)
        services.release.set()
        await asyncio.gather(*h.dispatcher.open)
        return refused, h

    refused, h = run(go)
    assert [n for n, _ in refused] == [MAX_OPEN_REQUESTS + 1, MAX_OPEN_REQUESTS + 2]
    assert len(h.answers) == MAX_OPEN_REQUESTS + 2  # each exactly once
    assert len({n for n, _ in h.answers}) == MAX_OPEN_REQUESTS + 2


def test_finish_answers_requests_still_open():
    async def go():
        services = FakeServices(block=True)
        h = Harness(services)
        h.event({"type": "skill_call", "n": 1, "skill": "S", "method": "m", "args": [], "kwargs": {}})
        await asyncio.sleep(0)
        h.dispatcher.finish()
        await asyncio.gather(*h.dispatcher.open, return_exceptions=True)
        return h

    h = run(go)
    assert h.answers == [(1, {"error": {"type": "KeyboardInterrupt", "message": "interrupted", "exception": ""}})]


def test_events_over_the_budget_are_dropped_before_parsing():
    async def go():
        h = Harness(FakeServices(), max_bytes=5_000)
        h.dispatcher.on_event(b"{" + b"x" * 50_000)  # not even JSON: never parsed
        h.event({"type": "iopub", "msg_type": "error", "content": {"ename": "E", "evalue": "v" * 100, "traceback": []}})
        h.dispatcher.finish()
        return h

    h = run(go)
    assert h.dispatcher.invalid == 0  # dropped for its size, not parsed and found invalid
    assert h.router.truncated
    assert [t for t, _, _ in h.sent] == ["stream"]  # only the truncation notice; the error came after it


@pytest.mark.parametrize("msg_type", ["error", "clear_output", "display_data"])
def test_every_message_type_counts_against_the_budget(msg_type):
    contents = {
        "error": {"ename": "E", "evalue": "v" * 400, "traceback": ["t" * 400]},
        "clear_output": {"wait": False},
        "display_data": {"data": {"text/plain": "d" * 400}, "metadata": {}, "transient": {}},
    }

    async def go():
        h = Harness(FakeServices(), max_bytes=3_000)
        for _ in range(500):
            h.event({"type": "iopub", "msg_type": msg_type, "content": contents[msg_type]})
        h.dispatcher.finish()
        return h

    h = run(go)
    published = [t for t, _, m in h.sent if not m]
    assert 0 < len(published) < 500 and h.router.truncated
    assert sum(len(json.dumps(c, separators=(",", ":"))) for t, c, m in h.sent if not m) <= 3_000
