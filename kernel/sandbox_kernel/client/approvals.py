"""Skill approvals for the agent API: the kernel's input_request for an `ask` skill, as data an approver decides on."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_kernel.skills.approvals import refusal


@dataclass(frozen=True)
class ApprovalRequest:
    """A skill call the kernel asks about (policy 'ask'), from the metadata only the kernel sets."""

    skill: str
    method: str
    arguments: str  # every argument, as Python shows them
    prompt: str
    sha256: str = ""  # of the arguments' JSON


def approval_of(msg: dict[str, Any]) -> ApprovalRequest | None:
    """The approval an input_request asks for, or None for any other prompt (e.g. the guest's input())."""
    approval = msg.get("metadata", {}).get("sandbox_kernel", {}).get("approval")
    if not isinstance(approval, dict):
        return None
    return ApprovalRequest(
        str(approval.get("skill")),
        str(approval.get("method")),
        str(approval.get("arguments")),
        msg["content"].get("prompt", ""),
        str(approval.get("sha256", "")),
    )


@dataclass(frozen=True)
class Refused:
    """An approver's verdict that refuses the call and tells the code why (its SkillRefused says `reason`)."""

    reason: str


def allow_hint(request: ApprovalRequest) -> str:
    """How to let the call run without asking: its entry for SandboxKernel.skill_policy."""
    entry = json.dumps({f"{request.skill}.{request.method}": "allow"})
    return f"allow it in skill_policy to run it without asking (add {entry} to SandboxKernel.skill_policy)"


# True / "once": allow this call; "always": allow for the session; False / None / Refused(reason): refuse.
Approver = Callable[[ApprovalRequest], Any]


def approval_answer(verdict: Any) -> str:
    """The answer typed at the approval prompt for an approver's verdict."""
    if verdict == "always":
        return "a"
    if isinstance(verdict, Refused):
        return refusal(verdict.reason)
    return "y" if verdict is True or verdict == "once" else "n"
