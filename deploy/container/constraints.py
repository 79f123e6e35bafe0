#!/usr/bin/env python3
"""Write deploy/container/constraints.txt: every package sandbox-kernel needs at run time (its requirements and
theirs, without the test extras), pinned to the version installed in the environment that runs this script, the one
the tests passed in. The image installs the wheel with these pins (`pip install --constraint`), so that it gets the
versions that were tested, not whatever is newest on the day it is built.

Versions only, no hashes: the wheel files of compiled packages (pyzmq, cryptography, ...) differ by the image's Python
version and platform (its BASE), and a hash list would tie the image to one of them.

Run it with the repository's .venv after a test run: .venv/bin/python deploy/container/constraints.py
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
ROOT = "sandbox-kernel"
UNPINNED = {"pip"}  # the image's own pip installs the rest (the tests' virtual environment has an older one)
# The Python of each base docs/container.md names: a pin must install on all of them. A tested version that needs a
# newer Python is left unpinned (with a comment saying so), and pip takes the newest version that fits on that base.
BASE_PYTHONS = {"Debian bookworm": "3.11.2", "Debian trixie": "3.13.5"}
NOT_PINNED = ": not pinned;"  # the comment's mark, after the package's name


def requirements(name: str, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """The requirements of installed distribution `name` that apply here, with `extras` requested."""
    found = []
    for text in metadata.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            found.append(req)
    return found


def closure(root: str = ROOT) -> dict[str, list[Requirement]]:
    """Every distribution `root` needs at run time (canonical name: the requirements that name it)."""
    needed: dict[str, list[Requirement]] = {}
    todo = [(root, frozenset[str]())]
    while todo:
        name, extras = todo.pop()
        for req in requirements(name, extras):
            key = canonicalize_name(req.name)
            first = key not in needed
            needed.setdefault(key, []).append(req)
            if first or req.extras:
                todo.append((req.name, frozenset(req.extras)))
    return needed


def bases_excluded(name: str) -> tuple[str, list[str]]:
    """The installed version's Requires-Python, and the bases whose Python it excludes."""
    needs = metadata.distribution(name).metadata.get("Requires-Python") or ""
    return needs, [base for base, python in BASE_PYTHONS.items() if not SpecifierSet(needs).contains(python)]


def pins(root: str = ROOT) -> str:
    """The constraints file's text."""
    lines = [
        "# Made by deploy/container/constraints.py from the environment the tests ran in "
        f"(Python {sys.version_info.major}.{sys.version_info.minor}): sandbox-kernel's run-time packages, pinned.",
    ]
    notes = []
    for name in sorted(closure(root)):
        if name in UNPINNED:
            continue
        needs, excluded = bases_excluded(name)
        if excluded:
            notes.append(
                f"# {name}{NOT_PINNED} {metadata.version(name)} needs Python {needs}, which "
                f"{' and '.join(f'{b} ({BASE_PYTHONS[b]})' for b in excluded)} lacks"
            )
        else:
            lines.append(f"{name}=={metadata.version(name)}")
    return "\n".join(lines[:1] + sorted(lines[1:]) + notes) + "\n"


def main() -> int:
    (HERE / "constraints.txt").write_text(pins(), encoding="utf-8")
    print(f"wrote {HERE / 'constraints.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
