"""Every test that docs/security.md names as keeping a promise exists (a renamed test breaks this)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def security_section() -> str:
    """docs/security.md, the whole page (README's Security section moved there)."""
    return (ROOT / "docs" / "security.md").read_text()


def defined_tests() -> dict[str, set[str]]:
    """{test file path relative to the repository: names of its test functions}."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        names = set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M))
        found[path.relative_to(ROOT).as_posix()] = names
    return found


def test_every_named_test_and_test_file_exists() -> None:
    section, tests = security_section(), defined_tests()
    every_name = set().union(*tests.values())
    files = {Path(p).name: p for p in tests}
    named_files = set(re.findall(r"`(?:tests/(?:unit/|security/)?)?(test_\w+\.py)", section))
    assert named_files, "docs/security.md names no test file"
    assert sorted(f for f in named_files if f not in files) == []
    # Names such as `test_mounts.py::test_read_only_mount_refuses_*` or a bare `::test_x` after a file.
    named = {n.rstrip("*") for n in re.findall(r"::(test_\w+\*?)", section)}
    missing = [n for n in sorted(named) if not any(t == n or (t.startswith(n) and n.endswith("_")) for t in every_name)]
    assert missing == []
