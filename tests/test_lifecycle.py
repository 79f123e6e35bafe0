"""Streaming, interrupts, timeouts, crashes, stdin and process hygiene, on a real kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from conftest import START_TIMEOUT, execute, once_running, sandbox_pids, start_kernel, stop_kernel, value
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    """Wait until none of `pids` runs (a zombie counts as gone); those still running after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def wait_reaped(pids: list[int], timeout: float = 10) -> list[int]:
    """Wait until the kernel has reaped each of `pids` (no /proc entry, not even a zombie); those left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)
    return [p for p in pids if Path(f"/proc/{p}").exists()]


# ---- streaming -------------------------------------------------------------------------


def test_stdout_streams_while_the_cell_runs(kc):
    code = "import time\nfor i in range(4):\n    print(i, time.time(), flush=True)\n    time.sleep(0.4)"
    run = execute(kc, code)
    assert run.content["status"] == "ok"
    chunks = [m for m in run.outputs if m["msg_type"] == "stream"]
    lines = [line for m in chunks for line in m["content"]["text"].splitlines()]
    assert [line.split()[0] for line in lines] == ["0", "1", "2", "3"]
    assert len(chunks) >= 4, "each line should arrive in its own message while the cell sleeps"
    for msg in chunks:
        printed_at = float(msg["content"]["text"].split()[1])
        # The guest's wall clock and ours are the same machine's clock.
        lag = msg["received_wall"] - printed_at
        assert lag < 0.5, f"a line arrived {lag:.3f}s after it was printed"


def test_stdout_and_stderr_stay_apart_each_in_its_order(kc):
    """Each stream whole and in its order; a quick cell's stdout comes first, as ipykernel sends it (test_execute.py
    holds that order to ipykernel's)."""
    run = execute(kc, "import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')\nprint('no newline', end='')")
    names = [(m["content"]["name"], m["content"]["text"]) for m in run.outputs if m["msg_type"] == "stream"]
    assert names == [("stdout", "a\nc\nno newline"), ("stderr", "b\n")]


def test_two_hundred_thousand_lines(kc):
    run = execute(kc, "for i in range(200_000):\n    print(i)", timeout=180)
    assert run.content["status"] == "ok"
    lines = run.stream().splitlines()
    assert len(lines) == 200_000
    assert lines[0] == "0" and lines[-1] == "199999"
    assert execute(kc, "1+1").of_type("execute_result")[0]["data"]["text/plain"] == "2"


def test_partial_line_does_not_leak_into_next_cell(kc):
    first = execute(kc, "print('tail-without-newline', end='')")
    second = execute(kc, "print('next')")
    assert first.stream() == "tail-without-newline"
    assert second.stream() == "next\n"


# ---- interrupt ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "print('running', flush=True)\nwhile True: pass",
        "import time\nprint('running', flush=True)\ntime.sleep(100)",
        "import asyncio\nprint('running', flush=True)\nawait asyncio.sleep(100)",
        # The KeyboardInterrupt lands in an event-loop callback, outside the cell's own task (as a
        # re-sent interrupt does when the cell is already ending): it must not crash the sandbox.
        "import asyncio\nasync def spin():\n    print('spinning', flush=True)\n    while True: pass\n"
        "asyncio.ensure_future(spin())\nawait asyncio.sleep(100)",
    ],
    ids=["busy-loop", "sleep", "await", "spinning-task"],
)
def test_interrupt_keeps_state(kernel, code):
    km, kc = kernel
    execute(kc, "kept = 'still here'")
    interrupt = once_running(km.interrupt_kernel)  # once the cell says it runs (or spins)
    run = execute(kc, code, timeout=30, on_output=interrupt)
    assert interrupt.at, "the cell never said it was running"
    took = time.monotonic() - interrupt.at[0]
    assert run.content["status"] == "error"
    assert run.content["ename"] == "KeyboardInterrupt"
    assert [error["ename"] for error in run.of_type("error")] == ["KeyboardInterrupt"]  # shown once
    assert "sandbox_guest" not in "".join(run.content["traceback"]), run.content["traceback"]  # no glue frames
    assert took < 1.5, f"the interrupt took {took:.2f}s to land"
    assert execute(kc, "kept").of_type("execute_result")[0]["data"]["text/plain"] == "'still here'"


