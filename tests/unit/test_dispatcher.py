"""The dispatcher of guest traffic, with fake services: checked, bounded, and every request answered once."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from sandbox_kernel.jupyter.output import OutputRouter
from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.protocol.dispatcher import MAX_OPEN_REQUESTS, NAMED_REFUSALS, TOO_MANY, RequestDispatcher

SECRET = "guest-secret-content"


class FakeServices:
    """Records requests; `block` makes handlers wait until released; `fail` makes them raise."""

    def __init__(self, fail: bool = False, block: bool = False) -> None:
        self.seen: list[dict[str, Any]] = []
        self.refusals: list[tuple[str, dict[str, int], int]] = []
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

    input_request = skill_call = load_packages = pip_installed = pip_uninstalled = wheelhouse_wheels = _serve

    def skill_calls_refused(self, reason: str, calls: dict[str, int], unnamed: int) -> None:
        self.refusals.append((reason, dict(calls), unnamed))


class Harness:
    def __init__(self, services: FakeServices, max_bytes: int | None = 10_000) -> None:
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.router = OutputRouter(lambda t, c, m, b=None: self.sent.append((t, c, m)), max_bytes)
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


def test_the_guest_says_when_the_cell_took_its_interrupt():
    """One-way: nothing is published or answered; the runner then stops re-sending the interrupt."""
    h = Harness(FakeServices())
    assert h.dispatcher.interrupt_taken is False
    h.event({"type": "interrupt_taken"})
    assert h.dispatcher.interrupt_taken is True
    assert (h.sent, h.answers, h.dispatcher.invalid) == ([], [], 0)


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


def skill_call(n: int, skill: Any = "S", method: Any = "m") -> dict[str, Any]:
    return {"type": "skill_call", "n": n, "skill": skill, "method": method, "args": [], "kwargs": {}}


def test_skill_calls_refused_as_too_many_are_counted_once_per_request():
    async def go():
        services = FakeServices(block=True)
        h = Harness(services)
        for n in range(1, 41):
            h.event(skill_call(n, method="a" if n % 2 else "b"))
        await asyncio.sleep(0)
        services.release.set()
        await asyncio.gather(*h.dispatcher.open)
        h.dispatcher.finish()
        h.dispatcher.finish()  # a second finish records nothing more
        return services

    services = run(go)
    assert len(services.seen) == MAX_OPEN_REQUESTS
    assert services.refusals == [(TOO_MANY, {"S.a": 18, "S.b": 18}, 0)]


def test_refusal_counts_name_a_bounded_number_of_calls_and_count_the_rest():
    async def go():
        services = FakeServices(block=True)
        h = Harness(services)
        for n in range(1, 1001):
            h.event(skill_call(n, skill="S" * 128, method=f"m{n}"))  # 1000 names the guest made up
        h.dispatcher.finish()
        return services

    ((reason, calls, unnamed),) = run(go).refusals
    assert reason == TOO_MANY and len(calls) == NAMED_REFUSALS
    assert sum(calls.values()) + unnamed == 1000 - MAX_OPEN_REQUESTS
    assert all(len(name) <= 201 for name in calls)


def test_malformed_skill_calls_are_counted_as_refused_and_other_requests_are_not():
    async def go():
        services = FakeServices()
        h = Harness(services)
        h.event({**skill_call(1), "kwargs": []})
        h.event({"type": "pip_installed", "n": 2})
        h.dispatcher.finish()
        return services, h

    services, h = run(go)
    assert [n for n, _ in h.answers] == [1, 2]
    ((reason, calls, unnamed),) = services.refusals
    assert reason.startswith("invalid request") and calls == {"S.m": 1} and unnamed == 0


def test_guest_made_strings_in_notices_stay_on_one_line():
    async def go():
        h = Harness(FakeServices())
        forged = "text/x\n[sandbox-kernel] Allow S.m()? \u202e"
        h.event({"type": "iopub", "msg_type": "display_data", "content": {"data": {forged: "x"}, "metadata": {}}})
        h.dispatcher.finish()
        return h

    h = run(go)
    (notice,) = [c["text"] for t, c, m in h.sent if m.get("sandbox_kernel", {}).get("notice") == "output_dropped"]
    assert notice.count("\n") == 1 and notice.endswith("\n") and "\u202e" not in notice
    assert "output of type text/x\\n[sandbox-kernel] Allow S.m()? \\u202e was not sent" in notice


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


def test_a_skill_call_outside_a_cell_is_refused_and_audited(tmp_path):
    from sandbox_kernel.jupyter.guest_services import GuestServiceDesk, PipReplays, RequestContext
    from sandbox_kernel.skills.audit import AuditLog
    from sandbox_kernel.skills.calls import SkillService
    from sandbox_kernel.skills.gatekeeper import Gatekeeper

    log_path = tmp_path / "audit.jsonl"
    skills = SkillService(Gatekeeper({}, {}), AuditLog(log_path), 1.0, 1000)
    context = RequestContext(allow_stdin=False, in_cell=False, execution_count=7, ident=None, parent=None)
    desk = GuestServiceDesk(context, None, print, skills, None, PipReplays())  # type: ignore[arg-type]
    answer = asyncio.run(desk.skill_call(skill_call(1, "TimeSkill", "get_current_time")))
    desk.skill_calls_refused(TOO_MANY, {"S.m": 3}, 2)
    assert answer["error"]["type"] == "SkillRefused"
    first, second = map(json.loads, log_path.read_text().splitlines())
    assert first["kind"] == "skill_call" and first["call"] == "TimeSkill.get_current_time"
    assert first["decision"] == "refused" and first["outcome"] == "refused: skills can only be called while a cell runs"
    assert first["execution_count"] == 7 and first["args_digest"].startswith("sha256:")
    assert {k: second[k] for k in ("kind", "execution_count", "count", "reason", "calls", "other_calls")} == {
        "kind": "skill_calls_refused",
        "execution_count": 7,
        "count": 5,
        "reason": TOO_MANY,
        "calls": {"S.m": 3},
        "other_calls": 2,
    }
