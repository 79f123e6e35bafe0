"""bench/soak.py's pure parts: the cell mix (bench/soak_cells.py) and the summary figures (bench/soak_report.py)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import soak
import soak_cells
import soak_report
from soak_cells import MIX, Outcome, Session, Spec, schedule
from soak_report import Block, Sample


def test_every_hundred_cells_hold_the_mix_exactly_and_the_seed_repeats_the_order() -> None:
    specs = schedule(1000, seed=7)
    assert len(specs) == 1000
    for first in range(0, 1000, 100):
        assert Counter(s.kind for s in specs[first : first + 100]) == Counter(MIX)
    assert schedule(1000, seed=7) == specs
    assert [s.kind for s in schedule(1000, seed=8)] != [s.kind for s in specs]


def test_a_mix_without_weight_is_refused() -> None:
    with pytest.raises(ValueError, match="weights must be >= 0 and not all 0"):
        schedule(10, seed=1, mix={"print": 0})


def test_the_print_counter_restarts_with_the_setup_cell() -> None:
    session = Session("t0k3n", skills=True)
    first = session.plan(Spec("print", 0))  # one line
    assert first.check(Outcome(status="ok", stdout="t0k3n 1 line 0\n")) is None
    assert "stdout should be 't0k3n 2 line 0\\n'" in str(
        session.plan(Spec("print", 0)).check(Outcome(status="ok", stdout="t0k3n 1 line 0\n"))
    )
    session.setup_code()
    assert session.plan(Spec("print", 0)).check(Outcome(status="ok", stdout="t0k3n 1 line 0\n")) is None


def test_skill_cells_call_the_skill_in_ours_and_a_plain_function_in_ipykernel() -> None:
    ours, theirs = Session("t", skills=True), Session("t", skills=False, pty=True)
    spec = Spec("skill", 3)  # odd: TimeSkill.add_days(2026-01-01, days=3)
    assert ours.plan(spec).code == "device.TimeSkill.add_days('2026-01-01', days=3)"
    assert theirs.plan(spec).code == "_soak_add_days('2026-01-01', days=3)"
    assert "def _soak_add_days" in theirs.setup_code() and "def _soak_add_days" not in ours.setup_code()
    assert ours.plan(spec).check(Outcome(status="ok", data=[{"text/plain": "'2026-01-04'"}])) is None
    wrong = ours.plan(spec).check(Outcome(status="ok", data=[{"text/plain": "'2026-01-05'"}]))
    assert wrong == "should give '2026-01-04', gave \"'2026-01-05'\""


def test_shell_output_is_checked_with_the_kernels_own_line_ends() -> None:
    spec = Spec("shell", 5)
    assert Session("t", skills=True).plan(spec).check(Outcome(status="ok", stdout="soak 5\n")) is None
    assert Session("t", skills=False, pty=True).plan(spec).check(Outcome(status="ok", stdout="soak 5\r\n")) is None
    assert Session("t", skills=True).plan(spec).check(Outcome(status="ok", stdout="soak 5\r\n")) is not None


def test_interrupt_and_error_cells_want_their_exception_and_nothing_else() -> None:
    session = Session("t", skills=True)
    plan = session.plan(Spec("interrupt", 1))
    assert plan.interrupt and soak_cells.SPINNING in plan.code
    assert plan.check(Outcome(status="error", error=("KeyboardInterrupt", ""))) is None
    assert plan.check(Outcome(status="ok")) == "should raise KeyboardInterrupt, gave status 'ok', stdout ''"
    error = session.plan(Spec("error", 4))  # 4 % 3 == 1: a NameError
    assert error.check(Outcome(status="error", error=("NameError", "name 'soak_undefined_4' is not defined"))) is None
    assert "unexpected stderr" in str(
        error.check(Outcome(status="error", stderr="x", error=("NameError", "name 'soak_undefined_4' is not defined")))
    )


def test_completion_cells_need_the_name_in_the_matches() -> None:
    plan = Session("t", skills=True).plan(Spec("complete", 2))  # even: `os.pa`
    assert plan.cursor == len("os.pa")
    assert plan.check(Outcome(status="ok", matches=["pardir", "path"])) is None
    assert plan.check(Outcome(status="ok", matches=["pardir"])) == "the matches should hold 'path', were ['pardir']"


def test_percentiles_interpolate_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert soak_report.percentile(values, 0.5) == 2.5
    assert soak_report.percentile(values, 0.9) == pytest.approx(3.7)
    assert soak_report.percentile([5.0], 0.9) == 5.0
    with pytest.raises(ValueError, match="no values"):
        soak_report.percentile([], 0.5)


def test_growth_is_the_slope_per_thousand_cells_after_the_first_sample() -> None:
    block = Block(0)
    block.samples = [Sample(0, 50.0, 150.0, 40), Sample(100, 60.0, 170.0, 40)]  # first use: not counted
    block.samples += [Sample(100 * i, 60.0 + 0.2 * (i - 1), 170.0, 40) for i in range(2, 11)]
    assert block.growth("kernel_mib") == pytest.approx(2.0)  # 0.2 MiB per 100 cells
    assert block.growth("sandbox_mib") == pytest.approx(0.0)
    assert block.first_cells_mib("kernel_mib") == 10.0
    assert soak_report.slope([(1.0, 1.0)]) is None


def test_drift_compares_the_last_blocks_median_with_the_first() -> None:
    blocks = [Block(0), Block(1)]
    blocks[0].latencies["print"] = [0.010, 0.010, 0.010]
    blocks[0].latencies["interrupt"] = [5.0]  # left out
    blocks[1].latencies["print"] = [0.012, 0.012, 0.012]
    assert soak_report.drift(blocks) == pytest.approx(0.2)
    assert soak_report.drift(blocks[:1]) is None


def test_the_command_line_is_checked() -> None:
    assert soak.parse(["--cells", "300"]).cells == 300
    with pytest.raises(SystemExit):
        soak.parse(["--restart-every", "150"])  # not a multiple of --sample-every (100)


def test_ipythons_output_cache_warning_is_not_a_failure_and_other_stderr_is() -> None:
    warning = (
        "/lib/sandbox-site/IPython/core/displayhook.py:296: UserWarning: Output cache limit (currently 1000 entries) "
        "hit.\nFlushing oldest 200 entries.\n  warn('Output cache limit (currently {sz} entries) hit.\\n'\n"
    )
    plan = Session("t", skills=True).plan(Spec("value", 0))  # [i * i for i in range(100)]
    result = [{"text/plain": repr((100, sum(i * i for i in range(100))))}]
    assert plan.check(Outcome(status="ok", data=result, stderr=warning)) is None
    assert plan.check(Outcome(status="ok", data=result, stderr=warning + "more\n")) == "unexpected stderr 'more\\n'"