# A traceback display slower than the kernel's re-send of an interrupt (1 s), as a first traceback under load is.
SLOW_INTERRUPT_DISPLAY = """
import time
_formatter = get_ipython().InteractiveTB
_plain = _formatter.structured_traceback
def _slow(*args, **kwargs):
    end = time.monotonic() + 1.8
    while time.monotonic() < end:
        pass
    print('shown in full', flush=True)
    return _plain(*args, **kwargs)
_formatter.structured_traceback = _slow
"""


def test_an_interrupt_is_not_sent_again_while_its_traceback_is_shown(kernel):
    """The guest says when the cell got its KeyboardInterrupt; a re-send would land in the display (IPython then
    shows a bare KeyboardInterrupt line instead, or the grace runs out and the sandbox is restarted)."""
    km, kc = kernel
    execute(kc, "kept = 'still here'\n" + SLOW_INTERRUPT_DISPLAY)
    try:
        interrupt = once_running(km.interrupt_kernel)
        run = execute(kc, "print('running', flush=True)\nwhile True: pass", timeout=30, on_output=interrupt)
    finally:
        execute(kc, "del _formatter.structured_traceback")
    assert run.content["ename"] == "KeyboardInterrupt", run.content
    assert run.stream() == "running\nshown in full\n"
    assert [error["ename"] for error in run.of_type("error")] == ["KeyboardInterrupt"]
    assert execute(kc, "kept").of_type("execute_result")[0]["data"]["text/plain"] == "'still here'"


def test_sigint_to_process_group_does_not_kill_the_sandbox(kernel):
    km, kc = kernel
    execute(kc, "survivor = 42")
    os.killpg(km.provisioner.process.pid, signal.SIGINT)  # as jupyter_client's signal mode does
    # The kernel handles the signal in its event loop, in no set order with a request that arrives at the
    # same time: a cell sent at once could start first and take the interrupt as its own. A kernel_info
    # round trip (its handler awaits, so the loop runs the signal's callback first) makes sure the kernel
    # has handled the signal, while no cell ran. A sandbox the signal would end has it pending by now, and
    # gets it, at the latest, when the next cell resumes it: that cell would then fail or lose `survivor`.
    kc.kernel_info(reply=True, timeout=60)
    assert execute(kc, "survivor").of_type("execute_result")[0]["data"]["text/plain"] == "42"


# ---- stdin -------------------------------------------------------------------------------


def test_input_round_trip(kc):
    msg_id = kc.execute("name = input('Who? ')\nprint('hello', name)", allow_stdin=True)
    request = kc.get_stdin_msg(timeout=30)
    assert request["msg_type"] == "input_request"
    assert request["content"]["prompt"] == "Who? "
    assert request["content"]["password"] is False
    kc.input("Ada")
    reply = kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "ok"
    assert execute(kc, "name").of_type("execute_result")[0]["data"]["text/plain"] == "'Ada'"


def test_getpass_is_a_password_request(kc):
    kc.execute("import getpass\nsecret = getpass.getpass('Key: ')", allow_stdin=True)
    request = kc.get_stdin_msg(timeout=30)
    assert request["content"] == {"prompt": "Key: ", "password": True}
    kc.input("s3cret")
    assert kc.get_shell_msg(timeout=30)["content"]["status"] == "ok"
    assert execute(kc, "len(secret)").of_type("execute_result")[0]["data"]["text/plain"] == "6"


def test_input_without_stdin_is_a_clear_error(kc):
    run = execute(kc, "input('x? ')", allow_stdin=False)
    assert run.content["ename"] == "StdinNotImplementedError"
    assert "does not support input" in run.content["evalue"]


