"""Benchmarks of sandbox-kernel side by side with ipykernel's python3 kernel, in one run.

Usage: python bench/run.py [--trials N] [--calls N] [--lines N] [--scale N ...]
    [--only start|checkpoint|files|firsts|memory|packages|shell] [--output bench/RESULTS.md]
Prints a markdown table (medians and p90s, memory as PSS, ratio to ipykernel) and writes it to RESULTS.md.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager
from traitlets.config import Config

from sandbox_kernel.provisioner.pooled import POOL_SIZE_VARIABLE
from sandbox_kernel.provisioner.waiting_kernels import POOL

OURS = "pyodide-sandbox"
REFERENCE = "python3"
# Every row starts its kernels cold unless it names the kernelspec's pool (those rows turn it on for their kernels).
os.environ[POOL_SIZE_VARIABLE] = "0"
POOL_ON = Config({"PooledKernelProvisioner": {"pool_size": 1, "refill_delay": 0.0}})


@dataclass
class Row:
    name: str
    unit: str
    ours: float
    reference: float | None
    note: str = ""
    ours_p90: float | None = None
    reference_p90: float | None = None
    peer: float | None = None  # pysandbox-wasi's figure, where the start section measured one

    def ratio(self) -> str:
        if not self.reference:
            return "n/a"
        return f"{self.ours / self.reference:.2f}x"


def start(
    kernel: str, arguments: list[str] | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[KernelManager, BlockingKernelClient]:
    km = KernelManager(kernel_name=kernel)
    where = {"cwd": str(cwd)} if cwd else {}
    km.start_kernel(extra_arguments=arguments or [], **where, **({"env": {**os.environ, **env}} if env else {}))
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
WITH_SPARE = "--SandboxKernel.spare_sandbox=True"  # the default, 'auto', keeps one only once a restart happened
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


def warm_round_trips(kc: BlockingKernelClient, code: str, samples: int, warm_up: int = 5) -> list[float]:
    """Seconds from execute_request to idle, `samples` times after `warm_up` unmeasured runs."""
    for _ in range(warm_up):
        run(kc, code)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        run(kc, code)
        times.append(time.perf_counter() - t0)
    return times


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def first_completion(kernel: str, trials: int, arguments: list[str] | None = None) -> tuple[float, float]:
    """The first Tab in a new kernel (`import o`), once it answers kernel_info (JupyterLab drops replies over 1 s),
    and the same Tab right after it: medians, seconds."""

    def tab(kc: BlockingKernelClient) -> float:
        t0 = time.perf_counter()
        reply = reply_to(kc, kc.complete("import o", 8), timeout=60)
        took = time.perf_counter() - t0
        assert "operator" in reply["matches"], reply
        return took

    def once() -> tuple[float, float]:
        km, kc = start(kernel, arguments)
        try:
            return tab(kc), tab(kc)
        finally:
            stop(km, kc)

    both = [once() for _ in range(trials)]
    return statistics.median(b[0] for b in both), statistics.median(b[1] for b in both)


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


STATE_50MB = (
    "import os\nblob = os.urandom(44_000_000)\n"
    "rows = [{'id': i, 'name': f'row {i}', 'score': i / 7} for i in range(60_000)]\n"
    "os.makedirs('/home/pyodide/out', exist_ok=True)\nopen('/home/pyodide/out/data.bin', 'wb').write(os.urandom(2_000_000))"
)


def timed(kc: BlockingKernelClient, code: str) -> float:
    t0 = time.perf_counter()
    reply = run(kc, code)
    assert reply["status"] == "ok", reply
    return time.perf_counter() - t0


def checkpoint_and_restore(trials: int, arguments: list[str], processes: int) -> tuple[float, float, int]:
    """Seconds for %checkpoint and %restore of ~50 MB of guest state (medians), and the file's size; `processes`:
    the kernel's with its sandboxes once settled."""
    km, kc = start(OURS, arguments)
    try:
        run(kc, STATE_50MB)
        saves = [timed(kc, "%checkpoint state") for _ in range(trials)]
        restores = []
        for _ in range(trials):
            value(kc, "len(blob)")  # a spare starts after a checkpoint or restore: let it come up, as between cells
            settled_pss(kernel_pid(km), processes)
            restores.append(timed(kc, "%restore state"))
        assert value(kc, "len(blob), len(rows)") == "(44000000, 60000)"
        folder = kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["checkpoint_folder"]
        size = (Path(folder) / "state.sbkcp").stat().st_size
        return statistics.median(saves), statistics.median(restores), size
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


