"""The pure parts of the gateway load test (bench/load_cells.py, bench/load_report.py, bench/load.py's command
line): the cells' checks, percentiles, the rule for a step that holds, the sizing and the report's tables."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import load
from load_cells import KINDS, Session, Workload, cpu_loop
from load_report import (
    INTERACTIVE,
    HoldsRule,
    Latency,
    Machine,
    Step,
    comparison_table,
    cpu_cores,
    failure_list,
    latency_table,
    percentile,
    resource_table,
    sizing,
    sizing_table,
)
from sandbox_kernel.client.results import ErrorInfo, ExecutionResult

# ---- the cells and their checks ------------------------------------------------------------------


def value(text: str, **fields: object) -> ExecutionResult:
    return ExecutionResult(result={"text/plain": text}, **fields)  # type: ignore[arg-type]


def raised(ename: str, evalue: str, **fields: object) -> ExecutionResult:
    return ExecutionResult(error=ErrorInfo(ename, evalue, ""), **fields)  # type: ignore[arg-type]


def test_a_session_cycles_through_every_kind_from_its_own_start() -> None:
    session = Session(Workload(), seed=3)
    kinds = [session.next_cell().kind for _ in range(2 * len(KINDS))]
    first = kinds.index("print")
    assert kinds[first : first + len(KINDS)] == list(KINDS)
    assert kinds[: len(KINDS)] == kinds[len(KINDS) :]
    starts = {Session(Workload(), seed=s).next_cell().kind for s in range(40)}
    assert starts == set(KINDS)  # clients do not all start with the same cell


def test_without_skills_there_is_no_skill_cell() -> None:
    session = Session(Workload(skill=False), seed=1)
    assert "skill" not in {session.next_cell().kind for _ in range(20)}
    with pytest.raises(ValueError, match="no cell kind 'nap'; the kinds are print, cpu"):
        session.cell("nap")


def test_the_print_cell_checks_its_lines_and_the_counter_kept_in_the_kernel() -> None:
    session = Session(Workload(print_lines=2), seed=0)
    first, second = session.cell("print"), session.cell("print")
    assert "_load_n += 1" in first.code and "range(2)" in first.code
    right = f"{session.token} 2 line 0\n{session.token} 2 line 1\n"
    assert second.check(ExecutionResult(stdout=right)) is None
    assert "should be 2 lines" in str(first.check(ExecutionResult(stdout=right)))  # counter 1 expected: state lost?
    assert "should be 2 lines" in str(second.check(ExecutionResult(stdout=right[: right.index("\n") + 1])))
    assert "unexpected stderr" in str(second.check(ExecutionResult(stdout=right, stderr="warning\n")))
    assert "restarted" in str(second.check(ExecutionResult(stdout=right, restarted=True)))


def test_the_setup_cell_must_answer_with_the_token() -> None:
    session = Session(Workload(), seed=0)
    assert session.token in session.setup_code()
    assert session.check_setup(value(repr(session.token))) is None
    assert "should give" in str(session.check_setup(value("'other'")))


def test_the_cpu_cell_must_give_the_loop_s_answer() -> None:
    session = Session(Workload(cpu_iterations=1000), seed=0)
    plan = session.cell("cpu")
    assert plan.kind == "cpu" and "_load_work(1000)" in plan.code
    namespace: dict[str, object] = {}
    exec(plan.code.replace("_load_work(1000)", "answer = _load_work(1000)"), namespace)
    assert namespace["answer"] == cpu_loop(1000) == sum((i * i) % 7 for i in range(1000))
    assert plan.check(value(repr(cpu_loop(1000)))) is None
    assert plan.check(value(repr(cpu_loop(1000) + 1))) == f"should give {cpu_loop(1000)}, gave '{cpu_loop(1000) + 1}'"
    assert "raised SandboxTimeout" in str(plan.check(raised("SandboxTimeout", "ran past", timed_out=True)))
    assert "should print nothing" in str(plan.check(value(repr(cpu_loop(1000)), stdout="x\n")))


def test_the_skill_cell_must_give_the_day_it_asked_for() -> None:
    plan = Session(Workload(), seed=5).cell("skill")
    days = int(plan.code.split("days=")[1].rstrip(")"))
    assert plan.code.startswith("device.TimeSkill.add_days('2026-01-01', days=")
    day = (datetime.date(2026, 1, 1) + datetime.timedelta(days=days)).isoformat()
    assert plan.check(value(repr(day))) is None
    assert "should give" in str(plan.check(value(repr("2026-01-01" if days else "2026-01-02"))))
    assert "raised SkillRefused" in str(plan.check(raised("SkillRefused", "not allowed")))


def test_the_error_cell_must_raise_its_own_error() -> None:
    plan = Session(Workload(), seed=2).cell("error")
    message = plan.code.split("ValueError(")[1].rstrip(")").strip("'")
    assert plan.check(raised("ValueError", message)) is None
    assert "should raise ValueError" in str(plan.check(raised("ValueError", "another")))
    assert "should raise ValueError" in str(plan.check(raised("NameError", message)))
    assert "should raise ValueError" in str(plan.check(ExecutionResult()))
    assert "timed_out should be False" in str(plan.check(raised("ValueError", message, timed_out=True)))


def test_the_timeout_cell_must_be_stopped_by_the_kernel_with_the_variables_kept() -> None:
    plan = Session(Workload(cell_timeout=2), seed=0).cell("timeout")
    assert plan.client_timeout is None  # the kernel's cell_timeout stops it
    kept = "the cell ran past cell_timeout=2s and was interrupted; variables were kept."
    notice = f"SandboxTimeout: {kept}\n"
    assert plan.check(raised("SandboxTimeout", kept, timed_out=True, stderr=notice)) is None
    assert "timed_out should be True" in str(plan.check(raised("SandboxTimeout", kept)))
    assert "variables were kept" in str(plan.check(raised("SandboxTimeout", "lost them", timed_out=True)))
    assert "restarted" in str(plan.check(raised("SandboxTimeout", kept, timed_out=True, restarted=True)))
    assert "should raise SandboxTimeout" in str(plan.check(raised("KeyboardInterrupt", "", timed_out=True)))


def test_ipykernel_s_timeout_cell_is_interrupted_by_the_client() -> None:
    plan = Session(Workload(cell_timeout=2, kernel_timeout=False, skill=False), seed=0).cell("timeout")
    assert plan.client_timeout == 2
    assert plan.check(raised("KeyboardInterrupt", "")) is None
    assert "should raise KeyboardInterrupt" in str(plan.check(ExecutionResult()))


def test_think_time_is_uniform_around_its_mean_and_repeatable() -> None:
    pauses = [Session(Workload(think_seconds=2), seed=s).think() for s in range(200)]
    assert all(1.0 <= p <= 3.0 for p in pauses)
    assert min(pauses) < 1.2 and max(pauses) > 2.8
    assert Session(Workload(), seed=9).think() == Session(Workload(), seed=9).think()


# ---- percentiles and the rule ---------------------------------------------------------------------


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # order does not matter
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 90) == pytest.approx(90.1)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="not between 1 and 99"):
        percentile([1.0], 100)
    assert Latency.of([]) is None
    latency = Latency.of([0.010, 0.020, 0.030])
    assert latency is not None and (latency.count, latency.p50) == (3, 0.020)
    assert latency.p90 == pytest.approx(0.028) and latency.p99 == pytest.approx(0.0298)


def step(n: int, cpu: list[float], failures: list[str] | None = None, **fields: object) -> Step:
    s = Step("pyodide-sandbox", n, cells={"cpu": cpu, "print": [0.02] * len(cpu), "timeout": [2.05]})
    s.failures = failures or []
    for name, v in fields.items():
        setattr(s, name, v)
    return s


def test_a_step_holds_with_no_failure_and_the_cpu_cell_s_p99_within_the_bound() -> None:
    rule = HoldsRule(factor=3)
    base = step(1, [0.10, 0.10, 0.10])
    baseline = base.latency("cpu")
    assert rule.why_not(base, baseline) is None
    assert rule.why_not(step(8, [0.10, 0.29, 0.30]), baseline) is None  # p99 0.2998 <= 0.30
    assert rule.why_not(step(8, [0.10, 0.10, 0.31]), baseline) == "CPU cell p99 306 ms > 3 x its p50 at N=1 (300 ms)"
    assert rule.why_not(step(8, [0.10], ["client 3, print cell: lost"]), baseline) == "1 failure(s)"
    assert rule.why_not(step(8, []), baseline) == "no CPU cell ran"


def test_the_verdict_is_the_last_step_before_the_first_that_does_not_hold() -> None:
    rule = HoldsRule(factor=2)
    steps = [step(1, [0.1]), step(2, [0.15]), step(4, [0.5]), step(8, [0.1])]
    assert rule.verdict(steps) == (2, "N=4: CPU cell p99 500 ms > 2 x its p50 at N=1 (200 ms)")
    assert rule.verdict(steps[:2]) == (2, None)
    assert rule.verdict([step(1, [0.1], ["x"])]) == (None, "N=1: 1 failure(s)")
    assert rule.verdict([]) == (None, "no step ran")


def test_other_work_is_what_the_machine_used_besides_the_test() -> None:
    s = step(1, [0.1], machine_cpu=1.5, kernels_cpu=0.6, gateway_cpu=0.1, client_cpu=0.05)
    assert s.other_cpu == pytest.approx(0.75)
    assert step(1, [0.1], machine_cpu=0.5, kernels_cpu=0.6).other_cpu == 0.0  # sampled apart: never negative


def test_cpu_cores_counts_new_processes_from_zero_and_cannot_go_negative() -> None:
    before = {1: 10.0, 2: 5.0, 3: 1.0}  # 3 ends before the second sample
    after = {1: 12.0, 2: 5.5, 4: 0.5}  # 4 started in between
    assert cpu_cores(before, after, 10.0) == pytest.approx((2.0 + 0.5 + 0.5) / 10)
    assert cpu_cores({1: 3.0}, {1: 2.0}, 1.0) == 0.0  # a pid reused by a younger process
    assert cpu_cores(before, after, 0.0) == 0.0


# ---- sizing ----------------------------------------------------------------------------------------


def ramp_steps() -> list[Step]:
    one = step(1, [0.1], rest_pss_mb=[380.0], busy_pss_mb=[390.0], gateway_pss_mb=60.0, idle_cpu=0.002)
    many = step(16, [0.2], rest_pss_mb=[350.0] * 16, busy_pss_mb=[400.0] * 16, gateway_pss_mb=100.0, idle_cpu=0.032)
    return [one, many]


def test_sizing_divides_usable_memory_by_each_state_s_pss() -> None:
    machine = Machine(cores=2, ram_mib=24 * 1024)
    rows = sizing(machine, ramp_steps(), 16, "N=32: 2 failure(s)", reserve_mib=1024, memory_limit_mb=1024, nodes=100)
    usable = 24 * 1024 - 1024 - 100  # RAM, less the reserve and the gateway at the largest step
    idle, busy, worst = rows
    assert idle.per_kernel_mib == 350 and idle.per_machine == usable // 350 == 67
    assert idle.per_gib == pytest.approx(1024 / 350) and idle.per_core == pytest.approx(67 / 2)
    assert idle.cluster == 6700 and idle.bound.startswith("memory (22.9 GiB usable; at rest a kernel uses 0.20%")
    assert (busy.per_kernel_mib, busy.per_machine, busy.cluster) == (400, 16, 1600)
    assert busy.bound == "the largest N that held; N=32: 2 failure(s)"
    assert (worst.per_kernel_mib, worst.per_machine) == (350 + 1024, usable // 1374)


def test_sizing_says_when_memory_or_the_ramp_s_end_is_the_bound() -> None:
    machine = Machine(cores=2, ram_mib=4096)
    rows = sizing(machine, ramp_steps(), 16, None, reserve_mib=1024, memory_limit_mb=1024)
    assert rows[1].per_machine == (4096 - 1024 - 100) // 400 == 7 and rows[1].bound == "memory"
    rows = sizing(Machine(2, 24 * 1024), ramp_steps(), 16, None, reserve_mib=1024, memory_limit_mb=1024)
    assert rows[1].bound == "the ramp's end: every step held, up to N=16; more may hold"
    rows = sizing(Machine(2, 24 * 1024), ramp_steps(), None, "N=1: 1 failure(s)", 1024, 1024)
    assert rows[1].per_machine == 0 and rows[1].bound == "not even the first step held"
    busy_at_rest = ramp_steps()
    busy_at_rest[1].idle_cpu = 16 * 0.05  # 5% of a core each at rest: 40 on 2 cores, fewer than memory allows
    rows = sizing(Machine(2, 24 * 1024), busy_at_rest, 16, None, 1024, 1024)
    assert rows[0].per_machine == 40 and rows[0].bound == "CPU at rest (5.00% of a core each)"


# ---- tables ----------------------------------------------------------------------------------------


def test_the_latency_table_has_a_row_per_step_and_a_column_per_kind() -> None:
    steps = ramp_steps()
    steps[0].cells["skill"] = [0.004, 0.006]
    text = latency_table(steps, ["print", "cpu", "skill", "timeout"])
    header, rule, first, second = text.splitlines()
    assert header == "| kernel | N | cells | print | cpu | skill | timeout | all but timeout |"
    assert rule.count("|") == header.count("|")
    assert (
        first
        == "| pyodide-sandbox | 1 | 5 | 20 / 20 / 20 (1) | 100 / 100 / 100 (1) | 5 / 6 / 6 (2) | 2050 / 2050 / 2050 (1) | 13 / 76 / 98 (4) |"
    )
    assert "| n/a |" in second  # no skill cell in that step
    assert steps[0].latency(INTERACTIVE) == Latency.of([0.02, 0.1, 0.004, 0.006])


def test_the_resource_table_judges_ours_and_not_the_reference() -> None:
    steps = ramp_steps()
    steps[1].cells["cpu"] = [0.5]
    steps[1].start_seconds = [1.0, 3.0, 2.0]
    text = resource_table(steps, HoldsRule(3))
    assert "| pyodide-sandbox | 1 | 0 | yes | n/a | 380 / 390 | 390 | 60 | 0.002 |" in text
    assert (
        "| pyodide-sandbox | 16 | 0 | no: CPU cell p99 500 ms > 3 x its p50 at N=1 (300 ms) | 2.00 / 3.00 | 350 / 400 | 6400 |"
        in text
    )
    assert "| n/a |" in resource_table(steps, None).splitlines()[2]


def test_the_comparison_shows_ours_over_the_reference_for_the_ns_both_ran() -> None:
    ours = ramp_steps()
    theirs = [
        Step("python3", 1, cells={"cpu": [0.04], "print": [0.01], "timeout": [2.0]}, rest_pss_mb=[40.0]),
        Step("python3", 2, cells={"cpu": [0.05]}, rest_pss_mb=[40.0]),
    ]
    lines = comparison_table(ours, theirs, ["print", "cpu"]).splitlines()
    assert lines[0] == "| N | print p50 (ms) | cpu p50 (ms) | all but timeout p50 (ms) | PSS per kernel at rest (MiB) |"
    assert lines[2] == "| 1 | 20 / 10 = 2.00x | 100 / 40 = 2.50x | 60 / 25 = 2.40x | 380 / 40 = 9.50x |"
    assert len(lines) == 3  # N=16 has no reference step, N=2 no step of ours


def test_the_sizing_table_and_the_failure_list() -> None:
    rows = sizing(Machine(2, 24 * 1024), ramp_steps(), 16, None, 1024, 1024, nodes=100)
    lines = sizing_table(rows).splitlines()
    assert "| 100 machines |" in lines[0]
    assert lines[2].startswith("| idle (started, at rest) | 350 | 2.9 | 33.5 | 67 | 6,700 | memory")
    steps = ramp_steps()
    assert failure_list(steps) == "No failures."
    steps[0].failures = [f"client {i}: lost" for i in range(3)]
    assert failure_list(steps, limit=2) == (
        "- pyodide-sandbox N=1: client 0: lost\n- pyodide-sandbox N=1: client 1: lost\n- ... and 1 more"
    )


# ---- the command line ------------------------------------------------------------------------------


def test_the_ramp_doubles_up_to_its_last_n() -> None:
    assert load.doubling(1, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert load.doubling(1, 50) == [1, 2, 4, 8, 16, 32]


def test_bad_options_are_refused_with_what_was_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load.parse(["--duration", "0", "--steps", "1", "-2", "--cell-bound", "2"])
    error = capsys.readouterr().err
    assert "--duration must be more than 0, got 0.0" in error
    assert "--steps must all be more than 0, got -2" in error
    assert "--cell-bound (2) must be more than --cell-timeout (2)" in error
    args, settings = load.parse(["--cell-timeout", "1.5", "--spare-sandbox", "False"])
    assert settings.workload.cell_timeout == 1.5 and args.reference
    config = load.kernel_config(settings)
    assert "c.SandboxKernel.cell_timeout = 1.5\n" in config and "c.SandboxKernel.spare_sandbox = False\n" in config
    assert "c.SandboxKernel.skills = ['TimeSkill']\n" in config
