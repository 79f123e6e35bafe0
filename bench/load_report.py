"""The pure parts of the gateway load test (bench/load.py): percentiles, the rule for a step that holds, the
sizing derived from the measured steps, and the report's tables. No kernel, no gateway here."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

INTERACTIVE = "all but timeout"  # the overall figure: the timeout cell's latency is cell_timeout by design
MIB_PER_GIB = 1024


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile (1 <= q <= 99), interpolated linearly between the closest ranks (the 'inclusive'
    method: the 0th is the smallest value, the 100th the largest)."""
    if not 1 <= q <= 99:
        raise ValueError(f"percentile {q} is not between 1 and 99")
    if not values:
        raise ValueError("the percentile of no values")
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass(frozen=True)
class Latency:
    count: int
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency | None:
        if not seconds:
            return None
        return cls(len(seconds), percentile(seconds, 50), percentile(seconds, 90), percentile(seconds, 99))

    def shown(self) -> str:
        """'p50 / p90 / p99' in ms."""
        return " / ".join(f"{1000 * v:.0f}" for v in (self.p50, self.p90, self.p99))


@dataclass
class Step:
    """What one step of the ramp measured: `n` kernels of `kernel` running the workload at once."""

    kernel: str  # the kernelspec: pyodide-sandbox, or python3 (ipykernel) for the reference
    n: int
    seconds: float = 0.0  # wall time of the workload
    cells: dict[str, list[float]] = field(default_factory=dict)  # seconds per cell, by kind (right or wrong)
    failures: list[str] = field(default_factory=list)  # every wrong outcome, start error or lost client
    start_seconds: list[float] = field(default_factory=list)  # launch to first result, kernels started for it
    rest_pss_mb: list[float] = field(default_factory=list)  # per kernel and its sandboxes, at rest before
    busy_pss_mb: list[float] = field(default_factory=list)  # per kernel, right after the workload
    gateway_pss_mb: float = 0.0  # the gateway's own process
    idle_cpu: float = 0.0  # cores all N kernels used at rest (their processes and sandboxes)
    kernels_cpu: float = 0.0  # cores they used during the workload
    gateway_cpu: float = 0.0  # cores the gateway's own process used during the workload
    client_cpu: float = 0.0  # cores this load client used during the workload
    machine_cpu: float = 0.0  # cores the whole machine used during the workload (other work's too)
    load_average: tuple[float, float] = (0.0, 0.0)  # the machine's 1-minute load average before and after

    @property
    def cell_count(self) -> int:
        return sum(len(v) for v in self.cells.values())

    def latency(self, kind: str) -> Latency | None:
        if kind == INTERACTIVE:
            return Latency.of([s for k, values in self.cells.items() if k != "timeout" for s in values])
        return Latency.of(self.cells.get(kind, []))

    @property
    def other_cpu(self) -> float:
        """Cores that other work on the machine used during the workload (not the kernels, gateway or client)."""
        return max(0.0, self.machine_cpu - self.kernels_cpu - self.gateway_cpu - self.client_cpu)

    @property
    def rest_per_kernel(self) -> float:
        return statistics.fmean(self.rest_pss_mb) if self.rest_pss_mb else math.nan

    @property
    def busy_per_kernel(self) -> float:
        return statistics.fmean(self.busy_pss_mb) if self.busy_pss_mb else math.nan


@dataclass(frozen=True)
class HoldsRule:
    """A step holds when no cell failed and the CPU cell's p99 stays within `factor` times its p50 at the first
    step (N=1). The CPU cell is a fixed amount of pure-Python work, so its latency grows only when the kernels
    wait for the cores (or the gateway and the client cannot keep up): the bound measures contention, and holds
    on any machine whatever its speed."""

    factor: float = 3.0

    def why_not(self, step: Step, baseline: Latency | None, baseline_n: int = 1) -> str | None:
        """None if `step` holds, else why not; `baseline`: the CPU cell's latency at the first step (N=`baseline_n`)."""
        if step.failures:
            return f"{len(step.failures)} failure(s)"
        cpu = step.latency("cpu")
        if cpu is None or baseline is None:
            return "no CPU cell ran"
        bound = self.factor * baseline.p50
        if cpu.p99 > bound:
            return f"CPU cell p99 {1000 * cpu.p99:.0f} ms > {self.factor:g} x its p50 at N={baseline_n} ({1000 * bound:.0f} ms)"
        return None

    def verdict(self, steps: Sequence[Step]) -> tuple[int | None, str | None]:
        """The largest N of `steps` (in ramp order, the first the baseline) up to which every step held, and why
        the first that did not hold failed (None if all held)."""
        if not steps:
            return None, "no step ran"
        baseline = steps[0].latency("cpu")
        held = None
        for step in steps:
            why = self.why_not(step, baseline, steps[0].n)
            if why is not None:
                return held, f"N={step.n}: {why}"
            held = step.n
        return held, None


