"""Where a kernel's memory is: PSS per process and per part, after the first cell and after a CPU-bound cell.

Usage: python bench/memory.py [--trials N] [-- KERNEL ARGUMENTS ...]
Starts N kernels one after another (default settings unless arguments are given, e.g.
`--SandboxKernel.spare_sandbox=True`), and prints the median of each part as a markdown table. The parts are read
from /proc/PID/smaps (see `part`); bench/NOTES.md ("Issue 28: memory") says what each holds.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
from collections import defaultdict
from pathlib import Path

from run import CPU_LOOP, OURS, kernel_pid, process_tree, settled_pss, start, stop, value

MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")
PROGRAM = re.compile(r"deno|python3?(\.\d+)?|libpython3\.\d+\.so.*")
ARENA = 64 << 20  # glibc maps each malloc arena beside the main one as a 64 MiB-aligned heap
PARTS = (
    "program (deno, python)", "libraries", "wasm memory", "V8 heaps", "compiled code", "malloc arenas",
    "other anonymous", "other",
)  # fmt: skip
SCRATCH = "scratch files (tmpfs, not in PSS)"  # what Deno writes into its DENO_DIR: memory no smaps shows
# The worker isolate's own view: its JS heap and the interpreter's memory, asked of the guest (after the rest).
WORKER_FACTS = (
    "import js, pyodide_js\nm = js.Deno.memoryUsage()\n"
    "(round(m.heapUsed / 2**20, 1), round(m.heapTotal / 2**20, 1), round(m.external / 2**20, 1), "
    "pyodide_js._module.HEAP8.length >> 20)"
)


def mappings(pid: int) -> list[dict[str, object]]:
    """Each mapping of `pid`: start, size, permissions, name, its PSS and RSS in KiB, its VmFlags."""
    found: list[dict[str, object]] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        m = MAPPING.match(line)
        if m:
            start, end = int(m[1], 16), int(m[2], 16)
            found.append({"start": start, "size": end - start, "perm": m[3], "name": m[4], "flags": ""})
        elif line.startswith(("Pss:", "Rss:")):
            found[-1][line[:3]] = int(line.split()[1])
        elif line.startswith("VmFlags:"):
            found[-1]["flags"] = line[8:]
    return found


def part(m: dict[str, object], wasm: dict[str, object] | None) -> str:
    """What a mapping holds, told from its name, permissions, alignment and VmFlags (`dc`: V8's own mappings)."""
    name, perm, flags = str(m["name"]), str(m["perm"]), str(m["flags"])
    if name.startswith("/"):
        return PARTS[0] if PROGRAM.fullmatch(name.rsplit("/", 1)[-1]) else PARTS[1]
    if name == "[heap]":
        return PARTS[5]
    if name:
        return PARTS[7]  # [stack], [vdso], ...
    if m is wasm:
        return PARTS[2]
    if "x" in perm:
        return PARTS[4]
    if " dc" in flags:
        return PARTS[3]
    if " nr" in flags and int(str(m["start"])) % ARENA == 0:
        return PARTS[5]
    return PARTS[6]


def breakdown(pid: int) -> dict[str, float]:
    """PSS in MiB of each part of `pid`; the wasm memory is V8's largest resident writable `dc` mapping."""
    maps = mappings(pid)
    v8 = [m for m in maps if not m["name"] and " dc" in str(m["flags"]) and "x" not in str(m["perm"])]
    wasm = max(v8, key=lambda m: int(str(m.get("Rss", 0))), default=None)
    if wasm is not None and int(str(wasm["size"])) < 16 << 20:
        wasm = None
    parts: dict[str, float] = defaultdict(float)
    for m in maps:
        parts[part(m, wasm)] += int(str(m.get("Pss", 0))) / 1024
    parts[SCRATCH] = scratch_mib(pid)
    return parts


def scratch_mib(pid: int) -> float:
    """MiB of the files in a Deno process's DENO_DIR, as the process sees it (its own tmpfs under the namespaces
    layer); links (to the npm cache, to Deno itself) are not its own. 0 for other processes."""
    try:
        env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
    except OSError:
        return 0.0
    if "DENO_DIR" not in env:
        return 0.0
    scratch = Path(f"/proc/{pid}/root") / env["DENO_DIR"].lstrip("/")
    files = (Path(top, name) for top, _, names in os.walk(scratch) for name in names)
    return sum(f.lstat().st_size for f in files if not f.is_symlink()) / 2**20


def one_kernel(arguments: list[str]) -> tuple[list[dict[str, float]], list[dict[str, float]], str]:
    """A new kernel's parts per process after `1+1`, then after a CPU-bound cell; and its worker's facts."""
    km, kc = start(OURS, arguments)
    try:
        value(kc, "1+1")
        pid = kernel_pid(km)
        settled_pss(pid, 2)
        first = [breakdown(p) for p in process_tree(pid)]
        value(kc, CPU_LOOP)
        settled_pss(pid, 2)
        after = [breakdown(p) for p in process_tree(pid)]
        return first, after, value(kc, WORKER_FACTS)
    finally:
        stop(km, kc)


def table(runs: list[list[dict[str, float]]], title: str) -> str:
    """Medians of each part, per process (kernel, then its sandbox), as a markdown table."""
    processes = min(len(r) for r in runs)
    names = ["kernel process", "sandbox (Deno)", *(f"process {i}" for i in range(2, processes))][:processes]
    lines = [f"| {title} | " + " | ".join(names) + " |", "|---|" + "---:|" * processes]
    for name in (*PARTS, "total", SCRATCH):
        cells = []
        for i in range(processes):
            total = [sum(v for k, v in r[i].items() if k != SCRATCH) for r in runs]
            values = total if name == "total" else [r[i].get(name, 0.0) for r in runs]
            cells.append(f"{statistics.median(values):.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("arguments", nargs="*", help="the kernel's own arguments")
    args = parser.parse_args()
    results = [one_kernel(args.arguments) for _ in range(args.trials)]
    print(table([r[0] for r in results], "after the first cell (MiB PSS)"))
    print()
    print(table([r[1] for r in results], "after a CPU-bound cell (MiB PSS)"))
    print()
    print("worker isolate (heap used, heap total, external MiB; wasm memory MiB):", ", ".join(r[2] for r in results))


if __name__ == "__main__":
    main()
