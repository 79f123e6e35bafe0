"""Two installs of sandbox-kernel side by side (before and after a change), trials interleaved, in one run.

Usage: python bench/compare_installs.py BEFORE_PYTHON AFTER_PYTHON [--trials N] [--samples N] [--output FILE]
Each PYTHON is an environment where sandbox-kernel is installed with its kernelspec (`sandbox-kernel install
--sys-prefix`); its kernelspec's command is used as it is. Rows: cold start, the first completion and the first
error of a new kernel, warm round trips, and memory after start; ratio = after / before.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run import kernel_pid, p90, reply_to, run, settled_pss, start, stop, value, warm_round_trips


def install_kernelspec(python: str, name: str, folder: Path) -> None:
    """Copy the kernelspec `pyodide-sandbox` of `python`'s environment as `name` into `folder`."""
    prefix = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True)
    spec = Path(prefix.stdout.strip()) / "share" / "jupyter" / "kernels" / "pyodide-sandbox" / "kernel.json"
    (folder / "kernels" / name).mkdir(parents=True)
    (folder / "kernels" / name / "kernel.json").write_text(spec.read_text())


def new_kernel_timings(kernel: str) -> tuple[float, float, float]:
    """A new kernel: launch to the first `1+1`, then its first completion, then its first error (seconds)."""
    t0 = time.perf_counter()
    km, kc = start(kernel)
    try:
        value(kc, "1+1")
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert "operator" in reply_to(kc, kc.complete("import o", 8))["matches"]
        completion = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert run(kc, "undefined_name")["status"] == "error"
        error = time.perf_counter() - t0
        return started, completion, error
    finally:
        stop(km, kc)


def memory_after_start(kernel: str) -> float:
    km, kc = start(kernel)
    try:
        value(kc, "1+1")
        return settled_pss(kernel_pid(km), 2)[0]
    finally:
        stop(km, kc)


def interleaved(trials: int, measure: Callable[[str], object]) -> dict[str, list[object]]:
    results: dict[str, list[object]] = {"before": [], "after": []}
    for _ in range(trials):
        for name in ("before", "after"):
            results[name].append(measure(name))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name, python in (("before", args.before), ("after", args.after)):
            install_kernelspec(python, name, Path(folder))
        os.environ["JUPYTER_PATH"] = folder
        rows: list[tuple[str, str, float, float, str]] = []
        timings = interleaved(args.trials, new_kernel_timings)
        for index, what in enumerate(("cold start (launch to first `1+1`)", "first completion", "first error")):
            before = statistics.median(t[index] for t in timings["before"])  # type: ignore[index]
            after = statistics.median(t[index] for t in timings["after"])  # type: ignore[index]
            rows.append((what, "s", before, after, f"median of {args.trials}"))
        for code in ("pass", "1+1"):
            samples: dict[str, list[float]] = {}
            for name in ("before", "after"):
                km, kc = start(name)
                try:
                    samples[name] = warm_round_trips(kc, code, args.samples)
                finally:
                    stop(km, kc)
            before, after = (statistics.median(samples[n]) * 1000 for n in ("before", "after"))
            note = f"p90 {p90(samples['before']) * 1000:.2f} / {p90(samples['after']) * 1000:.2f} ms"
            rows.append((f"warm round trip `{code}`", "ms", before, after, note))
        memory = interleaved(max(1, args.trials // 2), memory_after_start)
        before, after = (statistics.median(memory[n]) for n in ("before", "after"))  # type: ignore[type-var]
        rows.append(("memory after start (kernel + sandbox)", "MiB PSS", before, after, "no spare sandbox"))
    lines = [
        f"One run of `python bench/compare_installs.py` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC,"
        f" {os.cpu_count()} cores; ratio = after / before.",
        "",
        "| measurement | unit | before | after | ratio | note |",
        "|---|---|---:|---:|---:|---|",
        *(f"| {r[0]} | {r[1]} | {r[2]:.4g} | {r[3]:.4g} | {r[3] / r[2]:.2f}x | {r[4]} |" for r in rows),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
    print(json.dumps({"rows": rows}), file=sys.stderr)


if __name__ == "__main__":
    main()