def cpu_cores(before: Mapping[int, float], after: Mapping[int, float], seconds: float) -> float:
    """Cores used over `seconds` by processes sampled before and after (pid -> CPU seconds): a process that
    started in between counts from zero; one that ended in between is not seen (its last share is lost)."""
    used = sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())
    return used / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class Machine:
    cores: int
    ram_mib: float


@dataclass(frozen=True)
class SizingRow:
    state: str
    per_kernel_mib: float  # memory each kernel takes in this state (PSS)
    per_machine: int  # kernels one machine holds in this state
    bound: str  # what limits per_machine
    cores: int
    nodes: int

    @property
    def per_gib(self) -> float:
        return MIB_PER_GIB / self.per_kernel_mib

    @property
    def per_core(self) -> float:
        return self.per_machine / self.cores

    @property
    def cluster(self) -> int:
        return self.per_machine * self.nodes


def sizing(
    machine: Machine,
    steps: Sequence[Step],
    held: int | None,
    failed: str | None,
    reserve_mib: float,
    memory_limit_mb: float,
    nodes: int = 100,
) -> list[SizingRow]:
    """Kernels per GiB, per core, per machine and per `nodes` machines like this one, from the ramp's `steps`
    (sandbox-kernel's), the largest N that held and why the next did not (`failed`; None: every step held, so
    more may hold than the ramp tried). Memory at rest is the largest step's per-kernel PSS (PSS splits
    the pages kernels share, so it only falls as N grows: the figure is on the safe side for more kernels); the
    machine's usable memory is its RAM less `reserve_mib` for the system and less the gateway's own PSS."""
    largest = max(steps, key=lambda s: s.n)
    usable = machine.ram_mib - reserve_mib - largest.gateway_pss_mb
    rest = largest.rest_per_kernel
    idle_cpu_each = largest.idle_cpu / largest.n
    fit_at_rest = math.floor(usable / rest)
    by_cpu = math.floor(machine.cores / idle_cpu_each) if idle_cpu_each > 0 else fit_at_rest + 1
    if by_cpu < fit_at_rest:
        idle_bound = f"CPU at rest ({100 * idle_cpu_each:.2f}% of a core each)"
    else:
        idle_bound = f"memory ({usable / MIB_PER_GIB:.1f} GiB usable; at rest a kernel uses {100 * idle_cpu_each:.2f}% of a core)"
    rows = [SizingRow("idle (started, at rest)", rest, min(fit_at_rest, by_cpu), idle_bound, machine.cores, nodes)]
    held_step = next((s for s in steps if s.n == held), None)
    if held_step is None:
        rows.append(SizingRow("busy (the load test's workload)", largest.busy_per_kernel, 0,
                              "not even the first step held", machine.cores, nodes))  # fmt: skip
    else:
        busy = held_step.busy_per_kernel
        fit_busy = math.floor(usable / busy)
        if fit_busy < held_step.n:
            bound = "memory"
        elif failed is None:
            bound = f"the ramp's end: every step held, up to N={held_step.n}; more may hold"
        else:
            bound = f"the largest N that held; {failed}"
        rows.append(SizingRow("busy (the load test's workload)", busy, min(fit_busy, held_step.n), bound,
                              machine.cores, nodes))  # fmt: skip
    worst = rest + memory_limit_mb
    rows.append(SizingRow(f"every guest at memory_limit_mb={memory_limit_mb:g}", worst, math.floor(usable / worst),
                          "memory (wasm memory never shrinks)", machine.cores, nodes))  # fmt: skip
    return rows


