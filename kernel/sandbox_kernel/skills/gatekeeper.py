"""The gatekeeper: which `Skill.method` calls from the guest may run, per policy."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sandbox_kernel.skills.loader import Skill, catalog

POLICIES = ("allow", "deny", "ask")
TARGET = re.compile(r"([A-Za-z][A-Za-z0-9_]*)\.([A-Za-z][A-Za-z0-9_]*)")


class SkillRefused(Exception):
    """A call the gatekeeper will not run; the message says what is allowed instead."""


@dataclass
class Gatekeeper:
    """Resolves exact `Skill.method` names and applies allow / deny / ask policies."""

    skills: dict[str, Skill]
    policy: dict[str, str] = field(default_factory=dict)
    approved: set[str] = field(default_factory=set)  # [s]ession answers

    def available(self) -> str:
        return ", ".join(sorted(self.skills)) or "none (no skills are loaded: see SandboxKernel.skills)"

    def resolve(self, skill: object, method: object) -> tuple[Skill, str]:
        """The skill and method named, or SkillRefused naming what exists."""
        target = f"{skill}.{method}"
        if not isinstance(skill, str) or not isinstance(method, str) or not TARGET.fullmatch(target):
            raise SkillRefused(
                f"refused {target[:100]!r}: a device call names exactly Skill.method (letters, digits, _; no "
                f"leading underscore, no attribute chains). Available skills: {self.available()}"
            )
        found = self.skills.get(skill)
        if found is None:
            raise SkillRefused(f"there is no skill {skill!r}. Available skills: {self.available()}")
        if method not in found.methods:
            methods = ", ".join(sorted(found.methods)) or "none"
            raise SkillRefused(f"{skill} has no method {method!r}. Its methods are: {methods}")
        return found, method

    def policy_for(self, skill: str, method: str) -> str:
        """The policy of `Skill.method`: a method entry beats a skill entry; default allow."""
        target = f"{skill}.{method}"
        if target in self.approved:
            return "allow"
        return self.policy.get(target) or self.policy.get(skill) or "allow"

    def described(self) -> dict[str, Any]:
        """The skills as the guest's catalog shows them, each method with the policy it has now."""
        found = catalog(self.skills)
        for name, skill in found.items():
            for method, info in skill["methods"].items():
                info["policy"] = self.policy_for(name, method)
        return found


def check_policy(policy: dict[str, str], skills: dict[str, Skill]) -> list[str]:
    """Problems with a configured policy (unknown values or skills); empty when it is fine."""
    problems = []
    for key, value in policy.items():
        if value not in POLICIES:
            problems.append(f"skill_policy[{key!r}] = {value!r}: use one of {', '.join(POLICIES)}")
        name = key.split(".", 1)[0]
        if name not in skills:
            problems.append(f"skill_policy names {key!r}, but no skill {name!r} is loaded")
    return problems