def test_interrupt_while_waiting_for_input(kernel):
    km, kc = kernel
    msg_id = kc.execute("answer = input('never answered: ')", allow_stdin=True)
    assert kc.get_stdin_msg(timeout=30)["msg_type"] == "input_request"
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:  # e.g. wait_for_ready's extra kernel_info replies
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # As a frontend does, wait for idle before the next cell: ipykernel aborts requests that reach it before its
    # stop-on-error window closes, which is posted after the reply (seen under load: the next cell "aborted").
    while not (
        (msg := kc.get_iopub_msg(timeout=30))["parent_header"].get("msg_id") == msg_id
        and msg["msg_type"] == "status"
        and msg["content"]["execution_state"] == "idle"
    ):
        pass
    assert execute(kc, "1+2").of_type("execute_result")[0]["data"]["text/plain"] == "3"


# ---- timeout, crash, restart ---------------------------------------------------------------


@pytest.fixture(scope="module")
def timed_kernel():
    km, kc = start_kernel(
        [
            "--SandboxKernel.cell_timeout=2",
            "--SandboxKernel.interrupt_grace=1.5",
            '--SandboxKernel.skills=["TimeSkill"]',
        ]
    )
    yield km, kc
    stop_kernel(km, kc)


def test_timeout_interrupts_and_keeps_state(timed_kernel):
    _, kc = timed_kernel
    execute(kc, "before = 1")
    run = execute(kc, "while True: pass", timeout=30)
    assert run.content["status"] == "error"
    assert run.content["ename"] == "SandboxTimeout"
    assert "cell_timeout=2" in run.content["evalue"] and "kept" in run.content["evalue"]
    assert execute(kc, "before").of_type("execute_result")[0]["data"]["text/plain"] == "1"


def test_timeout_restarts_a_guest_that_will_not_stop(timed_kernel):
    _, kc = timed_kernel
    execute(kc, "lost = 1")
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
    run = execute(kc, stubborn, timeout=60)
    assert run.content["ename"] == "SandboxTimeout"
    assert "restarted" in run.content["evalue"] and "lost" in run.content["evalue"]
    errors = run.of_type("error")
    assert errors and errors[-1]["ename"] == "SandboxTimeout"
    after = execute(kc, "1+1", timeout=120)
    assert after.of_type("execute_result")[0]["data"]["text/plain"] == "2"
    assert execute(kc, "lost").content["ename"] == "NameError"


def test_crash_is_reported_and_the_kernel_recovers(fresh_kernel):
    km, kc = fresh_kernel
    execute(kc, "gone = 1")
    folders = {os.readlink(f"/proc/{pid}/cwd") for pid in sandbox_pids(km.provisioner.process.pid)}
    assert folders and all(os.path.isdir(f) for f in folders)
    run = execute(kc, "import js; js.Deno.exit(0)", timeout=60)
    assert run.content["status"] == "error"
    assert run.content["ename"] == "SandboxRestarted"
    assert "worker exited" in run.content["evalue"]
    assert "restarted" in run.content["evalue"] and "variables were lost" in run.content["evalue"]
    assert execute(kc, "1+1", timeout=120).of_type("execute_result")[0]["data"]["text/plain"] == "2"
    assert execute(kc, "gone").content["ename"] == "NameError"
    crashed = folders - {os.readlink(f"/proc/{pid}/cwd") for pid in sandbox_pids(km.provisioner.process.pid)}
    assert crashed and not any(os.path.exists(f) for f in crashed), "the crashed sandbox's private folder is left"


def test_death_between_cells_is_told_on_the_next_cell(fresh_kernel):
    """The sandbox dies while no cell runs: the next cell says so on stderr, then runs in a fresh sandbox.

    Guest code cannot end the sandbox between cells (the sandbox is paused then, SIGSTOP); something on the
    host can, as the OOM killer does: here the test kills it, and waits until the kernel has reaped it.
    """
    km, kc = fresh_kernel
    assert value(execute(kc, "gone = 1\n'set'")) == "'set'"
    denos = sandbox_pids(km.provisioner.process.pid)  # the current sandbox and, maybe, a pre-warmed spare
    assert denos
    for pid in denos:
        os.kill(pid, signal.SIGKILL)
    assert wait_reaped(denos) == []
    run = execute(kc, "1+1", timeout=120)
    assert value(run) == "2"
    assert run.stream("stderr") == (
        "SandboxRestarted: the sandbox process was killed by SIGKILL (likely out of memory); "
        "the sandbox was restarted and all variables were lost.\n"
    )
    assert execute(kc, "gone").content["ename"] == "NameError"


