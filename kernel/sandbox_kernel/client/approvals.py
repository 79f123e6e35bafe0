"""Skill approvals for the agent API: the kernel's input_request for an `ask` skill, as data an approver decides on."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_kernel.protocol import bridge_data
from sandbox_kernel.skills.approvals import call_digest, refusal, shown_arguments


class MalformedApproval(ValueError):
    """An approval request whose data, display and digest do not agree: it is refused, never shown an approver."""


@dataclass(frozen=True)
class ApprovalRequest:
    """A skill call the kernel asks about (policy 'ask'), from the metadata only the kernel sets.

    `args` and `kwargs` are the call's arguments as the skill's method would get them (JSON data, bytes as bytes);
    `shown` is how the person's prompt shows them, `sha256` their digest: all three were checked to agree, so
    an approval means exactly this call."""

    skill: str
    method: str
    args: list[Any]
    kwargs: dict[str, Any]
    shown: str  # every argument, as Python shows them: 'TimeSkill.add_days(' + shown + ')'
    prompt: str
    sha256: str

    @property
    def call(self) -> str:
        """The call as a person reads it: `Skill.method(arguments)`."""
        return f"{self.skill}.{self.method}({self.shown})"


def approval_of(msg: dict[str, Any]) -> ApprovalRequest | None:
    """The approval an input_request asks for, None for any other prompt (e.g. the guest's input()), or
    MalformedApproval when its parts disagree."""
    approval = msg.get("metadata", {}).get("sandbox_kernel", {}).get("approval")
    if not isinstance(approval, dict):
        return None
    skill, method = str(approval.get("skill")), str(approval.get("method"))
    try:
        call = json.loads(approval["call"])
        args, kwargs = bridge_data.decode(call["args"]), bridge_data.decode(call["kwargs"])
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError("args must be a list and kwargs an object")
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedApproval(f"the approval of {skill}.{method} carries no readable arguments: {exc!r}") from None
    shown, digest = str(approval.get("arguments")), str(approval.get("sha256"))
    if shown_arguments(args, kwargs) != shown or call_digest(args, kwargs) != digest:
        raise MalformedApproval(f"the approval of {skill}.{method} shows other arguments than it carries")
    return ApprovalRequest(skill, method, args, kwargs, shown, msg["content"].get("prompt", ""), digest)


@dataclass(frozen=True)
class Refused:
    """An approver's verdict that refuses the call and tells the code why (its SkillRefused says `reason`)."""

    reason: str


def allow_hint(request: ApprovalRequest) -> str:
    """How to let the call run without asking: its entry for SandboxKernel.skill_policy."""
    entry = json.dumps({f"{request.skill}.{request.method}": "allow"})
    return f"allow it in skill_policy to run it without asking (add {entry} to SandboxKernel.skill_policy)"


# True / "once": allow this call; "session": allow this method for the kernel's life; "day" (24 h) / "always": allow
# it for as long, in any kernel of this configuration, while the skill's code is what was approved; False / None /
# Refused(reason): refuse.
Approver = Callable[[ApprovalRequest], Any]
ANSWER_OF = {"once": "y", "session": "s", "day": "d", "always": "a"}  # the prompt's letter for each yes


def approval_answer(verdict: Any) -> str:
    """The answer typed at the approval prompt for an approver's verdict."""
    if isinstance(verdict, Refused):
        return refusal(verdict.reason)
    if verdict is True:
        return "y"
    return ANSWER_OF.get(verdict, "n") if isinstance(verdict, str) else "n"
