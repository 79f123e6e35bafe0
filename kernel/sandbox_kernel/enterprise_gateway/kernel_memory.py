"""The memory of each EG kernel on this host, for the gate's `memory` command (bench/remote_load.py asks it).

A kernel is its launcher (`sandbox-kernel launch-eg --kernel-id ID ...`, in this host's network namespace) and
every process below it (the kernel, its Deno sandbox, a spare); its memory is their PSS summed, from
/proc/PID/smaps_rollup. Read-only: what the key may learn about its own kernels, nothing of other processes but
their parent links.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")


def _children() -> dict[int, list[int]]:
    """Each process's children (from the parent field of /proc/PID/stat)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[parent].append(int(entry.name))
    return children


def pss_kib(pid: int) -> int:
    """A process's PSS in KiB (0 if it is gone)."""
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def kernel_id_of(pid: int) -> str | None:
    try:
        words = (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    for option in ("--kernel-id", "--RemoteProcessProxy.kernel-id"):
        if option in words[:-1]:
            return words[words.index(option) + 1]
    return None


def same_network(pid: int) -> bool:
    """Whether `pid` is in this process's network namespace: the host's kernels, not those of another "host" that
    shares this machine's processes (tests/ssh_hosts.py's namespaces)."""
    try:
        return os.stat(PROC / str(pid) / "ns" / "net").st_ino == os.stat(PROC / "self" / "ns" / "net").st_ino
    except OSError:
        return False


def report(is_launcher: Callable[[int], bool]) -> str:
    """One JSON object: each launcher's kernel id, process count and PSS in MiB, and the host's available and total
    memory and its CPUs."""
    children = _children()
    kernels = []
    pids = (int(e.name) for e in PROC.iterdir() if e.name.isdigit())
    for pid in sorted(p for p in pids if is_launcher(p) and same_network(p)):
        tree, todo = [], [pid]
        while todo:
            current = todo.pop()
            tree.append(current)
            todo.extend(children.get(current, []))
        kernels.append({"kernel_id": kernel_id_of(pid), "processes": len(tree),
                        "pss_mib": round(sum(pss_kib(p) for p in tree) / 1024, 1)})  # fmt: skip
    meminfo = {
        k: v.split()[0] for k, _, v in (line.partition(":") for line in (PROC / "meminfo").read_text().splitlines())
    }
    mib = {name: round(int(meminfo.get(field, "0")) / 1024) for name, field in
           (("mem_available_mib", "MemAvailable"), ("mem_total_mib", "MemTotal"))}  # fmt: skip
    return json.dumps({"kernels": kernels, **mib, "cpus": os.cpu_count() or 0})
