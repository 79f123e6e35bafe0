"""Serving the guest's `device.Skill.method(...)` calls: gatekeeper, approval, run, audit."""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox_kernel.protocol import bridge_data
from sandbox_kernel.skills.approvals import (
    DAY_HOURS,
    MARK,
    VERDICTS,
    Approval,
    approval_for,
    code_changed_note,
    full_view,
    parse_answer,
    refusal_reason,
)
from sandbox_kernel.skills.audit import AuditLog, digest
from sandbox_kernel.skills.gatekeeper import Gatekeeper, SkillRefused
from sandbox_kernel.skills.grants import Decision, GrantStore, GrantStoreError
from sandbox_kernel.skills.threads import SkillThreads

_SKILL_THREADS = SkillThreads(max_threads=8)  # sync skills run here
MAX_VIEWS = 3  # times a person may ask to see the whole call before answering

# Asks a person about one call; returns their raw answer, None if nobody can answer.
AskPerson = Callable[[Approval], Awaitable[str | None]]
# Shows a person a message from the kernel (the full arguments of a call they asked to see).
ShowPerson = Callable[[str], None]
Approver = Callable[[str, str, list[Any], dict[str, Any]], Any]


class SkillService:
    """Runs allowed skill calls on the host and answers the guest."""

    def __init__(
        self,
        gatekeeper: Gatekeeper,
        audit: AuditLog,
        timeout: float,
        max_bytes: int,
        approver: Approver | None = None,
        grants: GrantStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gatekeeper = gatekeeper
        self.audit = audit
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.approver = approver
        self.grants = grants  # lasting approvals ([d]ay, [a]lways); None: answers last for the session at most
        self.clock = clock

    async def call(
        self, event: dict[str, Any], ask: AskPerson, execution_count: int, show: ShowPerson
    ) -> dict[str, Any]:
        """The answer for the guest: {"value": data} or {"error": {type, message, exception}}."""
        started = time.monotonic()
        skill, method = event.get("skill"), event.get("method")
        args, kwargs = event.get("args", []), event.get("kwargs", {})
        decision, outcome = "refused", "refused"
        try:
            found, name = self.gatekeeper.resolve(skill, method)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise bridge_data.BridgeDataError("arguments must be a list and keyword arguments an object")
            bridge_data.dumps_limited({"args": args, "kwargs": kwargs}, self.max_bytes, "the arguments")
            args, kwargs = bridge_data.decode(args), bridge_data.decode(kwargs)
            decision = await self._decide(found.name, name, found.code_sha256, args, kwargs, ask, show)
            try:
                result = await _within(self.timeout, self._run(found.bound(name), args, kwargs))
            except asyncio.TimeoutError:
                outcome = "timeout"
                return _error(
                    "SkillTimeout",
                    f"{found.name}.{name} took longer than {self.timeout:g}s (SandboxKernel.skill_timeout)",
                )
            except asyncio.CancelledError:
                outcome = "interrupted"
                raise
            except Exception as exc:
                outcome = f"error: {type(exc).__name__}"
                message = scrub_paths(f"{found.name}.{name} failed: {type(exc).__name__}: {exc}")
                return _error("SkillError", message, type(exc).__name__)
            encoded = bridge_data.encode(result)
            bridge_data.dumps_limited(encoded, self.max_bytes, f"the result of {found.name}.{name}")
            outcome = "ok"
            return {"value": encoded}
        except SkillRefused as exc:
            return _error("SkillRefused", str(exc))
        except bridge_data.BridgeDataError as exc:
            outcome = "bad data"
            return _error("SkillDataError", str(exc))
        finally:
            self.audit.record(
                kind="skill_call",
                execution_count=execution_count,
                call=f"{skill}.{method}"[:200],
                args_digest=digest(args, kwargs),
                decision=decision,
                duration_s=round(time.monotonic() - started, 6),
                outcome=outcome,
            )

    def refuse(self, event: dict[str, Any], reason: str, execution_count: int) -> dict[str, Any]:
        """Refuse a call without looking at it further (it was made when no skill may run); audited like any."""
        self.audit.record(
            kind="skill_call",
            execution_count=execution_count,
            call=f"{event.get('skill')}.{event.get('method')}"[:200],
            args_digest=digest(event.get("args", []), event.get("kwargs", {})),
            decision="refused",
            duration_s=0.0,
            outcome=f"refused: {reason}",
        )
        return _error("SkillRefused", reason)

    def record_refused(self, execution_count: int, reason: str, calls: dict[str, int], unnamed: int) -> None:
        """One audit line for skill calls the kernel refused before they reached the gatekeeper (too many at
        once, malformed): how many, why, and how many of each Skill.method (guest-given names)."""
        self.audit.record(
            kind="skill_calls_refused",
            execution_count=execution_count,
            count=sum(calls.values()) + unnamed,
            reason=reason,
            calls=calls,
            **({"other_calls": unnamed} if unnamed else {}),
        )

    async def _decide(
        self,
        skill: str,
        method: str,
        code: str,
        args: list[Any],
        kwargs: dict[str, Any],
        ask: AskPerson,
        show: ShowPerson,
    ) -> str:
        """How the call was let through (the audit log's `decision`), or SkillRefused."""
        target = f"{skill}.{method}"
        if target in self.gatekeeper.approved:
            return "ask: session"
        policy = self.gatekeeper.policy_for(skill, method)
        if policy == "allow":
            return "allow"
        if policy == "deny":
            raise SkillRefused(f"{target} is denied by SandboxKernel.skill_policy")
        lasting = self._lasting(target, code, show)
        if lasting.grant is not None:
            return f"ask: {lasting.grant.scope} grant {lasting.grant.id}"
        note = code_changed_note(target) if lasting.code_changed else ""
        approval = approval_for(skill, method, args, kwargs, note)
        if self.approver is not None:
            answer = self.approver(skill, method, args, kwargs)
            if asyncio.iscoroutine(answer):
                answer = await answer
            verdict = answer if answer in VERDICTS else ("once" if answer is True else "no")
            why = "SandboxKernel.skill_approver said no"
        else:
            verdict, why = await self._ask(approval, ask, show)
        if verdict == "no":
            raise SkillRefused(f"{target} was not approved (policy 'ask'): {why}")
        if verdict in ("day", "always"):
            return self._grant(target, verdict, code, approval.prompt, show)
        if verdict == "session":
            self.gatekeeper.approved.add(target)
        return f"ask: {verdict}"

    def _lasting(self, target: str, code: str, show: ShowPerson) -> Decision:
        """The stored grant for this call's target and code, if any; a store that cannot be used is said, and
        none of it applies."""
        if self.grants is None:
            return Decision(None)
        try:
            return self.grants.decision(target, code, self.clock())
        except GrantStoreError as exc:
            show(f"{MARK} {exc}\n")
            return Decision(None)

    def _grant(self, target: str, verdict: str, code: str, prompt: str, show: ShowPerson) -> str:
        """Store a lasting yes; where it cannot be stored, it holds for the session, and the person is told."""
        scope, hours = ("hours", DAY_HOURS) if verdict == "day" else ("always", 0)
        if self.grants is not None:
            try:
                made = self.grants.grant(target, scope, code, prompt, self.clock(), hours=hours)
                return f"ask: {scope} grant {made.id}"
            except (GrantStoreError, OSError) as exc:
                show(f"{MARK} {target}: the approval could not be stored ({exc}), so it holds for this session only\n")
        else:
            show(f"{MARK} {target}: lasting approvals are off here, so it holds for this session only\n")
        self.gatekeeper.approved.add(target)
        return "ask: session"

    @staticmethod
    async def _ask(approval: Approval, ask: AskPerson, show: ShowPerson) -> tuple[str, str]:
        """The person's verdict, and why a "no" (the reason they gave, if any); [v] shows the whole call, then
        asks again."""
        for _ in range(MAX_VIEWS + 1):
            reply = await ask(approval)
            if reply is None:
                raise SkillRefused(
                    f"{approval.skill}.{approval.method} needs approval (policy 'ask'), but this frontend cannot "
                    "answer input requests. Pre-approve it with SandboxKernel.skill_policy = "
                    f"{{'{approval.skill}.{approval.method}': 'allow'}}"
                )
            verdict = parse_answer(reply)
            if verdict != "view":
                return verdict, refusal_reason(reply) or "the answer to the approval prompt was no"
            show(full_view(approval))
        return "no", f"the whole call was shown {MAX_VIEWS} times without an answer"

    @staticmethod
    async def _run(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Async skills run on the loop; sync ones in a thread, so the kernel never blocks."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        return await _SKILL_THREADS.run(functools.partial(fn, *args, **kwargs))


async def _within(seconds: float, work: Awaitable[Any]) -> Any:
    """`work`'s result, or TimeoutError after `seconds` (asyncio.timeout where there is one: no extra task)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)


HOST_PATH = re.compile(r"""(?<![^\s'"(=])/(?:[^\s/'",;)]+/)*[^\s/'",;)]+""")


def scrub_paths(text: str) -> str:
    """Hide host file paths in a message that goes to the guest."""
    return HOST_PATH.sub("<host path>", text)


def _error(kind: str, message: str, exception: str = "") -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "exception": exception}}
