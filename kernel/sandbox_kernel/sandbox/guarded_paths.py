"""Guarded paths in mounted host folders (host_ts/guarded_paths.json, shared with the supervisor).

The supervisor lets only plain data files reach a host folder (write_policy.ts, host_writes.json: an allowlist).
The kernel adds, as a second layer, what it can give the other walls at a mount's top, where a project keeps its
tool files:
Deno's --deny-write for the protected names, read-only binds of the ones that exist in the private root, and
hidden folders (`.ssh`, `.aws`, ...) that Deno may not read and the private root covers with an empty one.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
from pathlib import Path
from typing import Any

from sandbox_kernel import paths
from sandbox_kernel.sandbox.mounts import Mount


@functools.cache
def rules() -> dict[str, Any]:
    """The shared list, as the supervisor reads it."""
    loaded: dict[str, Any] = json.loads((paths.host_dir() / "guarded_paths.json").read_text())
    return loaded


def rule_names() -> list[str]:
    return [rule["rule"] for rule in rules()["protected"]]


def _allowed(mount: Mount, rule: dict[str, Any], name: str) -> bool:
    """Whether the OS layers leave `name` writable: only when the mount takes every name (host_writes "any")."""
    return mount.host_writes == "any"


def _matches(pattern: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name.lower(), pattern.lower())


def _entries(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def write_denied(mount: Mount) -> list[Path]:
    """Paths at the top of a read-write mount for Deno's --deny-write: every protected name without a wildcard,
    as it is usually spelled and in lower case (Deno compares paths exactly)."""
    if not mount.writable:
        return []
    names = {
        spelling
        for rule in rules()["protected"]
        for name in rule["names"]
        if "*" not in name and not _allowed(mount, rule, name)
        for spelling in (name, name.lower())
    }
    return [mount.host / name for name in sorted(names)]


def protected_existing(mount: Mount) -> list[Path]:
    """The protected files and folders at the top of a read-write mount as it is now (bound read-only)."""
    if not mount.writable:
        return []
    found = []
    for entry in _entries(mount.host):
        path = mount.host / entry
        if path.is_symlink():
            continue
        for rule in rules()["protected"]:
            if any(_matches(p, entry) and not _allowed(mount, rule, p) for p in rule["names"]):
                found.append(path)
                break
    return found


def hidden(mount: Mount) -> list[Path]:
    """Secret-holding files and folders at the top of a mount (`.ssh`, `.aws`, `.env`, ...): never shown."""
    names = {n.lower() for n in rules()["hidden"]}
    return [mount.host / e for e in _entries(mount.host) if e.lower() in names and not (mount.host / e).is_symlink()]


def guarded_name(mount: Mount, name: str) -> bool:
    """Whether `name` is one the mount's top protects (Deno's --deny-write, read-only binds) or hides."""
    if name.lower() in {n.lower() for n in rules()["hidden"]}:
        return True
    return any(
        _matches(p, name) and not _allowed(mount, rule, p) for rule in rules()["protected"] for p in rule["names"]
    )