# ---- tables ----------------------------------------------------------------------------------------


def latency_table(steps: Sequence[Step], kinds: Sequence[str]) -> str:
    columns = [*kinds, INTERACTIVE]
    lines = [
        "| kernel | N | cells | " + " | ".join(columns) + " |",
        "|---|---:|---:|" + "---:|" * len(columns),
    ]
    for step in steps:
        shown = []
        for kind in columns:
            latency = step.latency(kind)
            shown.append("n/a" if latency is None else f"{latency.shown()} ({latency.count})")
        lines.append(f"| {step.kernel} | {step.n} | {step.cell_count} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def resource_table(steps: Sequence[Step], rule: HoldsRule | None) -> str:
    """One row per step; 'holds' by `rule` against the first step (None: not judged, as for the reference)."""
    lines = [
        "| kernel | N | failures | holds | start p50 / max (s) | PSS per kernel at rest / after (MiB) "
        "| PSS all kernels after (MiB) | gateway PSS (MiB) | CPU at rest (cores) "
        "| CPU in the workload: kernels / gateway / client / other work (cores) | load average before / after |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    baseline = steps[0].latency("cpu") if steps else None
    for step in steps:
        why = None if rule is None else rule.why_not(step, baseline, steps[0].n)
        holds = "n/a" if rule is None else "yes" if why is None else f"no: {why}"
        start = (
            f"{statistics.median(step.start_seconds):.2f} / {max(step.start_seconds):.2f}"
            if step.start_seconds
            else "n/a"
        )
        lines.append(
            f"| {step.kernel} | {step.n} | {len(step.failures)} | {holds} | {start} "
            f"| {step.rest_per_kernel:.0f} / {step.busy_per_kernel:.0f} | {sum(step.busy_pss_mb):.0f} "
            f"| {step.gateway_pss_mb:.0f} | {step.idle_cpu:.3f} "
            f"| {step.kernels_cpu:.2f} / {step.gateway_cpu:.2f} / {step.client_cpu:.2f} / {step.other_cpu:.2f} "
            f"| {step.load_average[0]:.2f} / {step.load_average[1]:.2f} |"
        )
    return "\n".join(lines)


def comparison_table(ours: Sequence[Step], reference: Sequence[Step], kinds: Sequence[str]) -> str:
    """Per N run by both: p50 latency of each kind the reference ran, and memory per kernel, ours / reference."""
    columns = [*kinds, INTERACTIVE]
    lines = [
        "| N | " + " | ".join(f"{kind} p50 (ms)" for kind in columns) + " | PSS per kernel at rest (MiB) |",
        "|---:|" + "---:|" * (len(columns) + 1),
    ]
    theirs = {step.n: step for step in reference}
    for step in ours:
        other = theirs.get(step.n)
        if other is None:
            continue
        shown = []
        for kind in columns:
            a, b = step.latency(kind), other.latency(kind)
            shown.append("n/a" if a is None or b is None else _ratio(1000 * a.p50, 1000 * b.p50))
        shown.append(_ratio(step.rest_per_kernel, other.rest_per_kernel))
        lines.append(f"| {step.n} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _ratio(ours: float, reference: float) -> str:
    ratio = f"{ours / reference:.2f}x" if reference else "n/a"
    return f"{ours:.0f} / {reference:.0f} = {ratio}"


def sizing_table(rows: Sequence[SizingRow]) -> str:
    nodes = rows[0].nodes if rows else 0
    lines = [
        f"| state | per kernel (MiB PSS) | kernels per GiB | kernels per core | one machine | {nodes} machines "
        "| bound by |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.state} | {r.per_kernel_mib:.0f} | {r.per_gib:.1f} | {r.per_core:.1f} | {r.per_machine:,} "
            f"| {r.cluster:,} | {r.bound} |"
        )
    return "\n".join(lines)


def failure_list(steps: Sequence[Step], limit: int = 20) -> str:
    """The first `limit` failures, each with its step; and how many more there were."""
    shown = [f"- {step.kernel} N={step.n}: {failure}" for step in steps for failure in step.failures]
    if not shown:
        return "No failures."
    more = len(shown) - limit
    return "\n".join(shown[:limit] + ([f"- ... and {more} more"] if more > 0 else []))