def kernelspec_pool(trials: int) -> tuple[list[float], list[float], list[float], list[float], float]:
    """The kernelspec's pooled provisioner, each launch taking a kernel that waited (and said it was ready): launch
    to first `1+1` of a new kernel manager (a new notebook) and the CPU-bound loop as its next cell; Kernel > Restart
    to first `1+1`; ipykernel's restart timed the same way; the PSS of one waiting kernel (its process and its
    sandbox's)."""

    def answered(kc: BlockingKernelClient, t0: float) -> float:
        """Seconds from `t0` to kc's kernel answering kernel_info, then `1+1`."""
        kc.wait_for_ready(timeout=300)
        value(kc, "1+1")
        return time.perf_counter() - t0

    starts, cpu, restarts, reference = [], [], [], []
    km = KernelManager(kernel_name=OURS, config=POOL_ON)
    km.start_kernel()  # the first launch starts cold and fills the pool
    kc = km.client()
    kc.start_channels()
    ref_km, ref = start(REFERENCE)
    try:
        answered(kc, time.perf_counter())
        for _ in range(trials):
            assert POOL.wait_for_count(1, 300, ready=True), "no kernel waiting in the pool"
            t0 = time.perf_counter()
            new = KernelManager(kernel_name=OURS, config=POOL_ON)
            new.start_kernel()
            client = new.client()
            client.start_channels()
            starts.append(answered(client, t0))
            cpu.append(cpu_bound(client))
            stop(new, client)
            assert POOL.wait_for_count(1, 300, ready=True), "no kernel waiting in the pool"
            t0 = time.perf_counter()
            km.restart_kernel()
            restarts.append(answered(kc, t0))
            t0 = time.perf_counter()
            ref_km.restart_kernel()
            reference.append(answered(ref, t0))
        assert POOL.wait_for_count(1, 300, ready=True), "no kernel waiting in the pool"
        time.sleep(2)  # the waiting kernel's start settles (its imports' garbage, its sandbox's snapshot pages)
        memory = tree_pss_mb(POOL.pids()[0])
    finally:
        stop(km, kc)
        stop(ref_km, ref)
        POOL.stop_all()
    return starts, cpu, restarts, reference, memory


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    found = [pid]
    try:
        tasks = list((Path("/proc") / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += process_tree(int(child))
    return found


def pss_mb(pid: int) -> float:
    """Proportional set size of one process in MiB (shared pages split among the processes that map them)."""
    try:
        text = (Path("/proc") / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return 0.0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:")) / 1024


def tree_pss_mb(pid: int) -> float:
    return sum(pss_mb(p) for p in process_tree(pid))


def settled_pss(pid: int, processes: int, timeout: float = 120) -> tuple[float, list[float]]:
    """Total and per-process PSS of `pid`'s tree once it has `processes` processes and two samples agree."""
    deadline = time.monotonic() + timeout
    last = -1.0
    while time.monotonic() < deadline:
        tree = process_tree(pid)
        each = [pss_mb(p) for p in tree]
        total = sum(each)
        if len(tree) >= processes and abs(total - last) < 1.0:
            return total, each
        last = total if len(tree) >= processes else -1.0
        time.sleep(0.5)  # sampling interval, not synchronisation: the loop waits for the condition
    raise TimeoutError(f"process {pid} did not settle at {processes} processes within {timeout:.0f} s")


def kernel_pid(km: KernelManager) -> int:
    return km.provisioner.process.pid  # type: ignore[union-attr]


def scale(kernel: str, count: int, processes: int, arguments: list[str] | None = None) -> tuple[float, float]:
    """Start `count` kernels at once: (median seconds from launch to the first `1+1` result, total PSS in MiB)."""
    times, total = scale_each(kernel, count, processes, arguments)
    return statistics.median(times), total


def scale_each(
    kernel: str, count: int, processes: int, arguments: list[str] | None = None
) -> tuple[list[float], float]:
    """Start `count` kernels at once: (each one's seconds from launch to its first `1+1` result, total PSS in MiB)."""
    from concurrent.futures import ThreadPoolExecutor

    def launch(_: int) -> tuple[float, KernelManager, BlockingKernelClient]:
        t0 = time.perf_counter()
        km, kc = start(kernel, arguments)
        value(kc, "1+1")
        return time.perf_counter() - t0, km, kc

    with ThreadPoolExecutor(count) as pool:
        started = list(pool.map(launch, range(count)))
    try:
        total = sum(settled_pss(kernel_pid(km), processes)[0] for _, km, _ in started)
        return [t for t, _, _ in started], total
    finally:
        for _, km, kc in started:
            stop(km, kc)


START_HEADING = "## Start, the first cell and round trips"
NO_EARLY_START = "--SandboxKernel.early_start=False"
PEER = "pysandbox-wasi==1.6.4"  # a peer wasm sandbox from PyPI (CPython on Wasmtime); needs Python >= 3.12
PEER_VENV = Path(tempfile.gettempdir()) / "sandbox-kernel-bench" / PEER.replace("==", "-")


def first_result(kernel: str, arguments: list[str]) -> float:
    """Seconds from the launch of a kernel to its first `1+1` result."""
    t0 = time.perf_counter()
    km, kc = start(kernel, arguments)
    try:
        value(kc, "1+1")
        return time.perf_counter() - t0
    finally:
        stop(km, kc)


def interleaved_starts(trials: int) -> dict[str, list[float]]:
    """Launch to first result of each variant, one after another in every round (the machine's load is shared)."""
    variants = {"early": (OURS, []), "late": (OURS, [NO_EARLY_START]), "ipykernel": (REFERENCE, [])}
    found: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(trials):
        for name, (kernel, arguments) in variants.items():
            found[name].append(first_result(kernel, arguments))
    return found


def first_and_warm_cpu(kernel: str, pause: float = 0.0) -> tuple[float, float]:
    """The CPU-bound loop's seconds in a new kernel's first cell (sent `pause` s after the kernel answers, as a person
    would take to type it), and the median of three after five runs."""
    km, kc = start(kernel)
    try:
        time.sleep(pause)  # the think time being measured, not a synchronisation
        first = cpu_bound(kc)
        runs = [cpu_bound(kc) for _ in range(8)]
        return first, statistics.median(runs[5:])
    finally:
        stop(km, kc)


def children_pss_mb() -> float:
    """PSS of every process this one started (the kernels of a pool), in MiB."""
    return tree_pss_mb(os.getpid()) - pss_mb(os.getpid())


def pooled(trials: int) -> tuple[list[float], list[float], float]:
    """AsyncSandboxPool(size=1): seconds from take() to the first `1+1` result, the CPU loop in that sandbox's first
    cell, and the PSS of one waiting sandbox (kernel process and Deno)."""
    import asyncio

    from sandbox_kernel import AsyncSandboxPool

    async def ready(pool: AsyncSandboxPool) -> None:
        deadline = time.monotonic() + 300
        while pool.ready < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("the pool did not fill in 300 s")
            await asyncio.sleep(0.05)

    async def measure() -> tuple[list[float], list[float], float]:
        takes, cpu = [], []
        async with AsyncSandboxPool(size=1) as pool:
            for _ in range(trials):
                await ready(pool)
                t0 = time.perf_counter()
                sandbox = await pool.take()
                result = await sandbox.run("1+1")
                takes.append(time.perf_counter() - t0)
                assert result.text == "2", result.to_llm()
                cpu.append(float((await sandbox.run(CPU_LOOP)).text or "nan"))
                await sandbox.close()
            await ready(pool)
            await asyncio.sleep(2)  # the replacement's spare work (a drained queue, its log) settles
            memory = children_pss_mb()
        return takes, cpu, memory

    return asyncio.run(measure())


def warm_pass_and_skills(samples: int, calls: int) -> list[Row]:
    """Warm `pass` (median and p90 of `samples`) and skill calls per method kind, beside ipykernel."""
    ours_km, ours = start(OURS, [WITH_TIME_SKILL])
    ref_km, ref = start(REFERENCE)
    try:
        trips = ([1000 * t for t in warm_round_trips(ours, "pass", samples)],
                 [1000 * t for t in warm_round_trips(ref, "pass", samples)])  # fmt: skip
        run(ref, "from sandbox_kernel.skills.time_skill import TimeSkill; _skill = TimeSkill()")
        sync = (1000 * skill_call(ours, "device.TimeSkill.get_current_time", calls),
                1000 * skill_call(ref, "_skill.get_current_time", calls))  # fmt: skip
        async_call = 1000 * skill_call(ours, "lambda: device.TimeSkill.wait_then_time(0)", calls)
    finally:
        stop(ours_km, ours)
        stop(ref_km, ref)
    return [
        Row("warm round trip `pass`", "ms", statistics.median(trips[0]), statistics.median(trips[1]),
            f"{samples} samples after 5 warm-up cells", p90(trips[0]), p90(trips[1])),
        Row(f"skill call ({calls:,} x `TimeSkill.get_current_time()`)", "ms/call", *sync,
            "sync method: on the kernel's skill threads; ipykernel: called in-process"),
        Row(f"skill call ({calls:,} x `TimeSkill.wait_then_time(0)`)", "ms/call", async_call, None,
            "async method: served on the kernel's event loop"),
    ]  # fmt: skip


def peer_venv_python() -> tuple[Path | None, str]:
    """The Python of a venv holding pysandbox-wasi (made once, from PyPI), or None and why not."""
    python = PEER_VENV / "bin" / "python"
    if python.exists():
        return python, ""
    found = next((c for c in python_candidates() if runs_python_312(c)), None)
    if found is None:
        return None, "no Python 3.12 or later was found here (pysandbox-wasi needs one)"
    made = subprocess.run([found, "-m", "venv", str(PEER_VENV)], capture_output=True, text=True)
    if made.returncode == 0:
        made = subprocess.run([str(python), "-m", "pip", "install", "-q", PEER], capture_output=True, text=True)
    if made.returncode != 0:
        shutil.rmtree(PEER_VENV, ignore_errors=True)
        return None, f"`pip install {PEER}` failed: {(made.stderr or made.stdout).strip()[-300:]}"
    return python, ""


def python_candidates() -> list[str]:
    """This Python, python3.12 and later on PATH, then pyenv's installed versions (its shims run only the selected
    one)."""
    named = [path for path in (shutil.which(f"python3.{minor}") for minor in (14, 13, 12)) if path]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = sorted(pyenv.glob("3.1[2-9]*/bin/python3"), reverse=True)
    return [sys.executable, *named, *(str(path) for path in installed)]


def runs_python_312(python: str) -> bool:
    """Whether `python` runs and is 3.12 or later (a pyenv shim may name a version that is not selected)."""
    check = [python, "-c", "import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)"]
    try:
        return subprocess.run(check, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def peer_figures(trials: int, calls: int) -> tuple[dict[str, float], str]:
    """pysandbox-wasi's figures (bench/peer_wasi.py in its venv), or {} and why they are left out."""
    python, why = peer_venv_python()
    if python is None:
        return {}, why
    script = [str(python), str(Path(__file__).with_name("peer_wasi.py")), "--calls", str(calls)]
    # A first, untimed run compiles its wasm into Wasmtime's cache (as our snapshot is built once).
    for extra in (["--trials", "1"], ["--trials", str(trials)]):
        done = subprocess.run([*script, *extra], capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            return {}, f"pysandbox-wasi failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def start_rows(trials: int, calls: int = 10_000, samples: int = 200, at_once: int = 8) -> list[Row]:
    """Issue 28: launch to first result (with and without the early start), a pre-started pool, the first cell's
    CPU-bound speed, warm round trips with their tail, skill calls, kernels started at once, and a peer wasm
    sandbox (pysandbox-wasi) where it installs."""
    starts = interleaved_starts(trials)
    ipykernel = statistics.median(starts["ipykernel"])
    spread = {name: f"{min(v):.2f}-{max(v):.2f} s" for name, v in starts.items()}
    takes, pooled_cpu, pool_memory = pooled(trials)
    pool_starts, pool_cpu, pool_restarts, ref_restarts, waiting_memory = kernelspec_pool(trials)
    ours_cpu, ref_cpu = first_and_warm_cpu(OURS), first_and_warm_cpu(REFERENCE)
    typed = first_and_warm_cpu(OURS, pause=2.0)
    peer, peer_missing = peer_figures(trials, calls)
    rows = [
        Row("cold start (launch to first `1+1` reply)", "s", statistics.median(starts["early"]), ipykernel,
            f"interleaved, {trials} rounds; spread ours {spread['early']}, ipykernel {spread['ipykernel']}; "
            "the first sandbox spawned before the kernel imports ipykernel", peer=peer.get("cold_s")),
        Row("cold start, `early_start=False`", "s", statistics.median(starts["late"]), ipykernel,
            f"same rounds; spread {spread['late']}: the sandbox spawned once the kernel is up"),
        Row("start from `AsyncSandboxPool` (take() to first `1+1` result)", "s", statistics.median(takes), ipykernel,
            f"one sandbox kept started and warmed; spread {min(takes):.3f}-{max(takes):.3f} s"),
        Row("memory of one waiting pooled sandbox", "MiB PSS", pool_memory, None,
            "kernel process and its Deno, JIT warmed: the price of each sandbox a pool keeps"),
        Row("start from the kernelspec's pool (new kernel manager to first `1+1`)", "s",
            statistics.median(pool_starts), ipykernel,
            f"a new notebook, nbclient's next notebook: the kernel waited; spread {min(pool_starts):.2f}-"
            f"{max(pool_starts):.2f} s; ipykernel: its cold start (above); both include wait_for_ready's 0.2 s"),
        Row("Kernel > Restart from the kernelspec's pool, to the next `1+1`", "s", statistics.median(pool_restarts),
            statistics.median(ref_restarts), "restart_kernel() (a shutdown request first), both kernels"),
        Row("memory of one kernel waiting in the kernelspec's pool", "MiB PSS", waiting_memory, None,
            "its process and its sandbox's, nothing run: the price of `pool_size` 1"),
        Row("CPU-bound loop (3M iterations), first cell of a new kernel", "s", ours_cpu[0], ref_cpu[0],
            "timed inside the cell", peer=peer.get("first_cpu_s")),
        Row("the same loop once warm (after 5 runs)", "s", ours_cpu[1], ref_cpu[1],
            f"first / warm: ours {ours_cpu[0] / ours_cpu[1]:.2f}x, ipykernel {ref_cpu[0] / ref_cpu[1]:.2f}x",
            peer=peer.get("warm_cpu_s")),
        Row("the same loop, first cell sent 2 s after the kernel answers", "s", typed[0], ref_cpu[0],
            f"as a person types it: V8 has compiled the interpreter loop meanwhile; {typed[0] / typed[1]:.2f}x its warm"),
        Row("the same loop, first cell of a pooled sandbox", "s", statistics.median(pooled_cpu), ref_cpu[0],
            f"AsyncSandboxPool's warm-up cell ran before: {statistics.median(pooled_cpu) / ours_cpu[1]:.2f}x warm"),
        Row("the same loop, second cell of a kernel from the kernelspec's pool", "s", statistics.median(pool_cpu),
            ref_cpu[0], f"after its first `1+1`, nothing run to warm it: {statistics.median(pool_cpu) / ours_cpu[1]:.2f}x"
            " warm"),
        *warm_pass_and_skills(samples, calls),
    ]  # fmt: skip
    rows[-3].peer, rows[-2].peer = peer.get("round_trip_ms"), peer.get("host_call_ms")
    ours_scale = scale_each(OURS, at_once, 2)
    ref_scale = scale_each(REFERENCE, at_once, 1)
    rows.append(Row(f"{at_once} kernels started at once: launch to first result, last", "s", max(ours_scale[0]),
                    max(ref_scale[0]), f"median ours {statistics.median(ours_scale[0]):.2f} s, ipykernel "
                    f"{statistics.median(ref_scale[0]):.2f} s"))  # fmt: skip
    if peer:
        rows.append(Row("memory of one session", "MiB PSS", pool_memory, None,
                        "ours: a waiting pooled sandbox (kernel and Deno); pysandbox-wasi: its sandbox process "
                        "with one worker", peer=peer["memory_mib"]))  # fmt: skip
    else:
        rows[0].note += f"; pysandbox-wasi left out: {peer_missing}"
    return rows


CHECKPOINT_HEADING = "## Checkpoints"
FILES_HEADING = "## Files in a read-write folder"


def checkpoint_rows(trials: int) -> list[Row]:
    save, restore, size = checkpoint_and_restore(trials, [], 3)
    _, cold, _ = checkpoint_and_restore(trials, ["--SandboxKernel.spare_sandbox=False"], 2)
    state = f"~50 MB of guest state (bytes, 60k dicts, a 2 MB file); file {size / 1e6:.0f} MB"
    return [
        Row("`%checkpoint` of ~50 MB of guest state", "s", save, None, f"{state}; ipykernel has none"),
        Row(
            "`%restore` of it",
            "s",
            restore,
            None,
            "default settings: a spare sandbox is kept from the first checkpoint on",
        ),
        Row("`%restore` of it, no spare sandbox", "s", cold, None, "`spare_sandbox=False`: a fresh sandbox is started"),
    ]


FILE_WORK = {
    "write 64 MiB in 8 KiB writes": (
        "import time\nt = time.perf_counter()\nwith open('big.bin', 'wb', buffering=0) as f:\n"
        "    for _ in range(8192):\n        f.write(b'x' * 8192)\ntime.perf_counter() - t"
    ),
    "write 64 MiB in one write": (
        "import time\nt = time.perf_counter()\nwith open('big.bin', 'wb') as f:\n    f.write(b'y' * (64 << 20))\n"
        "time.perf_counter() - t"
    ),
    "create, write and close 1,000 small files": (
        "import os, time\nos.makedirs('many', exist_ok=True)\nt = time.perf_counter()\nfor i in range(1000):\n"
        "    with open(f'many/f{i}.txt', 'w') as f:\n        f.write('row\\n' * 10)\ntime.perf_counter() - t"
    ),
    "read 64 MiB back": (
        "import time\nt = time.perf_counter()\nwith open('big.bin', 'rb') as f:\n    f.read()\ntime.perf_counter() - t"
    ),
}


def file_rows(trials: int) -> list[Row]:
    """Files in a read-write folder: every change goes through the supervisor's file service (issue 23)."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as ours_dir, tempfile.TemporaryDirectory() as ref_dir:
        ours_km, ours = start(OURS, ["--SandboxKernel.working_folder=rw"], Path(ours_dir))
        ref_km, ref = start(REFERENCE, [], Path(ref_dir))
        try:
            for name, code in FILE_WORK.items():
                seconds = (
                    median_of(trials, lambda code=code: float(value(ours, code))),
                    median_of(trials, lambda code=code: float(value(ref, code))),
                )
                note = "timed inside the cell; ours: the working folder (`working_folder='rw'`)"
                rows.append(Row(name, "s", *seconds, note))
        finally:
            stop(ours_km, ours)
            stop(ref_km, ref)
    return rows


SHELL_HEADING = "## The shell"
SHELL_WORK = {
    "`!echo hi`": "!echo hi",
    "`!ls \\| wc -l`": "!ls | wc -l",
    "`subprocess.run(['wc', '-l'], input=..., capture_output=True)`": (
        "import subprocess\nsubprocess.run(['wc', '-l'], input=b'a\\nb\\n', capture_output=True).stdout"
    ),
}


def shell_rows(trials: int) -> list[Row]:
    """The sandbox's shell (just-bash, loaded on first use) beside ipykernel's processes (issue 25)."""

    def first(kernel: str) -> tuple[float, float]:
        km, kc = start(kernel)
        try:
            run(kc, "1+1")  # the sandbox is up: what follows is the shell's own cost
            before = tree_pss_mb(kernel_pid(km))
            seconds = timed(kc, "!echo hi")
            return seconds, tree_pss_mb(kernel_pid(km)) - before
        finally:
            stop(km, kc)

    ours_first = [first(OURS) for _ in range(trials)]
    ref_first = [first(REFERENCE) for _ in range(trials)]
    rows = [
        Row("first shell command in a new kernel (`!echo hi`)", "s",
            statistics.median(t for t, _ in ours_first), statistics.median(t for t, _ in ref_first),
            "ours loads just-bash on first use; ipykernel starts a process"),
        Row("memory the first shell command adds", "MiB PSS",
            statistics.median(m for _, m in ours_first), statistics.median(m for _, m in ref_first),
            "kernel and its children, before and after"),
    ]  # fmt: skip
    samples = max(20, trials * 4)
    ours_km, ours = start(OURS)
    ref_km, ref = start(REFERENCE)
    try:
        for name, code in SHELL_WORK.items():
            ms = ([1000 * t for t in warm_round_trips(ours, code, samples)],
                  [1000 * t for t in warm_round_trips(ref, code, samples)])  # fmt: skip
            rows.append(Row(f"warm {name}", "ms", statistics.median(ms[0]), statistics.median(ms[1]),
                            f"{samples} samples after 5 warm-up cells", p90(ms[0]), p90(ms[1])))  # fmt: skip
    finally:
        stop(ours_km, ours)
        stop(ref_km, ref)
    return rows


FIRSTS_HEADING = "## The first requests of a kernel"


def timed_error(kc: BlockingKernelClient, code: str) -> float:
    """Seconds from execute_request to idle of a cell that must raise."""
    t0 = time.perf_counter()
    reply = run(kc, code)
    assert reply["status"] == "error", reply
    return time.perf_counter() - t0


def first_rows(trials: int) -> list[Row]:
    """What a user meets first in a new kernel: Tab on a module a cell imports but has not run, the first
    exception, and (ours) the first cell after a crash restart into the spare (issue 26)."""

    def first(kernel: str) -> tuple[float, float, float]:
        km, kc = start(kernel)
        try:
            run(kc, "pass")  # up: what follows is the request itself
            t0 = time.perf_counter()
            reply = reply_to(kc, kc.complete("import os\nos.pa", 15), timeout=60)
            tab = time.perf_counter() - t0
            assert any(m.endswith("path") for m in reply["matches"]), reply
            error = timed_error(kc, "undefined_name")
            later = timed_error(kc, "undefined_name")
            return tab, error, later
        finally:
            stop(km, kc)

    ours = [first(OURS) for _ in range(trials)]
    ref = [first(REFERENCE) for _ in range(trials)]

    def median(values: list[tuple[float, float, float]], i: int, scale: float = 1000) -> float:
        return scale * statistics.median(v[i] for v in values)

    def after_restart() -> float:
        km, kc = start(OURS, ["--SandboxKernel.cell_timeout=5", "--SandboxKernel.interrupt_grace=1"])
        try:
            run(kc, "pass")
            run(kc, "import js\njs.eval('while (true) {}')")  # timed out: a restart into the warm spare
            time.sleep(3)  # the next spare may start; what is timed is the first cell of the restarted sandbox
            return timed_error(kc, "undefined_name")
        finally:
            stop(km, kc)

    restart = 1000 * median_of(trials, after_restart)
    return [
        Row("Tab on a module the cell imports but has not run (`import os` / `os.pa`)", "ms",
            median(ours, 0), median(ref, 0), "after the first cell; JupyterLab's limit: 1000 ms"),
        Row("first exception in a new kernel (`undefined_name`)", "ms", median(ours, 1), median(ref, 1),
            "execute to idle"),
        Row("the same exception again", "ms", median(ours, 2), median(ref, 2), "compare with the row above"),
        Row("first exception after a restart into the spare", "ms", restart, None,
            "ipykernel has no spare; compare with the rows above"),
    ]  # fmt: skip


PACKAGES_HEADING = "## Preinstalled packages"
# Ten pure-Python packages from PyPI (with their dependencies: tzdata), resolved into a local wheelhouse.
TEN_PACKAGES = [
    "attrs", "six", "python-dateutil", "idna", "packaging", "pyparsing", "toolz", "more-itertools", "tabulate", "pytz",
]  # fmt: skip
TEN_IMPORTS = (
    "import attr, six, dateutil.parser, idna, packaging.version, pyparsing, toolz, more_itertools, tabulate, pytz"
)


def local_wheelhouse(folder: Path) -> Path:
    """TEN_PACKAGES' pure wheels (for the guest's Python 3.14) downloaded once into `folder`: a local index."""
    import subprocess
    import sys

    house = folder / "wheelhouse"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", "3.14",
         "--implementation", "py", "--abi", "none", "--platform", "any", "-d", str(house), *TEN_PACKAGES],
        check=True, timeout=600,
    )  # fmt: skip
    target = folder / "ipykernel-site"  # the same wheels installed for ipykernel's Python, on its PYTHONPATH
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", f"--find-links={house}", "--target",
         str(target), *TEN_PACKAGES],
        check=True, timeout=600,
    )  # fmt: skip
    return house


def restart_to_result(kernel: str, arguments: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds from a cell that ends the sandbox (ours: Deno exits; ipykernel: a kernel restart) to the next result."""
    km, kc = start(kernel, arguments, env=env)
    try:
        value(kc, "1+1")
        t0 = time.perf_counter()
        if kernel == OURS:
            reply = run(kc, "import js; js.Deno.exit(0)")
            assert reply.get("ename") == "SandboxRestarted", reply
        else:
            km.restart_kernel(now=True)
            kc.wait_for_ready(timeout=300)
        value(kc, "1+1")
        return time.perf_counter() - t0
    finally:
        stop(km, kc)


MEMORY_HEADING = "## Memory after the first cell, and N kernels"
SCALE = [1, 8, 16]  # kernels started at once (--scale)


def first_cell_memory(kernel: str) -> tuple[float, list[float]]:
    """A new kernel's PSS (total, per process) once its first cell (`1+1`) has run; default settings."""
    km, kc = start(kernel)
    try:
        value(kc, "1+1")
        return settled_pss(kernel_pid(km), 2 if kernel == OURS else 1)
    finally:
        stop(km, kc)


def first_import(kernel: str, arguments: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds for the first import of the ten packages in a new kernel, timed inside the cell."""
    km, kc = start(kernel, arguments, env=env)
    try:
        value(kc, "1+1")
        return float(value(kc, f"import time\n_t = time.perf_counter()\n{TEN_IMPORTS}\ntime.perf_counter() - _t"))
    finally:
        stop(km, kc)


REIMPORT = """
import importlib, shutil, statistics, sys, time
sources = SOURCES
for name, (folder, copy_of, bytecode) in sources.items():
    if copy_of:  # an in-memory copy (the sandbox's own file system), with or without the bytecode
        shutil.copytree(copy_of, folder, ignore=None if bytecode else shutil.ignore_patterns("__pycache__"))
tops = TOPS
base = [p for p in sys.path if p not in [f for f, _, _ in sources.values()] + [c for _, c, _ in sources.values()]]
times = {name: [] for name in sources}
for _ in range(ROUNDS):
    for name, (folder, copy_of, bytecode) in sources.items():
        for module in [m for m in sys.modules if m.split(".")[0] in tops]:
            del sys.modules[module]
        if copy_of and not bytecode:  # Python kept the bytecode it compiled: start without it again
            shutil.rmtree(folder)
            shutil.copytree(copy_of, folder, ignore=shutil.ignore_patterns("__pycache__"))
        sys.path[:] = [folder, *base]
        importlib.invalidate_caches()
        t = time.perf_counter()
        exec(IMPORTS, {})
        times[name].append(time.perf_counter() - t)
sys.path[:] = base
{name: statistics.median(values) for name, values in times.items()}
"""
TEN_TOPS = ("attr", "attrs", "six", "dateutil", "idna", "packaging", "pyparsing", "toolz", "tlz", "more_itertools",
            "tabulate", "pytz", "tzdata")  # fmt: skip


def reimport(kc: BlockingKernelClient, sources: dict[str, tuple[str, str | None, bool]], rounds: int) -> dict:
    """Median seconds to import the ten packages from each source (folder, the folder it copies or None, with
    bytecode), their modules dropped before each round: the file system's cost alone, sources interleaved."""
    code = (
        REIMPORT.replace("SOURCES", repr(sources)).replace("TOPS", repr(TEN_TOPS))
        .replace("ROUNDS", str(rounds)).replace("IMPORTS", repr(TEN_IMPORTS))
    )  # fmt: skip
    return dict(ast.literal_eval(value(kc, code)))


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} to {max(values):.2f} s"


def packages_rows(trials: int) -> list[Row]:
    """`packages` = ten pure packages from a local wheelhouse against none, A/B interleaved, beside ipykernel with
    the same packages installed (issue 28): the cold start, a sandbox restart, the first import."""
    import tempfile

    from sandbox_kernel.sandbox import provision

    with tempfile.TemporaryDirectory() as folder:
        house = local_wheelhouse(Path(folder))
        ref_env = {"PYTHONPATH": str(Path(folder) / "ipykernel-site")}
        ten = [f"--SandboxKernel.packages={TEN_PACKAGES!r}", f"--SandboxKernel.wheelhouse={house}"]
        km, kc = start(OURS, ten)  # resolved, unpacked and compiled once (a new wheelhouse: a new cache folder)
        value(kc, "1+1")
        deadline = time.monotonic() + 300
        while provision.snapshot_if_ready() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # a poll with a deadline: the start-up snapshot, when this run had to build it
        stop(km, kc)
        no_spare = ["--SandboxKernel.spare_sandbox=False"]
        cold: dict[str, list[float]] = {"none": [], "ten": [], "ref": []}
        again: dict[str, list[float]] = {"none": [], "ten": [], "ref": []}
        for _ in range(trials):  # interleaved: the machine's load changes alike for each
            cold["none"].append(cold_start(OURS, 1))
            cold["ten"].append(cold_start(OURS, 1, ten))
            cold["ref"].append(cold_start(REFERENCE, 1))
            again["none"].append(restart_to_result(OURS, no_spare))
            again["ten"].append(restart_to_result(OURS, [*no_spare, *ten]))
            again["ref"].append(restart_to_result(REFERENCE, [], ref_env))
        imports = (
            [first_import(OURS, ten) for _ in range(trials)],
            [first_import(REFERENCE, [], ref_env) for _ in range(trials)],
        )
        ours_km, ours = start(OURS, ten)
        ref_km, ref = start(REFERENCE, [], env=ref_env)
        try:
            site = "/lib/sandbox-packages"
            sources = {
                "ro": (site, None, True),
                "memory": ("/tmp/bench-copy", site, True),
                "memory, no bytecode": ("/tmp/bench-copy-no-bytecode", site, False),
            }
            again_ours = reimport(ours, sources, max(8, trials))
            again_ref = reimport(ref, {"ro": (ref_env["PYTHONPATH"], None, True)}, max(8, trials))
        finally:
            stop(ours_km, ours)
            stop(ref_km, ref)
    med = {k: statistics.median(v) for k, v in cold.items()}
    med_again = {k: statistics.median(v) for k, v in again.items()}
    tax = 100 * (med["ten"] / med["none"] - 1)
    tax_again = 100 * (med_again["ten"] / med_again["none"] - 1)
    rounds = f"{trials} interleaved rounds"
    return [
        Row("cold start to first `1+1`, no `packages`", "s", med["none"], med["ref"],
            f"{rounds}; ours {spread(cold['none'])}, ipykernel {spread(cold['ref'])}"),
        Row("cold start to first `1+1`, `packages` = 10 pure packages", "s", med["ten"], med["ref"],
            f"{tax:+.1f}% against no `packages` (target: within 10%); ours {spread(cold['ten'])}; ipykernel: "
            "the same start (its packages are installed, nothing to do)"),
        Row("sandbox restart to the next result, no `packages`", "s", med_again["none"], med_again["ref"],
            f"`spare_sandbox=False`: a new sandbox starts; ours {spread(again['none'])}; ipykernel: a kernel restart"),
        Row("sandbox restart to the next result, `packages` = 10 pure packages", "s", med_again["ten"],
            med_again["ref"], f"{tax_again:+.1f}% against no `packages`; ours {spread(again['ten'])}"),
        Row("first import of the 10 packages in a new kernel", "s", statistics.median(imports[0]),
            statistics.median(imports[1]), "timed inside the cell; ours: bytecode compiled once on the host, "
            "read from the read-only folder; ipykernel: `pip install --target` on its PYTHONPATH"),
        Row("import of the 10 packages again in one kernel, modules dropped first", "s", again_ours["ro"],
            again_ref["ro"], f"median of {max(8, trials)} rounds, interleaved with the two rows below: the file "
            "system's share; ours: the read-only folder (NODEFS, each file a host call)"),
        Row("... from an in-memory copy with the bytecode", "s", again_ours["memory"], None,
            "the same files in the sandbox's own file system (MEMFS): compare with the row above for NODEFS's cost"),
        Row("... from an in-memory copy without bytecode", "s", again_ours["memory, no bytecode"], None,
            "as `packages` were before (unpacked into memory at every start, compiled at every import)"),
    ]  # fmt: skip


def memory_rows(trials: int, counts: list[int] | None = None) -> list[Row]:
    """Memory after the first cell (medians of `trials` kernels, one at a time), then `counts` kernels at once,
    with what each kernel past the first adds (issue 28's targets: 150 MiB for one, 120 per extra kernel)."""
    ours = [first_cell_memory(OURS) for _ in range(trials)]
    ref = statistics.median(first_cell_memory(REFERENCE)[0] for _ in range(trials))
    each = ", ".join(f"{statistics.median(o[1][i] for o in ours):.0f}" for i in range(min(len(o[1]) for o in ours)))
    rows = [
        Row("memory after the first cell (`1+1`), default settings", "MiB PSS", statistics.median(o[0] for o in ours),
            ref, f"per process: {each}; median of {trials} kernels"),
    ]  # fmt: skip
    alone: dict[str, float] = {}  # one kernel's memory, for the growth per extra kernel
    for count in sorted(counts or SCALE):
        ours_scale = scale(OURS, count, 2)  # default settings: the kernel and its sandbox (no restart yet)
        ref_scale = scale(REFERENCE, count, 1)
        rows.append(Row(f"{count} kernels started at once: launch to first result, each", "s",
                        ours_scale[0], ref_scale[0], "median of the kernels"))  # fmt: skip
        note = f"after each ran `1+1`; {ours_scale[1] / count:.0f} MiB per kernel, default settings"
        if count == 1:
            alone = {"ours": ours_scale[1], "ref": ref_scale[1]}
        elif alone:
            growth = [
                (total - alone[who]) / (count - 1) for who, total in (("ours", ours_scale[1]), ("ref", ref_scale[1]))
            ]
            note += f"; each kernel past the first: {growth[0]:.0f} MiB (ipykernel {growth[1]:.0f})"
        rows.append(Row(f"{count} kernels started at once: memory, all", "MiB PSS", ours_scale[1], ref_scale[1], note))
    return rows


# ---- report --------------------------------------------------------------------------------

SECTIONS: dict[str, tuple[str, Callable[[int], list[Row]]]] = {
    "start": (START_HEADING, start_rows),
    "checkpoint": (CHECKPOINT_HEADING, checkpoint_rows),
    "files": (FILES_HEADING, file_rows),
    "firsts": (FIRSTS_HEADING, first_rows),
    "packages": (PACKAGES_HEADING, packages_rows),
    "memory": (MEMORY_HEADING, memory_rows),
    "shell": (SHELL_HEADING, shell_rows),
}


def replace_section(report: str, heading: str, section: str) -> str:
    """`report` with the section under `heading` (up to the next '## ') replaced by `section`, or added at its end."""
    before, found, after = report.partition(f"\n{heading}\n")
    rest = after[after.find("\n## ") :] if found and "\n## " in after else ""
    return before.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n" + rest


def kept_sections(report: str) -> str:
    """The sections of `report` a full run does not measure (written by other scripts, e.g. bench/load.py's)."""
    measured = {heading for heading, _ in SECTIONS.values()}
    kept = [
        "## " + part.rstrip("\n") + "\n"
        for part in report.split("\n## ")[1:]
        if "## " + part.split("\n", 1)[0] not in measured
    ]
    return "".join("\n" + section for section in kept)


def table(rows: list[Row]) -> str:
    """A markdown table; with a pysandbox-wasi column when any row has its figure."""
    peers = any(r.peer is not None for r in rows)
    lines = [
        "| measurement | unit | sandbox-kernel | ipykernel | ratio | "
        + ("pysandbox-wasi | " if peers else "")
        + "note |",
        "|---|---|---:|---:|---:|" + ("---:|" if peers else "") + "---|",
    ]
    for r in rows:
        ours = f"{r.ours:.4g}" + (f" (p90 {r.ours_p90:.4g})" if r.ours_p90 is not None else "")
        ref = "n/a" if r.reference is None else f"{r.reference:.4g}"
        ref += f" (p90 {r.reference_p90:.4g})" if r.reference_p90 is not None else ""
        peer = ("n/a" if r.peer is None else f"{r.peer:.4g}") + " | " if peers else ""
        lines.append(f"| {r.name} | {r.unit} | {ours} | {ref} | {r.ratio()} | {peer}{r.note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10_000, help="skill calls timed")
    parser.add_argument("--lines", type=int, default=200_000, help="lines printed in the streaming test")
    parser.add_argument("--scale", type=int, nargs="*", default=SCALE, help="kernels started at once")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "RESULTS.md")
    parser.add_argument(
        "--only",
        choices=sorted(SECTIONS),
        help="measure these rows only; they replace their section of RESULTS.md",
    )
    args = parser.parse_args()
    trials = args.trials

    if args.only:
        heading, measure = SECTIONS[args.only]
        if args.only == "memory":
            measure = functools.partial(memory_rows, counts=args.scale)
        section = (
            f"{heading}\n\nOne run of `python bench/run.py --only {args.only} --trials {trials}` on "
            f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} (the rows of the full "
            f"run's table, measured alone).\n\n{table(measure(trials))}\n"
        )
        print(section)
        args.output.write_text(
            replace_section(args.output.read_text() if args.output.exists() else "", heading, section)
        )
        return
    rows = start_rows(trials, args.calls)  # cold starts, the pool, the first cell, warm `pass`, skill calls
    reference_start, reference_pass = rows[0].reference, next(r for r in rows if r.name.startswith("warm round"))
    rows.append(
        Row(
            "cold start, `os_sandbox='off'`",
            "s",
            cold_start(OURS, trials, [OS_LAYERS_OFF]),
            reference_start,
            "no OS layers: compare with the cold start row for their cost",
        )
    )
    ours_tab, ref_tab = first_completion(OURS, trials), first_completion(REFERENCE, trials)
    rows.append(
        Row("first completion in a new kernel (`import o` + Tab)", "ms", 1000 * ours_tab[0], 1000 * ref_tab[0],
            "sent as the kernel answers kernel_info; JupyterLab's limit: 1000 ms")
    )  # fmt: skip
    rows.append(
        Row("the same completion again", "ms", 1000 * ours_tab[1], 1000 * ref_tab[1], "compare with the row above")
    )
    samples = max(40, trials * 8)
    off_km, off = start(OURS, [OS_LAYERS_OFF, WITH_SPARE])
    settled_pss(kernel_pid(off_km), 3)  # as for the kernel below: the kernel, its sandbox and its spare
    off_pass = [1000 * t for t in warm_round_trips(off, "pass", samples)]
    stop(off_km, off)
    rows.append(
        Row("warm round trip `pass`, `os_sandbox='off'`", "ms", statistics.median(off_pass), reference_pass.reference,
            "no OS layers: compare with the warm `pass` row for their cost", p90(off_pass), reference_pass.reference_p90)
    )  # fmt: skip
    single_km, single = start(OURS, [])
    single_pss, single_each = settled_pss(kernel_pid(single_km), 2)
    stop(single_km, single)
    ours_km, ours = start(OURS, [WITH_SPARE])
    ref_km, ref = start(REFERENCE)
    started, started_each = settled_pss(kernel_pid(ours_km), 3)
    ref_started, _ = settled_pss(kernel_pid(ref_km), 1)
    try:
        ms = ([1000 * t for t in warm_round_trips(ours, "1+1", samples)],
              [1000 * t for t in warm_round_trips(ref, "1+1", samples)])  # fmt: skip
        rows.append(Row("warm round trip `1+1`", "ms", statistics.median(ms[0]), statistics.median(ms[1]),
                        f"{samples} samples after 5 warm-up cells", p90(ms[0]), p90(ms[1])))  # fmt: skip
        seconds = (median_of(3, lambda: streaming(ours, args.lines)), median_of(3, lambda: streaming(ref, args.lines)))
        rows.append(Row(f"streaming ({args.lines:,} printed lines, to idle)", "s", *seconds))
        streamed = (tree_pss_mb(kernel_pid(ours_km)), tree_pss_mb(kernel_pid(ref_km)))
        seconds = (median_of(3, lambda: rich_output(ours, 1000)), median_of(3, lambda: rich_output(ref, 1000)))
        rows.append(Row("rich output (1,000 `display(HTML(...))`)", "s", *seconds))
        seconds = (median_of(3, lambda: cpu_bound(ours)), median_of(3, lambda: cpu_bound(ref)))
        rows.append(Row("CPU-bound pure-Python loop (3M iterations)", "s", *seconds, "CPython on wasm vs native"))
        seconds = (restart_after_timeout(trials), restart_reference(ref_km, ref, trials))
        note = "ipykernel: a kernel restart (it has no cell timeout)"
        rows.append(Row("restart after a timeout, to the next result", "s", *seconds, note))
        each = ", ".join(f"{m:.0f}" for m in started_each)
        rows.append(Row("memory after start (kernel + sandbox + spare)", "MiB PSS", started, ref_started,
                        f"per process: {each}"))  # fmt: skip
        each = ", ".join(f"{m:.0f}" for m in single_each)
        rows.append(Row("memory after start, no spare (`spare_sandbox` False, or 'auto' before a restart)", "MiB PSS",
                        single_pss, ref_started, f"per process: {each}"))  # fmt: skip
        rows.append(Row("memory after the streaming test", "MiB PSS", *streamed))
        rows += checkpoint_rows(trials)
        rows += file_rows(trials)
        rows += shell_rows(trials)
        rows += packages_rows(trials)
    finally:
        stop(ours_km, ours)
        stop(ref_km, ref)
    rows += first_rows(trials)
    rows += memory_rows(trials, args.scale)

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = (
        f"# Benchmark results\n\nOne run of `python bench/run.py --trials {trials}` on {when}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()} (host). "
        "Medians (p90 where given); memory is PSS of the kernel process and all its children; "
        "ratio = sandbox-kernel / ipykernel.\n\n"
        f"{table(rows)}\n"
    )
    print(report)
    previous = args.output.read_text() if args.output.exists() else ""
    args.output.write_text(report + kept_sections(previous))


if __name__ == "__main__":
    main()
