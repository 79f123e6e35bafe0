"""What a sandbox holds in memory: the levers of bench/NOTES.md (issue 28) are in force in a real kernel."""

from __future__ import annotations

import os
import re
from pathlib import Path

import psutil

from conftest import execute, start_kernel, stop_kernel, value
from sandbox_kernel.sandbox.launch_plan import MALLOC_ENV

ARENA = 64 << 20  # glibc maps each arena beside the main one as a 64 MiB-aligned heap (HEAP_MAX_SIZE)
MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def deno_of(km) -> psutil.Process:  # type: ignore[no-untyped-def]
    """The kernel's sandbox process (not a start-up snapshot being built beside it, after a change of the guest)."""
    children = psutil.Process(km.provisioner.process.pid).children()
    (deno,) = [child for child in children if any(word.endswith("main.ts") for word in child.cmdline())]
    return deno


def arenas(pid: int) -> list[int]:
    """Start addresses of glibc's extra malloc arenas: anonymous, 64 MiB-aligned, mapped without swap reserve (V8's
    own reservations are marked don't-copy-on-fork, `dc`)."""
    found, start, name = [], 0, ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        mapping = MAPPING.match(line)
        if mapping:
            start, name = int(mapping[1], 16), mapping[3]
        elif line.startswith("VmFlags:") and not name and start % ARENA == 0 and " nr" in line and " dc" not in line:
            found.append(start)
    return found


def test_the_sandbox_and_the_kernel_allocate_from_one_arena():
    """Without the settings Deno's ~15 threads made a dozen arenas (~45 MiB after the first cell, measured), and the
    kernel process's threads (ZeroMQ's, ipykernel's) four."""
    km, kc = start_kernel()
    try:
        assert value(execute(kc, "sum(i * i for i in range(200_000))")) == "2666646666700000"
        assert arenas(km.provisioner.process.pid) == []
        deno = deno_of(km)
        with deno.oneshot():
            assert deno.name() == "deno"
            assert MALLOC_ENV.items() <= deno.environ().items()
            assert arenas(deno.pid) == []
    finally:
        stop_kernel(km, kc)


def test_the_sandbox_writes_no_code_cache_into_its_scratch_folder():
    """Deno wrote V8's code cache (3.7 MB) into the sandbox's DENO_DIR, a tmpfs of its own that no later start reads:
    memory of the machine's that no PSS shows. Transpiled host code and Deno's small SQLite caches remain."""
    km, kc = start_kernel()
    try:
        assert value(execute(kc, "1+1")) == "2"
        deno = deno_of(km)
        scratch = Path(f"/proc/{deno.pid}/root") / deno.environ()["DENO_DIR"].lstrip("/")  # as the sandbox sees it
        found = (Path(top, name) for top, _, names in os.walk(scratch) for name in names)
        files = [p for p in found if not p.is_symlink()]  # the links to the npm cache and to Deno itself are not its
        assert files, "the scratch folder holds Deno's own caches"
        assert not [p for p in files if p.name.startswith("v8_code_cache")]
        assert sum(p.stat().st_size for p in files) < 1 << 20
    finally:
        stop_kernel(km, kc)
