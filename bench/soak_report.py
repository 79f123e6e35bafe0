"""The soak run's figures (bench/soak.py): per block of cells between restarts, latency percentiles and the growth of
each process's memory, and the markdown tables of RESULTS.md. Pure: no kernel here."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    """Memory after `cells` cells of a block (0: right after the setup cell)."""

    cells: int
    kernel_mib: float  # RSS of the kernel process
    sandbox_mib: float | None  # RSS of its sandbox's Deno process (ipykernel: none)
    fds: int  # the kernel process's open file descriptors


@dataclass
class Block:
    """The cells between two restarts of one kernel."""

    index: int
    samples: list[Sample] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # seconds, by kind
    failures: list[str] = field(default_factory=list)
    restart_seconds: float | None = None  # the restart that ended the block, to the kernel's next reply
    resent_interrupts: int = 0  # interrupts sent again because the first had no effect within the wait

    @property
    def cells(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def timed(self, exclude: tuple[str, ...] = ("interrupt",)) -> list[float]:
        """All latencies but those of `exclude` (an interrupt cell's includes the client's wait before it)."""
        return [t for kind, times in self.latencies.items() if kind not in exclude for t in times]

    def growth(self, attribute: str, skip: int = 1) -> float | None:
        """MiB per 1,000 cells of `attribute` ('kernel_mib' or 'sandbox_mib'): the least-squares slope over the
        samples after the first `skip` (the first cells after a start load what later ones reuse)."""
        points = [(s.cells, getattr(s, attribute)) for s in self.samples[skip:] if getattr(s, attribute) is not None]
        found = slope(points)
        return None if found is None else 1000 * found

    def first_cells_mib(self, attribute: str) -> float | None:
        """What the first sample interval added to `attribute` (the first use of shell, completions, ...)."""
        if len(self.samples) < 2 or getattr(self.samples[0], attribute) is None:
            return None
        return float(getattr(self.samples[1], attribute) - getattr(self.samples[0], attribute))


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, linearly interpolated between the closest ranks."""
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 1:
        raise ValueError(f"q must be within 0 and 1, got {q}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x; None for fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    num = sum((x - mean_x) * (y - mean_y) for x, y in points)
    den = sum((x - mean_x) ** 2 for x, _ in points)
    return num / den


def ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or not theirs:
        return "n/a"
    return f"{ours / theirs:.2f}x"


def shown(value: float | None, digits: str = ".1f", sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+{digits}}" if sign else f"{value:{digits}}"


def p50_p90_ms(values: list[float]) -> tuple[float, float] | None:
    return (1000 * percentile(values, 0.5), 1000 * percentile(values, 0.9)) if values else None


def latency_table(ours: list[Block], theirs: list[Block] | None) -> str:
    """One row per block: p50 / p90 of every cell but interrupts, ours and ipykernel's, and their ratios."""
    lines = [
        "| block | cells | sandbox-kernel p50 / p90 ms | ipykernel p50 / p90 ms | ratio p50 | ratio p90 | restart after it, s (ours / ipykernel) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for i, block in enumerate(ours):
        other = theirs[i] if theirs and i < len(theirs) else None
        a = p50_p90_ms(block.timed())
        b = p50_p90_ms(other.timed()) if other else None
        restart = f"{shown(block.restart_seconds, '.2f')} / {shown(other.restart_seconds if other else None, '.2f')}"
        lines.append(
            f"| {block.index + 1} | {block.cells:,} | {_pair(a)} | {_pair(b)} | {ratio(a and a[0], b and b[0])} "
            f"| {ratio(a and a[1], b and b[1])} | {restart} |"
        )
    return "\n".join(lines)


def memory_table(ours: list[Block], theirs: list[Block] | None) -> str:
    """One row per block: each process's RSS at the block's end and its growth per 1,000 cells."""
    lines = [
        "| block | kernel process: RSS at end, MiB (growth /1,000 cells) | sandbox's Deno: RSS at end (growth) "
        "| ipykernel: RSS at end (growth) | RSS ratio, kernel + Deno / ipykernel | open fds at end, ours / ipykernel |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for i, block in enumerate(ours):
        other = theirs[i] if theirs and i < len(theirs) else None
        end = block.samples[-1] if block.samples else None
        their_end = other.samples[-1] if other and other.samples else None
        total = end.kernel_mib + (end.sandbox_mib or 0) if end else None
        lines.append(
            f"| {block.index + 1} | {_memory(end and end.kernel_mib, block.growth('kernel_mib'))} "
            f"| {_memory(end and end.sandbox_mib, block.growth('sandbox_mib'))} "
            f"| {_memory(their_end and their_end.kernel_mib, other.growth('kernel_mib') if other else None)} "
            f"| {ratio(total, their_end and their_end.kernel_mib)} "
            f"| {end.fds if end else 'n/a'} / {their_end.fds if their_end else 'n/a'} |"
        )
    return "\n".join(lines)


def kind_table(ours: list[Block], theirs: list[Block] | None, kinds: tuple[str, ...]) -> str:
    """Latency by kind of cell over the whole run (p50 / p90 ms and the number), ours against ipykernel's."""
    lines = [
        "| kind | sandbox-kernel p50 / p90 ms (cells) | ipykernel p50 / p90 ms (cells) | ratio p50 |",
        "|---|---:|---:|---:|",
    ]
    for kind in kinds:
        a_times = [t for b in ours for t in b.latencies.get(kind, [])]
        b_times = [t for b in theirs or [] for t in b.latencies.get(kind, [])]
        a, b = p50_p90_ms(a_times), p50_p90_ms(b_times)
        lines.append(
            f"| {kind} | {_pair(a)} ({len(a_times):,}) | {_pair(b)} ({len(b_times):,}) "
            f"| {ratio(a and a[0], b and b[0])} |"
        )
    return "\n".join(lines)


def drift(blocks: list[Block]) -> float | None:
    """The last block's p50 over the first's, less 1 (latency drift across the run); None with fewer than 2."""
    timed = [b.timed() for b in blocks if b.timed()]
    if len(timed) < 2:
        return None
    return percentile(timed[-1], 0.5) / percentile(timed[0], 0.5) - 1


def _pair(pair: tuple[float, float] | None) -> str:
    return "n/a" if pair is None else f"{pair[0]:.1f} / {pair[1]:.1f}"


def _memory(end: float | None, growth: float | None) -> str:
    return "n/a" if end is None else f"{end:.0f} ({shown(growth, '.1f', sign=True)})"
