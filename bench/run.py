"""Benchmarks of sandbox-kernel side by side with ipykernel's python3 kernel, in one run.

Usage: python bench/run.py [--trials N] [--calls N] [--lines N] [--output bench/RESULTS.md]
Prints a markdown table (medians, ratio to ipykernel) and writes it to RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
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


SETTLE = 3.0  # seconds after a kernel start before warm measurements


def start(kernel: str, arguments: list[str] | None = None) -> tuple[KernelManager, BlockingKernelClient]:
    km = KernelManager(kernel_name=kernel)
    km.start_kernel(extra_arguments=arguments or [])
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
    return reply_to(kc, msg_id, timeout)


def reply_to(kc: BlockingKernelClient, msg_id: str, timeout: float = 60) -> dict:
    """The shell reply to `msg_id` (stale replies, e.g. wait_for_ready's extra kernel_info_reply, are skipped)."""
    while True:
        msg = kc.get_shell_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg["content"]


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
    reply_to(kc, msg_id)
    assert result is not None, code
    return result


def median_of(trials: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(trials))


# ---- measurements --------------------------------------------------------------------------


OS_LAYERS_OFF = "--SandboxKernel.os_sandbox=off"
WITH_TIME_SKILL = '--SandboxKernel.skills=["TimeSkill"]'  # shipped skills are exposed only when configured


def cold_start(kernel: str, trials: int, arguments: list[str] | None = None) -> float:
    def once() -> float:
        t0 = time.perf_counter()
        km, kc = start(kernel, arguments)
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


def first_completion(kernel: str, trials: int, arguments: list[str] | None = None) -> float:
    """The first Tab in a new kernel (`import o`), once it answers kernel_info; JupyterLab drops replies over 1 s."""

    def once() -> float:
        km, kc = start(kernel, arguments)
        try:
            t0 = time.perf_counter()
            reply = reply_to(kc, kc.complete("import o", 8), timeout=60)
            took = time.perf_counter() - t0
            assert "operator" in reply["matches"], reply
            return took
        finally:
            stop(km, kc)

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


def streaming(kc: BlockingKernelClient, lines: int) -> float:
    """Seconds from execute_request to the idle status (and the reply) of a cell printing `lines` short lines."""
    t0 = time.perf_counter()
    run(kc, f"for i in range({lines}):\n    print(i)")
    return time.perf_counter() - t0


def rich_output(kc: BlockingKernelClient, count: int) -> float:
    t0 = time.perf_counter()
    run(kc, f"from IPython.display import HTML, display\nfor i in range({count}):\n    display(HTML(f'<b>{{i}}</b>'))")
    return time.perf_counter() - t0


CPU_LOOP = """
import time
def _work(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total
_t0 = time.perf_counter(); _work(3_000_000); time.perf_counter() - _t0
"""


def cpu_bound(kc: BlockingKernelClient) -> float:
    """Seconds for a pure-Python loop, timed inside the kernel."""
    return float(value(kc, CPU_LOOP))


STUBBORN = "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"


def restart_after_timeout(trials: int) -> float:
    """Seconds from the SandboxTimeout reply (the guest would not stop) to the next successful cell."""
    km = KernelManager(kernel_name=OURS)
    km.start_kernel(extra_arguments=["--SandboxKernel.cell_timeout=1", "--SandboxKernel.interrupt_grace=0.5"])
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=300)
    try:
        value(kc, "1+1")
        times = []
        for _ in range(trials):
            reply = run(kc, STUBBORN)
            assert reply.get("ename") == "SandboxTimeout", reply
            t0 = time.perf_counter()
            value(kc, "1+1")
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        stop(km, kc)


