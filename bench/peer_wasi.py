"""Measure pysandbox-wasi (CPython on Wasmtime, from PyPI), a peer wasm sandbox; run by bench/run.py in its own venv.

Prints one JSON object: cold start (a new runtime and worker to the first result), a warm call's round trip (median
and p90), a host call made from guest code (per call), the CPU-bound loop in a new worker's first call and once warm,
and memory (PSS of the sandbox process it starts), each the median of `--trials` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from pysandbox import PythonRuntime

PROGRAM = """
import time

def one_plus_one():
    return 1 + 1

def work(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total

def timed_work(n):
    t0 = time.perf_counter()
    work(n)
    return time.perf_counter() - t0
"""
HOST_CALLS = """
t0 = time.perf_counter()
for _ in range(calls):
    await now()
return (time.perf_counter() - t0) / calls
"""


def pss_mib(pid: int) -> float:
    """PSS of `pid` and every process below it, in MiB."""
    total = 0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                pids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return total / 1024


async def session(cpu_iterations: int, calls: int, round_trips: int) -> dict[str, object]:
    t0 = time.perf_counter()
    runtime = PythonRuntime()

    @runtime.rpc.expose
    def now(context: object, /) -> float:
        return time.time()

    worker = runtime.run(PROGRAM)
    try:
        assert await worker.call(("one_plus_one",), None) == 2
        cold = time.perf_counter() - t0
        first_cpu = await worker.call(("timed_work",), None, cpu_iterations)
        for _ in range(3):
            warm_cpu = await worker.call(("timed_work",), None, cpu_iterations)
        trips = []
        for _ in range(round_trips):
            t1 = time.perf_counter()
            await worker.call(("one_plus_one",), None)
            trips.append(time.perf_counter() - t1)
        host_call = await worker.call_function(HOST_CALLS, None, calls=calls)
        memory = pss_mib(os.getpid()) - pss_mib_self()
        return {
            "cold_s": cold,
            "first_cpu_s": first_cpu,
            "warm_cpu_s": warm_cpu,
            "round_trip_ms": 1000 * statistics.median(trips),
            "round_trip_p90_ms": 1000 * statistics.quantiles(trips, n=10)[-1],
            "host_call_ms": 1000 * host_call,
            "memory_mib": memory,
        }
    finally:
        await worker.close()
        await runtime.close()


def pss_mib_self() -> float:
    """This measuring process's own PSS (left out: it is the host, not the sandbox)."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--cpu-iterations", type=int, default=3_000_000)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--round-trips", type=int, default=40)
    args = parser.parse_args()
    runs = [asyncio.run(session(args.cpu_iterations, args.calls, args.round_trips)) for _ in range(args.trials)]
    print(json.dumps({key: statistics.median(float(run[key]) for run in runs) for key in runs[0]}))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
