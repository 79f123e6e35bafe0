"""The pooled provisioner's pure parts: the handover line and what a launch must share with a waiting kernel."""

from __future__ import annotations

import io
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from sandbox_kernel.provisioner.handover import WAITING, Handover, HandoverError, is_waiting, receive
from sandbox_kernel.provisioner.waiting_kernels import KernelPool, LaunchKey


def test_a_handover_line_parses_back_to_itself():
    handover = Handover("/run/k.json", "/home/me/project", {"JPY_SESSION_NAME": "a.ipynb"})
    assert Handover.parse(handover.line()) == handover


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"{", "not JSON"),
        (b'["/k.json"]', "must be an object"),
        (b'{"connection_file": "k.json", "cwd": "/", "env": {}}', "absolute paths"),
        (b'{"connection_file": "/k.json", "cwd": "/", "env": {"PATH": "/evil"}}', "may set only"),
        (b'{"connection_file": "/k.json", "cwd": "/", "env": {"KERNEL_ID": 1}}', "names to strings"),
        (b'{"connection_file": "/k.json", "cwd": "/", "env": {}, "more": 1}', "must be an object"),
    ],
)
def test_a_handover_that_is_not_one_is_refused_in_words(line, words):
    with pytest.raises(HandoverError, match=words):
        Handover.parse(line)


def test_receive_puts_the_connection_file_in_place_and_moves_to_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir("/")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    line = Handover("/run/k.json", str(tmp_path), {"JPY_SESSION_NAME": "nb.ipynb"}).line()
    argv = ["-f", WAITING, "--SandboxKernel.x=1"]
    assert is_waiting(argv) and not is_waiting(["-f", "/run/k.json"])
    assert receive(argv, io.BytesIO(line)) == ["-f", "/run/k.json", "--SandboxKernel.x=1"]
    assert os.getcwd() == str(tmp_path) and os.environ["JPY_SESSION_NAME"] == "nb.ipynb"


def test_at_end_of_file_a_waiting_kernel_exits_quietly():
    with pytest.raises(SystemExit) as ended:
        receive(["-f", WAITING], io.BytesIO(b""))
    assert ended.value.code == 0


def test_a_launch_key_leaves_out_what_the_handover_gives():
    one = LaunchKey.of(["k", "-f", "/a.json"], {"A": "1", "JPY_SESSION_NAME": "x"}, {"cwd": "/x"}, "/a.json")
    two = LaunchKey.of(["k", "-f", "/b.json"], {"A": "1", "JPY_SESSION_NAME": "y"}, {"cwd": "/y"}, "/b.json")
    assert one == two and one.cmd == ("k", "-f", WAITING)


def test_how_a_launch_differs_is_said_by_name():
    waiting = LaunchKey.of(["k", "-f", "/a.json"], {"A": "1", "B": "2"}, {}, "/a.json")
    launch = LaunchKey.of(["k", "-f", "/b.json", "--x=1"], {"A": "1", "B": "3", "C": "4"}, {"stderr": -1}, "/b.json")
    said = launch.differences(waiting)
    assert "command line ['k', '-f', '" + WAITING + "', '--x=1']" in said
    assert "environment variables B, C" in said
    assert "launch options {'stderr': '-1'} (waiting: {})" in said


# A stand-in for a waiting kernel: it says READY on its stdin (the pool's socket), then waits there for one line.
STAND_IN = "import os, sys\ntry:\n    os.write(0, b'ready\\n')\nexcept OSError:\n    pass\nsys.stdin.buffer.readline()"


def stand_in(fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", STAND_IN], stdin=fd)


@pytest.fixture
def pool() -> Iterator[KernelPool]:
    made = KernelPool()
    yield made
    made.stop_all()


def key(name: str) -> LaunchKey:
    return LaunchKey.of([name, "-f", "/k.json"], {}, {}, "/k.json")


def test_the_pool_refills_for_the_latest_launch_and_hands_each_kernel_out_once(pool):
    assert pool.take(key("a")) == (None, "no kernel was waiting (the pool fills after a launch)")
    pool.launched(key("a"), stand_in, size=1, refill_delay=0, idle_timeout=0)
    assert pool.wait_for_count(1, 30, ready=True)
    (pid,) = pool.pids()
    kernel, why_not = pool.take(key("a"))
    assert kernel is not None and kernel.process.pid == pid and why_not == ""
    assert pool.pids() == [] and pool.take(key("a"))[0] is None  # once only
    kernel.stop()


def test_a_launch_of_another_key_is_told_how_it_differs_and_takes_the_room(pool):
    pool.launched(key("a"), stand_in, size=1, refill_delay=0, idle_timeout=0)
    assert pool.wait_for_count(1, 30)
    (old,) = pool.pids()
    none, why_not = pool.take(key("b"))
    assert none is None and why_not.startswith("its launch differs from the waiting kernels' (command line ['b'")
    pool.launched(key("b"), stand_in, size=1, refill_delay=0, idle_timeout=0)
    assert pool.wait_for_count(1, 30, key=key("b"))
    assert pool.pids() != [old] and pool.take(key("b"))[0] is not None  # a's kernel made room for b's


def test_the_idle_pool_stops_its_kernels_and_a_refill_under_way_with_them(pool):
    pool.launched(key("a"), stand_in, size=2, refill_delay=0, idle_timeout=0.5)
    assert pool.wait_for_count(2, 30)
    assert pool.wait_for_count(0, 30)  # stopped and reaped half a second after the launch
    pool._fill()  # a refill timer that fired after stop_all: it makes nothing until the next launch
    assert pool.pids() == []


def test_a_waiting_kernel_that_said_ready_exits_cleanly_when_stopped(pool):
    """The kernel's own side (handover.receive): READY said and unread, the pool's end closed, it exits with 0."""
    code = f"from sandbox_kernel.provisioner.handover import receive; receive(['-f', {WAITING!r}])"
    pool.launched(key("a"), lambda fd: subprocess.Popen([sys.executable, "-c", code], stdin=fd, stderr=subprocess.PIPE),
                  size=1, refill_delay=0, idle_timeout=0)  # fmt: skip
    assert pool.wait_for_count(1, 30)
    kernel, _ = pool.take(key("a"))
    assert kernel is not None
    said, _, _ = select.select([kernel._channel], [], [], 30)  # READY is there, and left unread
    assert said
    kernel.stop()
    assert kernel.process.returncode == 0, kernel.process.stderr.read()


def test_a_handover_to_a_kernel_that_died_raises_for_the_launch_to_start_cold(pool):
    pool.launched(key("a"), stand_in, size=1, refill_delay=0, idle_timeout=0)
    assert pool.wait_for_count(1, 30, ready=True)
    kernel, _ = pool.take(key("a"))
    assert kernel is not None
    kernel.process.kill()
    kernel.process.wait()
    with pytest.raises(OSError):
        kernel.hand_over(Handover("/k.json", "/", {}))
    kernel.stop()


def test_a_dead_waiting_kernel_is_never_handed_out(pool):
    pool.launched(key("a"), stand_in, size=1, refill_delay=0, idle_timeout=0)
    assert pool.wait_for_count(1, 30, ready=True)
    (pid,) = pool.pids()
    os.kill(pid, signal.SIGKILL)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped
    assert pool.take(key("a")) == (None, "no kernel was waiting (the pool fills after a launch)")