def restart_reference(km: KernelManager, kc: BlockingKernelClient, trials: int) -> float:
    """ipykernel has no cell timeout: the nearest thing is a kernel restart, timed to the next result."""

    def once() -> float:
        t0 = time.perf_counter()
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=300)
        value(kc, "1+1")
        return time.perf_counter() - t0

    return median_of(trials, once)


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its direct children, in MiB."""
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"PPid:\t{pid}\n" in (entry / "status").read_text():
                    pids.append(int(entry.name))
            except OSError:
                pass
    total = 0
    for p in pids:
        try:
            status = (Path("/proc") / str(p) / "status").read_text()
        except OSError:
            continue
        total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return total / 1024


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
    parser.add_argument("--lines", type=int, default=200_000, help="lines printed in the streaming test")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "RESULTS.md")
    args = parser.parse_args()
    trials = args.trials

    reference_start = cold_start(REFERENCE, trials)
    rows = [Row("cold start (launch to first `1+1` reply)", "s", cold_start(OURS, trials), reference_start)]
    rows.append(
        Row(
            "cold start, `os_sandbox='off'`",
            "s",
            cold_start(OURS, trials, [OS_LAYERS_OFF]),
            reference_start,
            "no OS layers: compare with the row above for their cost",
        )
    )
    completion = (1000 * first_completion(OURS, trials), 1000 * first_completion(REFERENCE, trials))
    rows.append(
        Row("first completion in a new kernel (`import o` + Tab)", "ms", *completion, "JupyterLab's limit: 1000 ms")
    )
    off_km, off = start(OURS, [OS_LAYERS_OFF])
    time.sleep(SETTLE)  # as for the kernel with the layers below: its spare has started
    off_pass = 1000 * warm_round_trip(off, "pass", max(40, trials * 8))
    stop(off_km, off)
    single_km, single = start(OURS, ["--SandboxKernel.spare_sandbox=False"])
    time.sleep(SETTLE)
    single_rss = rss_mb(single_km.provisioner.process.pid)
    stop(single_km, single)
    ours_km, ours = start(OURS, [WITH_TIME_SKILL])
    ref_km, ref = start(REFERENCE)
    time.sleep(SETTLE)  # "warm": the spare sandbox has started, nothing else is running
    started = (rss_mb(ours_km.provisioner.process.pid), rss_mb(ref_km.provisioner.process.pid))
    try:
        for code in ("pass", "1+1"):
            samples = max(40, trials * 8)
            ms = (1000 * warm_round_trip(ours, code, samples), 1000 * warm_round_trip(ref, code, samples))
            rows.append(Row(f"warm round trip `{code}`", "ms", *ms))
            if code == "pass":
                note = "no OS layers: compare with the row above for their cost"
                rows.append(Row("warm round trip `pass`, `os_sandbox='off'`", "ms", off_pass, ms[1], note))
        run(ref, "from sandbox_kernel.skills.time_skill import TimeSkill; _skill = TimeSkill()")
        per_call = (
            1000 * skill_call(ours, "device.TimeSkill.get_current_time", args.calls),
            1000 * skill_call(ref, "_skill.get_current_time", args.calls),
        )
        note = "ipykernel: the same method called in-process (no bridge)"
        rows.append(Row(f"skill call ({args.calls:,} x `TimeSkill.get_current_time()`)", "ms/call", *per_call, note))
        seconds = (median_of(3, lambda: streaming(ours, args.lines)), median_of(3, lambda: streaming(ref, args.lines)))
        rows.append(Row(f"streaming ({args.lines:,} printed lines, to idle)", "s", *seconds))
        streamed = (rss_mb(ours_km.provisioner.process.pid), rss_mb(ref_km.provisioner.process.pid))
        seconds = (median_of(3, lambda: rich_output(ours, 1000)), median_of(3, lambda: rich_output(ref, 1000)))
        rows.append(Row("rich output (1,000 `display(HTML(...))`)", "s", *seconds))
        seconds = (median_of(3, lambda: cpu_bound(ours)), median_of(3, lambda: cpu_bound(ref)))
        rows.append(Row("CPU-bound pure-Python loop (3M iterations)", "s", *seconds, "CPython on wasm vs native"))
        seconds = (restart_after_timeout(trials), restart_reference(ref_km, ref, trials))
        note = "ipykernel: a kernel restart (it has no cell timeout)"
        rows.append(Row("restart after a timeout, to the next result", "s", *seconds, note))
        rows.append(Row("memory after start (kernel + sandbox + spare)", "MiB RSS", *started))
        rows.append(Row("memory after start, `spare_sandbox=False`", "MiB RSS", single_rss, started[1]))
        rows.append(Row("memory after the streaming test", "MiB RSS", *streamed))
    finally:
        stop(ours_km, ours)
        stop(ref_km, ref)

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = (
        f"# Benchmark results\n\nOne run of `python bench/run.py --trials {trials}` on {when}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()} (host). "
        "Medians; ratio = sandbox-kernel / ipykernel.\n\n"
        f"{table(rows)}\n"
    )
    print(report)
    args.output.write_text(report)


if __name__ == "__main__":
    main()