def test_killed_sandbox_is_reported_with_the_signal(fresh_kernel):
    km, kc = fresh_kernel

    def kill_sandboxes() -> None:  # the current sandbox and, maybe, a pre-warmed spare
        for pid in sandbox_pids(km.provisioner.process.pid):
            os.kill(pid, signal.SIGKILL)

    killer = once_running(kill_sandboxes)  # killed while the cell sleeps
    run = execute(kc, "import time\nprint('running', flush=True)\ntime.sleep(30)", timeout=60, on_output=killer)
    assert killer.at, "the cell never said it was running"
    assert run.content["ename"] == "SandboxRestarted"
    assert "killed by SIGKILL" in run.content["evalue"]
    assert execute(kc, "'ok'", timeout=120).of_type("execute_result")[0]["data"]["text/plain"] == "'ok'"


def test_restart_gives_a_fresh_sandbox_and_no_orphans(fresh_kernel):
    km, kc = fresh_kernel
    execute(kc, "old = 1")
    before = sandbox_pids(km.provisioner.process.pid)
    assert 1 <= len(before) <= 2  # the current sandbox and a pre-warmed spare
    km.restart_kernel(now=False)
    kc.wait_for_ready(timeout=180)
    assert execute(kc, "old", timeout=120).content["ename"] == "NameError"
    assert wait_gone(before) == []


def test_no_deno_left_after_shutdown():
    km, kc = start_kernel()
    pids = sandbox_pids(km.provisioner.process.pid)
    assert 1 <= len(pids) <= 2
    stop_kernel(km, kc)
    assert wait_gone(pids) == []


def test_no_deno_left_after_the_kernel_is_killed():
    km, kc = start_kernel()
    kernel_pid = km.provisioner.process.pid
    pids = sandbox_pids(kernel_pid)
    assert 1 <= len(pids) <= 2
    os.kill(kernel_pid, signal.SIGKILL)
    try:
        assert wait_gone(pids) == []
    finally:
        kc.stop_channels()
        km.cleanup_resources()


SLOW_SHUTDOWN_RACES = """
import asyncio
import time

import ipykernel.kernelbase as kernelbase

from sandbox_kernel.jupyter.kernel import SandboxKernel
from sandbox_kernel.sandbox.process import SandboxProcess

publish = kernelbase.Kernel._publish_status_and_flush
first = SandboxProcess._first
shutdown = SandboxKernel.do_shutdown


def slow_last_idle(self, status, channel, parent=None):
    # widens the window in which exit used to close IOPub under the control thread's last "idle"
    if channel == "control" and status == "idle" and self._shutdown_message is not None:
        time.sleep(0.5)
    return publish(self, status, channel, parent)


async def later(fut):
    value = await fut
    await asyncio.sleep(2)
    return value


async def slow_python(self, fut, what):
    # the shutdown_request arrives while the first sandbox's Python still starts (to the kernel)
    if what == "start Python":
        fut = asyncio.ensure_future(later(fut))
    return await first(self, fut, what)


async def slow_shutdown(self, restart):
    # the main loop notices the killed sandbox before it is told to stop
    reply = await shutdown(self, restart)
    time.sleep(0.5)
    return reply


kernelbase.Kernel._publish_status_and_flush = slow_last_idle
SandboxProcess._first = slow_python
SandboxKernel.do_shutdown = slow_shutdown
"""


