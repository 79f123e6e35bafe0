"""The pooled provisioner (the kernelspec's): launches take a kernel started ahead of need, fresh every time."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from traitlets.config import Config

from conftest import START_TIMEOUT, sandbox_pids
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME
from sandbox_kernel.provisioner.waiting_kernels import POOL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
POOL_ON = {"pool_size": 1, "refill_delay": 0.0}


def pooled_manager(**settings: object) -> KernelManager:
    return KernelManager(kernel_name=KERNEL_NAME, config=Config({"PooledKernelProvisioner": {**POOL_ON, **settings}}))


@pytest.fixture
def pool_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The provisioner's lines (it logs through its kernel manager's logger); the pool is empty before and after."""
    POOL.stop_all()
    with caplog.at_level(logging.DEBUG, logger="traitlets"):
        yield caplog
    POOL.stop_all()


def lines(caplog: pytest.LogCaptureFixture, kernel_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"Kernel {kernel_id} ")]


def run(km: KernelManager, code: str) -> tuple[str, dict]:
    """Stdout of `code` in km's kernel, and the reply's content."""
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
        out: list[str] = []
        reply = kc.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", "")))
        return "".join(out), reply["content"]
    finally:
        kc.stop_channels()


def test_a_restart_takes_a_fresh_kernel_from_the_pool(pool_log):
    """Kernel > Restart (and a crash restart: the same call) hands over the waiting kernel: a new process, with
    nothing of the old one's variables, files, randomness or counts, and the log says where it came from."""
    km = pooled_manager()
    km.start_kernel()
    try:
        first_pid = km.provisioner.pid
        assert lines(pool_log, km.kernel_id) == [
            f"Kernel {km.kernel_id} started cold: no kernel was waiting (the pool fills after a launch)."
        ]
        before, _ = run(km, "import random\nx = 1\nopen('/tmp/left.txt', 'w').write('a')\nprint(random.random())")
        assert POOL.wait_for_count(1, START_TIMEOUT)
        waiting_pid = POOL.pids()[0]
        km.restart_kernel()
        assert km.provisioner.pid == waiting_pid != first_pid
        assert any("taken from the pool" in line for line in lines(pool_log, km.kernel_id))
        after, reply = run(
            km, "import os, random\nprint('x' in dir(), os.path.exists('/tmp/left.txt'))\nprint(random.random())"
        )
        assert after.splitlines()[0] == "False False", after
        assert after.splitlines()[1] != before.strip()
        assert reply["execution_count"] == 1
        assert POOL.wait_for_count(1, START_TIMEOUT)  # refilled for the next one
        assert POOL.pids()[0] != waiting_pid
    finally:
        km.shutdown_kernel(now=True)


def test_a_waiting_kernel_that_is_not_needed_leaves_nothing_behind(pool_log):
    """A launch with pool_size 0 starts cold and leaves the waiting kernel be; stopped (at idle, at exit), it exits
    with its sandbox."""
    km = pooled_manager()
    km.start_kernel()
    try:
        assert POOL.wait_for_count(1, START_TIMEOUT, ready=True)
        pid = POOL.pids()[0]
        sandboxes = sandbox_pids(pid)  # its Deno
    finally:
        km.shutdown_kernel(now=True)
    off = pooled_manager(pool_size=0)
    off.start_kernel()
    try:
        assert off.provisioner.pid != pid and POOL.pids() == [pid]
    finally:
        off.shutdown_kernel(now=True)
    POOL.stop_all()
    assert not Path(f"/proc/{pid}").exists()
    assert sandboxes and not [p for p in sandboxes if Path(f"/proc/{p}").exists()], sandboxes


def test_a_launch_with_other_settings_starts_cold_and_says_why(pool_log):
    km = pooled_manager()
    km.start_kernel()
    other = pooled_manager()
    try:
        assert POOL.wait_for_count(1, START_TIMEOUT)
        waiting_pid = POOL.pids()[0]
        other.start_kernel(extra_arguments=["--SandboxKernel.memory_limit_mb=300"])
        assert other.provisioner.pid != waiting_pid
        said = lines(pool_log, other.kernel_id)
        assert len(said) == 1 and "started cold: its launch differs from the waiting kernels' (command line" in said[0]
        assert "--SandboxKernel.memory_limit_mb=300" in said[0]
        out, _ = run(other, "print('started')")
        assert out == "started\n"
    finally:
        other.shutdown_kernel(now=True)
        km.shutdown_kernel(now=True)


def test_nbclient_runs_two_notebooks_back_to_back_each_on_a_fresh_kernel(pool_log, tmp_path):
    """The second notebook's kernel comes from the pool, in the second notebook's folder, and knows nothing of
    the first."""
    token = f"{random.random()}"
    first = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {token!r}\nopen('/tmp/mark', 'w')")])
    second = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import os\nprint('x' in dir(), os.path.exists('/tmp/mark'))")]
    )
    for nb in (first, second):
        nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python 3 (Pyodide sandbox)"}
    config = Config({"PooledKernelProvisioner": POOL_ON})
    NotebookClient(first, resources={"metadata": {"path": str(tmp_path)}}, config=config).execute()
    assert POOL.wait_for_count(1, START_TIMEOUT)
    waiting_pid = POOL.pids()[0]
    client = NotebookClient(second, resources={"metadata": {"path": str(tmp_path)}}, config=config)
    client.execute()
    assert second.cells[0].outputs[0]["text"] == "False False\n"
    taken = [r.getMessage() for r in pool_log.records if "taken from the pool" in r.getMessage()]
    assert len(taken) == 1, taken
    assert waiting_pid not in POOL.pids()


def test_the_idle_pool_stops_its_kernels(pool_log):
    km = pooled_manager(idle_timeout=1.0)
    km.start_kernel()
    try:
        assert POOL.wait_for_count(1, START_TIMEOUT)
        pid = POOL.pids()[0]
        assert POOL.wait_for_count(0, START_TIMEOUT)  # stopped and reaped after a second without a launch
        assert not Path(f"/proc/{pid}").exists()
    finally:
        km.shutdown_kernel(now=True)
