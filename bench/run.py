"""Benchmarks of sandbox-kernel side by side with ipykernel's python3 kernel, in one run.

Usage: python bench/run.py [--trials N] [--output bench/RESULTS.md]
Prints a markdown table (medians, ratio to ipykernel) and writes it to RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

OURS = "pyodide-sandbox"
REFERENCE = "python3"


@dataclass
class Row:
    name: str
    unit: str
    ours: float
    reference: float | None
    note: str = ""

    def ratio(self) -> str:
        if not self.reference:
            return "n/a"
        return f"{self.ours / self.reference:.2f}x"


def start(kernel: str) -> tuple[KernelManager, BlockingKernelClient]:
    km = KernelManager(kernel_name=kernel)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=300)
    return km, kc


def stop(km: KernelManager, kc: BlockingKernelClient) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def run(kc: BlockingKernelClient, code: str, timeout: float = 600) -> dict:
    """Execute and wait for idle; returns the reply content."""
    msg_id = kc.execute(code)
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status":
            if msg["content"]["execution_state"] == "idle":
                break
    return kc.get_shell_msg(timeout=timeout)["content"]


def value(kc: BlockingKernelClient, code: str) -> str:
    """The text/plain result of `code`."""
    msg_id = kc.execute(code)
    result = None
    while True:
        msg = kc.get_iopub_msg(timeout=600)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "execute_result":
            result = msg["content"]["data"]["text/plain"]
        if msg["msg_type"] == "error":
            raise RuntimeError(f"{code!r} failed: {msg['content']['evalue']}")
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    kc.get_shell_msg(timeout=60)
    assert result is not None, code
    return result


def median_of(trials: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(trials))


# ---- measurements --------------------------------------------------------------------------


def cold_start(kernel: str, trials: int) -> float:
    def once() -> float:
        t0 = time.perf_counter()
        km, kc = start(kernel)
        value(kc, "1+1")
        took = time.perf_counter() - t0
        stop(km, kc)
        return took

    return median_of(trials, once)


def warm_round_trip(kc: BlockingKernelClient, code: str, trials: int) -> float:
    run(kc, code)

    def once() -> float:
        t0 = time.perf_counter()
        run(kc, code)
        return time.perf_counter() - t0

    return median_of(trials, once)


SKILL_LOOP = """
import time
_f = {target}
for _ in range(100):
    _f()
_t0 = time.perf_counter()
for _ in range({calls}):
    _f()
(time.perf_counter() - _t0) / {calls}
"""


def skill_call(kc: BlockingKernelClient, target: str, calls: int) -> float:
    """Seconds per call of a trivial skill method, timed inside the kernel."""
    return float(value(kc, SKILL_LOOP.format(target=target, calls=calls)))


# ---- report --------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = [
        "| measurement | unit | sandbox-kernel | ipykernel | ratio | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ref = "n/a" if r.reference is None else f"{r.reference:.4g}"
        lines.append(f"| {r.name} | {r.unit} | {r.ours:.4g} | {ref} | {r.ratio()} | {r.note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10_000, help="skill calls timed")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "RESULTS.md")
    args = parser.parse_args()

    rows: list[Row] = []
    rows.append(
        Row(
            "cold start (launch to first `1+1` reply)",
            "s",
            cold_start(OURS, args.trials),
            cold_start(REFERENCE, args.trials),
        )
    )

    ours = start(OURS)
    ref = start(REFERENCE)
    try:
        for code in ("pass", "1+1"):
            rows.append(
                Row(
                    f"warm round trip `{code}`",
                    "ms",
                    1000 * warm_round_trip(ours[1], code, args.trials * 4),
                    1000 * warm_round_trip(ref[1], code, args.trials * 4),
                )
            )
        run(ref[1], "from sandbox_kernel.skills.time_skill import TimeSkill; _skill = TimeSkill()")
        rows.append(
            Row(
                f"skill call ({args.calls:,} x `TimeSkill.get_current_time()`)",
                "ms/call",
                1000 * skill_call(ours[1], "device.TimeSkill.get_current_time", args.calls),
                1000 * skill_call(ref[1], "_skill.get_current_time", args.calls),
                "ipykernel: the same method called in-process (no bridge)",
            )
        )
    finally:
        stop(*ours)
        stop(*ref)

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = (
        f"# Benchmark results\n\nOne run of `python bench/run.py --trials {args.trials}` on {when}, "
        f"{platform.machine()}, Python {platform.python_version()} (host). Medians; ratio = sandbox-kernel / ipykernel.\n\n"
        f"{table(rows)}\n"
    )
    print(report)
    args.output.write_text(report)


if __name__ == "__main__":
    main()
