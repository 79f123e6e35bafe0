"""A sandbox runs between requests until the user's code may have run (V8 finishes compiling what the start made hot),
then is stopped between requests as always; on a real Deno sandbox (sandbox/process.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.process import SandboxProcess
from sandbox_kernel.sandbox.startup import SandboxOptions


class Collect:
    def __init__(self) -> None:
        self.text = ""

    def on_stream(self, name: str, text: str) -> None:
        self.text += text

    def on_event(self, payload: bytes) -> None:
        pass

    def on_blob(self, payload: bytes) -> None:
        pass


def state(pid: int) -> str:
    """The process's scheduler state letter (T: stopped)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def wait_for_state(pid: int, wanted: str, timeout: float = 10) -> None:
    """Poll the process's state until it is `wanted` (or `timeout` s have passed)."""
    deadline = time.monotonic() + timeout
    while state(pid) != wanted and time.monotonic() < deadline:
        time.sleep(0.01)


def cpu_seconds(pid: int, thread: str | None = None) -> float:
    """CPU time of the process (or of its thread named `thread`), from the scheduler's count in nanoseconds."""
    tasks = [
        t for t in Path(f"/proc/{pid}/task").iterdir() if thread is None or (t / "comm").read_text().strip() == thread
    ]
    assert tasks, f"no thread {thread!r} in process {pid}"
    return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks) / 1e9


PYODIDE_THREAD = "worker-1"  # Deno's name for the thread of the sandbox's one worker: Python runs there


async def execute(sandbox: SandboxProcess, code: str) -> tuple[dict[str, Any], str]:
    out = Collect()
    payload = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    reply = await asyncio.wait_for(sandbox.request("execute", payload, out), 120)
    return reply, out.text


def test_a_sandbox_is_stopped_between_requests_only_once_the_users_code_may_have_run() -> None:
    async def scenario() -> list[tuple[bool, str]]:
        options = SandboxOptions(paths.pyodide_dir(provision.deno_dir()), await provision.ensure_guest_site(print))
        sandbox = SandboxProcess(options, logging.getLogger("test"), print)
        await sandbox.start()
        try:
            assert sandbox.pid is not None
            seen = [(sandbox._paused, state(sandbox.pid))]
            await asyncio.wait_for(sandbox.request("configure", {}, Collect()), 60)  # the glue only
            seen.append((sandbox._paused, state(sandbox.pid)))
            reply, out = await execute(sandbox, "print('user code')")
            assert reply["status"] == "ok" and out == "user code\n"
            await asyncio.to_thread(wait_for_state, sandbox.pid, "T")  # SIGSTOP was sent: the OS applies it soon
            seen.append((sandbox._paused, state(sandbox.pid)))
            return seen
        finally:
            await sandbox.kill("the test is over")

    before_start, after_configure, after_cell = asyncio.run(scenario())
    # Running (or asleep) while no user code has run; stopped between requests from the first cell on.
    assert not before_start[0] and before_start[1] != "T"
    assert not after_configure[0] and after_configure[1] != "T"
    assert after_cell == (True, "T")


CPU_LOOP = """
import time
def _work(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total
_work(1_000_000)
"""


def test_the_first_cell_finds_pythons_interpreter_loop_compiled_once_the_start_has_settled() -> None:
    """The start makes the interpreter loop hot; left running, the sandbox compiles it with V8's optimising tier
    before the first cell (a wasm function cannot change tiers while it runs: a loop in the first cell would run on
    baseline code). Measured as the worker's CPU time, which the machine's load does not stretch."""

    async def scenario() -> tuple[float, list[float]]:
        options = SandboxOptions(paths.pyodide_dir(provision.deno_dir()), await provision.ensure_guest_site(print))
        sandbox = SandboxProcess(options, logging.getLogger("test"), print)
        await sandbox.start()
        try:
            assert sandbox.pid is not None
            await asyncio.wait_for(sandbox.request("configure", {}, Collect()), 60)
            # Until the sandbox's CPU time stops growing (its compiles done): polled, with a deadline.
            deadline, last = time.monotonic() + 60, -1.0
            while (now := cpu_seconds(sandbox.pid)) - last > 0.01 and time.monotonic() < deadline:
                last = now
                await asyncio.sleep(0.25)
            runs = []
            for _ in range(4):
                before = cpu_seconds(sandbox.pid, PYODIDE_THREAD)
                reply, _ = await execute(sandbox, CPU_LOOP)
                assert reply["status"] == "ok", reply
                runs.append(cpu_seconds(sandbox.pid, PYODIDE_THREAD) - before)
            return runs[0], runs[1:]
        finally:
            await sandbox.kill("the test is over")

    first, warm = asyncio.run(scenario())
    assert first < 1.5 * min(warm), f"the first cell took {first:.3f} s of CPU, warm ones {warm}"
