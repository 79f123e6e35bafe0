"""An approver callable for the tests: allows GuardedSkill.touch only with the argument-free call."""

from __future__ import annotations

from typing import Any


def approve(skill: str, method: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
    return (skill, method) == ("GuardedSkill", "touch")
