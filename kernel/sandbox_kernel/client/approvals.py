"""Skill approvals for the agent API: the kernel's input_request for an `ask` skill, as data an approver decides on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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


# True / "once": allow this call; "always": allow for the session; False / None: refuse.
Approver = Callable[[ApprovalRequest], Any]


def approval_answer(verdict: Any) -> str:
    """The answer typed at the approval prompt for an approver's verdict."""
    if verdict == "always":
        return "a"
    return "y" if verdict is True or verdict == "once" else "n"
