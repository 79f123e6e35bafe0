"""bench/run.py's report assembly: a section measured alone replaces only its own section, and a full run keeps the
sections it does not measure (bench/load.py's)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import load
import run

REPORT = (
    "# Benchmark results\n\nold table\n\n"
    f"{run.SHELL_HEADING}\n\nold shell rows\n\n"
    f"{load.HEADING}\n\nload rows\n\n### Sizing\n\nsizing rows\n\n"
    f"{run.MEMORY_HEADING}\n\nold memory rows\n"
)


def test_a_full_run_keeps_only_the_sections_it_does_not_measure() -> None:
    kept = run.kept_sections(REPORT)
    assert kept == f"\n{load.HEADING}\n\nload rows\n\n### Sizing\n\nsizing rows\n"
    assert "old shell rows" not in kept and "old memory rows" not in kept and "old table" not in kept


def test_a_full_run_keeps_nothing_from_an_empty_report() -> None:
    assert run.kept_sections("") == ""


def test_one_section_replaces_its_own_and_leaves_the_rest() -> None:
    updated = run.replace_section(REPORT, run.SHELL_HEADING, f"{run.SHELL_HEADING}\n\nnew shell rows\n")
    assert "new shell rows" in updated and "old shell rows" not in updated
    assert updated.index("new shell rows") < updated.index(load.HEADING)
    assert "sizing rows" in updated and "old memory rows" in updated and "old table" in updated