def test_a_shutdown_during_the_start_sends_its_last_idle_and_exits_quietly(tmp_path):
    """After a shutdown_request the control thread still publishes "idle"; exit used to close IOPub under it
    (ENOTSOCK on the kernel's stderr, or libzmq's abort). And a shutdown while the first sandbox still starts left
    kernel_info's wait for it unretrieved ("Task exception was never retrieved ... SandboxDied"). A kernel whose last
    idle is slow, shut down during its sandbox's start, must still send that idle and exit cleanly and quietly."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_SHUTDOWN_RACES)
    stderr = (tmp_path / "stderr.txt").open("w")
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(env={**os.environ, "PYTHONPATH": str(tmp_path)}, stderr=stderr)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
        shutdown = kc.shutdown()
        states = []
        while "idle" not in states:
            msg = kc.get_iopub_msg(timeout=30)
            if msg["parent_header"].get("msg_id") == shutdown and msg["msg_type"] == "status":
                states.append(msg["content"]["execution_state"])
        assert km.provisioner is not None and km.provisioner.process is not None
        assert km.provisioner.process.wait(timeout=60) == 0
    finally:
        kc.stop_channels()
        km.cleanup_resources()
        stderr.close()
    written = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in written and "Assertion failed" not in written, written


# ---- configuration -----------------------------------------------------------------------


def test_config_file_in_a_jupyter_config_dir(tmp_path, monkeypatch):
    (tmp_path / "sandbox_kernel_config.json").write_text(json.dumps({"SandboxKernel": {"cell_timeout": 1.5}}))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    km, kc = start_kernel()
    try:
        run = execute(kc, "while True: pass", timeout=60)
        assert run.content["ename"] == "SandboxTimeout"
        assert "cell_timeout=1.5" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("--SandboxKernel.cell_timout=1", "SandboxKernel.cell_timout is not a setting of this kernel: did you mean "),
        ("--SandboxKernel.cell_timeout=-1", "cell_timeout must be a positive number of seconds, got -1.0"),
        ("--SandboxKernel.cell_timeout=soon", "expected a float, not the str 'soon'"),
        ("--SandboxKernel.os_sandbox=maybe", "expected any of ['auto', 'required', 'off'], not the str 'maybe'"),
        (
            "--SandboxKernel.mounts=['/no/such/folder:/data']",
            "SandboxKernel.mounts: mount '/no/such/folder:/data': host folder '/no/such/folder' does not exist or is "
            "not a folder (set in the kernel's command line: its kernelspec's argv or --SandboxKernel options)",
        ),
        ("--SandboxKernel.allow_net=['http://x']", "SandboxKernel.allow_net: "),
    ],
)
def test_a_bad_setting_is_the_answer_of_every_cell(argument, message):
    """The kernel starts (JupyterLab shows nothing from a kernel that exits) and each cell says what is wrong."""
    km, kc = start_kernel([argument])
    try:
        for _ in range(2):
            run = execute(kc, "1+1", timeout=30)
            assert run.content["status"] == "error" and run.content["ename"] == "SandboxSettingsError", run.content
            shown = run.of_type("error")[0]["evalue"]
            assert message in shown and "kernel's command line" in shown and "restarted" in shown, shown
        info = kc.kernel_info(reply=True, timeout=30)["content"]["sandbox_kernel"]
        assert message in info["settings_error"]
        assert not sandbox_pids(km.provisioner.process.pid), "no sandbox may start with bad settings"
    finally:
        stop_kernel(km, kc)


def test_a_bad_setting_in_a_config_file_names_the_file(tmp_path, monkeypatch):
    config = tmp_path / "sandbox_kernel_config.json"
    config.write_text(json.dumps({"SandboxKernel": {"memory_limit_mb": "lots"}}))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    km, kc = start_kernel()
    try:
        shown = execute(kc, "1+1", timeout=30).content["evalue"]
        assert "SandboxKernel.memory_limit_mb: The 'memory_limit_mb' trait" in shown and f"(set in {config})" in shown
    finally:
        stop_kernel(km, kc)


def test_interrupt_request_message_on_control_channel(kernel):
    _, kc = kernel
    execute(kc, "via_message = 'kept'")
    send = once_running(lambda: kc.control_channel.send(kc.session.msg("interrupt_request", {})))
    run = execute(kc, "print('running', flush=True)\nwhile True: pass", timeout=30, on_output=send)
    assert send.at, "the cell never said it was running"
    assert kc.get_control_msg(timeout=30)["content"]["status"] == "ok"
    assert run.content["ename"] == "KeyboardInterrupt"
    assert execute(kc, "via_message").of_type("execute_result")[0]["data"]["text/plain"] == "'kept'"


CLIENT = """
import sys, time
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="pyodide-sandbox")
km.start_kernel()
kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=180)
print(km.provisioner.process.pid, flush=True)
time.sleep(600)  # the client stays until the test kills it
"""


def test_no_deno_left_when_the_client_dies():
    client = subprocess.Popen([sys.executable, "-c", CLIENT], stdout=subprocess.PIPE, text=True)
    try:
        kernel_pid = int(client.stdout.readline())
        pids = sandbox_pids(kernel_pid)
        assert 1 <= len(pids) <= 2
        client.kill()  # the client vanishes without shutting its kernel down
        assert wait_gone([kernel_pid, *pids], timeout=30) == []
    finally:
        client.kill()
        client.wait()


def test_a_spare_sandbox_makes_restarts_instant(timed_kernel):
    km, kc = timed_kernel
    assert sandbox_count_reaches(km, 2), "with cell_timeout, a pre-warmed spare runs beside the sandbox"
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
    assert execute(kc, stubborn, timeout=60).content["ename"] == "SandboxTimeout"
    started = time.monotonic()
    assert execute(kc, "'fresh'").of_type("execute_result")[0]["data"]["text/plain"] == "'fresh'"
    assert time.monotonic() - started < 5  # generous here; bench/run.py measures it
    assert execute(kc, "device.TimeSkill.add_days('2024-01-01')").content["status"] == "ok"


def test_the_first_cell_after_a_restart_is_as_quick_as_later_ones():
    """A fresh sandbox runs its traceback machinery while it starts: its first NameError never eats a tight
    cell_timeout (before, a restarted sandbox's first traceback took 0.4-1.6 s; later ones take 0.05 s)."""
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=1", "--SandboxKernel.interrupt_grace=1"])
    try:
        for _ in range(3):
            assert execute(kc, "import js\njs.eval('while (true) {}')", timeout=60).content["ename"] == "SandboxTimeout"
            first = execute(kc, "marker", timeout=60)
            assert first.content["ename"] == "NameError", first.content
            assert not [m for m in first.of_type("error") if m["ename"] == "SandboxTimeout"]
    finally:
        stop_kernel(km, kc)


def sandbox_count_reaches(km, count: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(sandbox_pids(km.provisioner.process.pid)) == count:
            return True
        time.sleep(0.2)
    return False


def test_no_spare_when_switched_off():
    km, kc = start_kernel(["--SandboxKernel.spare_sandbox=False"])
    try:
        execute(kc, "1+1")
        assert execute(kc, "import os\nos._exit(1)", timeout=60).content["ename"] == "SandboxRestarted"
        execute(kc, "1+1")
        # The absence of a spare can only be seen over time: when one is kept, its process is there within
        # milliseconds of the sandbox becoming current, so 3 s without one shows that none is started.
        time.sleep(3)
        assert len(sandbox_pids(km.provisioner.process.pid)) == 1
    finally:
        stop_kernel(km, kc)


def test_by_default_a_spare_is_kept_from_the_first_restart_on():
    km, kc = start_kernel()  # spare_sandbox='auto', no cell_timeout
    try:
        execute(kc, "1+1")
        time.sleep(3)  # the time a spare would take to appear (it must not, yet)
        assert len(sandbox_pids(km.provisioner.process.pid)) == 1
        assert execute(kc, "import os\nos._exit(1)", timeout=60).content["ename"] == "SandboxRestarted"
        assert sandbox_count_reaches(km, 2), "after a restart, a pre-warmed spare runs beside the sandbox"
    finally:
        stop_kernel(km, kc)


def test_with_spare_sandbox_true_the_spare_is_there_from_the_start():
    km, kc = start_kernel(["--SandboxKernel.spare_sandbox=True"])
    try:
        execute(kc, "1+1")
        assert sandbox_count_reaches(km, 2)
    finally:
        stop_kernel(km, kc)


def test_by_default_a_checkpoint_brings_a_spare_and_a_restore_the_next_one():
    km, kc = start_kernel()  # spare_sandbox='auto', no cell_timeout: no spare until a restart or checkpoint
    try:
        execute(kc, "kept = 'yes'")
        assert execute(kc, "%checkpoint here").content["status"] == "ok"
        assert sandbox_count_reaches(km, 2), "after a checkpoint, a spare is ready for its restore"
        assert execute(kc, "%restore here").content["status"] == "ok"  # the spare becomes current
        assert execute(kc, "kept").of_type("execute_result")[0]["data"]["text/plain"] == "'yes'"
        assert sandbox_count_reaches(km, 2), "after a restore, the next spare runs beside the sandbox"
    finally:
        stop_kernel(km, kc)


def test_a_killed_kernels_private_folders_are_removed_by_the_next_kernel():
    """Its sandboxes' folders, and its checkpoint folder once Jupyter removed its connection file."""
    import tempfile

    km, kc = start_kernel()
    execute(kc, "x = 1")
    assert execute(kc, "%checkpoint one").content["status"] == "ok"
    checkpoints = Path(kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["checkpoint_folder"])
    pid = km.provisioner.process.pid
    kc.stop_channels()
    km.shutdown_kernel(now=True)  # SIGKILL: the kernel cannot remove its sandboxes' folders itself
    left = list(Path(tempfile.gettempdir()).glob(f"sbk-{pid}-*"))
    assert left, "a kernel killed outright leaves its sandbox's private folder"
    assert (checkpoints / "one.sbkcp").is_file() and not Path(km.connection_file).exists()
    left.append(checkpoints)
    km, kc = start_kernel()
    try:
        execute(kc, "1+1")
        deadline = time.monotonic() + 30
        while any(p.exists() for p in left) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(p.exists() for p in left)
    finally:
        stop_kernel(km, kc)


def test_interrupts_racing_the_start_of_cells_never_break_the_protocol():
    """An interrupt 2-12 ms after an execute request interrupts a cell or nothing; it never breaks the glue into
    a protocol error or an internal SandboxError. (As with ipykernel, a SIGINT that the kernel handles only once
    the next cell has begun interrupts that one. Rarely, ~1 in 300 here, the interrupt lands in asyncio's own
    machinery and the cell cannot finish: it is restarted after interrupt_grace, and says so.)

    The cells are sent with stop_on_error=False: after an error reply ipykernel 7 aborts execute requests until a
    message posted by its shell-channel thread arrives, and a request sent the moment the reply is read can, under
    load, overtake that message and come back "aborted" (ipykernel's behaviour, seen once in CI). That is not the
    glue under test, and with it off, any "aborted" reply fails this test."""
    import random

    km, kc = start_kernel(["--SandboxKernel.interrupt_grace=3"])
    try:
        unexpected = []
        for _ in range(100):
            first = kc.execute("survivor = 1\nsurvivor", stop_on_error=False)
            time.sleep(random.uniform(0.002, 0.012))  # the race under test: an interrupt at a random moment
            km.interrupt_kernel()
            for reply in (reply_to(kc, first), reply_to(kc, kc.execute("1+1", stop_on_error=False))):
                if outcome(reply) not in {"ok", "KeyboardInterrupt", "SandboxRestarted"}:
                    unexpected.append(reply)
            after = reply_to(kc, kc.execute("2+2", stop_on_error=False))
            assert after["status"] == "ok", after
        assert not unexpected, [(r["ename"], r.get("evalue")) for r in unexpected]
    finally:
        stop_kernel(km, kc)


def outcome(reply: dict) -> str:
    """An execute reply's exception name, or its status when it has none ("ok", "aborted")."""
    return reply.get("ename", reply["status"])


def reply_to(kc, msg_id: str) -> dict:
    while True:
        msg = kc.get_shell_msg(timeout=60)
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg["content"]
