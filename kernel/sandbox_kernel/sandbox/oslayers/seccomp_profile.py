"""A container seccomp profile under which the launcher can apply every layer: a runtime's profile, plus one rule.

Container runtimes' default profiles (Docker's, containerd's for Kubernetes' RuntimeDefault) allow `unshare` and
the mount calls only to a process holding CAP_SYS_ADMIN, and older ones do not know the Landlock calls. The rule
added here allows exactly the calls the launcher makes (`diagnose.NEEDED_SYSCALLS`) to every process; without
CAP_SYS_ADMIN they can act only inside user namespaces the process makes itself, as on a host that allows
unprivileged user namespaces. Everything else of the base profile is kept.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from sandbox_kernel.sandbox.oslayers.diagnose import NEEDED_SYSCALLS

RULE_COMMENT = "sandbox-kernel: the OS layers of its sandboxes (user namespaces, the private root, Landlock, seccomp)"


def needed() -> list[str]:
    """Every call the launcher makes that a container's profile must allow, sorted (diagnose.NEEDED_SYSCALLS)."""
    return sorted({call for calls in NEEDED_SYSCALLS.values() for call in calls})


def _names(rule: dict[str, Any]) -> list[str]:
    """The calls a profile's rule names (`name` or `names`), as a new list."""
    return [rule["name"]] if "name" in rule else list(rule.get("names", []))


def with_layers(profile: Any) -> dict[str, Any]:
    """`profile` (a Docker/OCI seccomp profile: `defaultAction` and a `syscalls` list) with the needed calls taken
    out of its rules (so that no rule of it refuses them) and allowed by one rule of their own."""
    if not isinstance(profile, dict) or "defaultAction" not in profile or not isinstance(profile.get("syscalls"), list):
        raise ValueError("not a seccomp profile: it needs a 'defaultAction' and a 'syscalls' list")
    calls = set(needed())
    result = copy.deepcopy(profile)
    rules = []
    for rule in result["syscalls"]:
        if not isinstance(rule, dict):
            raise ValueError(f"not a seccomp profile: a rule in 'syscalls' is {type(rule).__name__}, not an object")
        names = _names(rule)
        kept = [name for name in names if name not in calls]
        if not kept:
            continue
        rule.pop("name", None)
        rule["names"] = kept
        rules.append(rule)
    rules.append({"names": needed(), "action": "SCMP_ACT_ALLOW", "args": [], "comment": RULE_COMMENT})
    result["syscalls"] = rules
    return result


def allows_layers(profile: dict[str, Any]) -> list[str]:
    """The needed calls that `profile` does not allow to a process without capabilities (unconditionally)."""
    allowed: set[str] = set()
    if profile.get("defaultAction") == "SCMP_ACT_ALLOW":
        allowed = set(needed())
    for rule in profile.get("syscalls", []):
        names = _names(rule)
        conditional = rule.get("args") or rule.get("includes") or rule.get("excludes")
        if rule.get("action") == "SCMP_ACT_ALLOW" and not conditional:
            allowed.update(names)
        elif rule.get("action") != "SCMP_ACT_ALLOW":
            allowed.difference_update(names)
    return [call for call in needed() if call not in allowed]


def main(base: str) -> str:
    """The profile made from the file `base`, as JSON."""
    with open(base) as f:
        profile = json.load(f)
    return json.dumps(with_layers(profile), indent=2) + "\n"
