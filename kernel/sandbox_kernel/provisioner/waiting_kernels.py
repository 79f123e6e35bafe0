"""The kernel processes that the pooled provisioner starts ahead of need, in the program that starts kernels.

One pool per process (a Jupyter server, nbclient, an agent). Each waiting kernel was started with one launch's
command, environment and Popen options (its `LaunchKey`), and is handed only to a launch with the same key. The
pool follows the latest launch: it refills to `size` kernels of that launch's key, `refill_delay` seconds after a
launch (the kernel just started gets its first seconds alone), and kernels of other keys make room for them. No
launch for `idle_timeout` seconds, and every waiting kernel is stopped. Timers run on threads of their own, so the
pool serves every event loop of the process (nbclient runs each notebook on a loop of its own).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandbox_kernel.provisioner.handover import PER_LAUNCH_ENV, READY, WAITING, Handover

log = logging.getLogger(__name__)
EMPTY = "no kernel was waiting (the pool fills after a launch)"  # why a launch started cold, the usual case
# Starts one waiting kernel of the latest launch's key, its stdin the given end of a socket pair.
Start = Callable[[int], "subprocess.Popen[bytes]"]


@dataclass(frozen=True)
class LaunchKey:
    """What a waiting kernel was started with and a launch must match: all but what the handover gives."""

    cmd: tuple[str, ...]  # the kernel's command line, its connection file as WAITING
    env: tuple[tuple[str, str], ...]  # its environment without PER_LAUNCH_ENV, sorted
    options: tuple[tuple[str, str], ...]  # the other Popen keywords (not cwd), as repr

    @classmethod
    def of(cls, cmd: list[str], env: dict[str, str], options: dict[str, object], connection_file: str) -> LaunchKey:
        return cls(
            tuple(WAITING if word == connection_file else word for word in cmd),
            tuple(sorted((k, v) for k, v in env.items() if k not in PER_LAUNCH_ENV)),
            tuple(sorted((k, repr(v)) for k, v in options.items() if k not in ("cwd", "env"))),
        )

    def differences(self, other: LaunchKey) -> str:
        """In words, how `other` (a waiting kernel's) differs from this launch."""
        said = []
        if self.cmd != other.cmd:
            said.append(f"command line {list(self.cmd)} (waiting: {list(other.cmd)})")
        ours, theirs = dict(self.env), dict(other.env)
        names = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        if names:
            said.append("environment variables " + ", ".join(names))
        if self.options != other.options:
            said.append(f"launch options {dict(self.options)} (waiting: {dict(other.options)})")
        return "; ".join(said)


class WaitingKernel:
    """A kernel process started ahead of need, waiting on its stdin (a socket: it says READY there) for a handover."""

    def __init__(self, key: LaunchKey, process: subprocess.Popen[bytes], channel: socket.socket) -> None:
        self.key = key
        self.process = process
        self.started = time.monotonic()
        self._channel = channel  # the pool's end of the kernel's stdin
        self._ready = False

    @classmethod
    def start(cls, key: LaunchKey, start: Start) -> WaitingKernel:
        ours, theirs = socket.socketpair()
        try:
            process = start(theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(key, process, ours)

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether it has spawned its sandbox and imported the kernel (waiting up to `timeout` s to hear it)."""
        try:
            if not self._ready and self._channel.fileno() >= 0 and select.select([self._channel], [], [], timeout)[0]:
                self._ready = self._channel.recv(len(READY)) == READY
        except OSError:  # it died, or its stdin was closed: never ready
            pass
        return self._ready

    def waited(self) -> float:
        """Seconds since it was started."""
        return time.monotonic() - self.started

    def alive(self) -> bool:
        return self.process.poll() is None

    def hand_over(self, handover: Handover) -> None:
        """Make it the launch's kernel: it reads this line and goes on as a kernel started with it. OSError: it is
        gone (the channel is closed then; stop() reaps it)."""
        try:
            self._channel.sendall(handover.line())
        finally:
            self._close()  # it reads one line; the end of its stdin is all it sees after

    def stop(self) -> None:
        """Let it exit (end of file on its stdin: its sandbox ran nothing and goes with it) and reap it."""
        self._close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _close(self) -> None:
        """Close the pool's end, having read what the kernel said (a socket closed with unread bytes is reset, and
        the kernel's read would fail rather than end)."""
        with contextlib.suppress(OSError):
            self._channel.setblocking(False)
            while self._channel.recv(64):
                pass
        self._channel.close()


class KernelPool:
    """The process's pool of waiting kernels (use `POOL`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when a kernel is added, or stopped ones reaped
        self._stopping = 0  # kernels being stopped by stop_all, not yet reaped
        self._waiting: list[WaitingKernel] = []  # oldest first
        self._key: LaunchKey | None = None  # the latest launch's: what refills make
        self._start: Start | None = None
        self._size = 0
        self._refill: threading.Timer | None = None
        self._idle: threading.Timer | None = None
        self._filling = threading.Lock()  # held by the one refill that runs (a timer that fired can't be cancelled)

    def pids(self) -> list[int]:
        """The process ids of the waiting kernels, oldest first."""
        with self._lock:
            return [k.process.pid for k in self._waiting]

    def wait_for_count(self, count: int, timeout: float, ready: bool = False, key: LaunchKey | None = None) -> bool:
        """Block until exactly `count` kernels wait (of `key`, if given; with `ready`, having said so), those stopped
        reaped; False at timeout. For tests and benchmarks, never on an event loop."""
        deadline = time.monotonic() + timeout

        def counted() -> list[WaitingKernel]:
            return [k for k in self._waiting if key is None or k.key == key]

        with self._changed:
            if not self._changed.wait_for(lambda: len(counted()) == count and not self._stopping, timeout):
                return False
            waiting = counted()
        return not ready or all(k.ready(max(deadline - time.monotonic(), 0.0)) for k in waiting)

    def take(self, key: LaunchKey) -> tuple[WaitingKernel | None, str]:
        """The oldest living kernel waiting for `key`, or None and why not (in words for the log)."""
        with self._lock:
            dead = [k for k in self._waiting if not k.alive()]
            self._waiting = [k for k in self._waiting if k not in dead]
            for kernel in self._waiting:
                if kernel.key == key:
                    self._waiting.remove(kernel)
                    break
            else:
                kernel = None
            others = [k.key for k in self._waiting if k.key != key]
        for gone in dead:
            gone.stop()
        if kernel is not None:
            return kernel, ""
        if others:
            return None, f"its launch differs from the waiting kernels' ({key.differences(others[0])})"
        return None, EMPTY

    def launched(self, key: LaunchKey, start: Start, size: int, refill_delay: float, idle_timeout: float) -> None:
        """A kernel was launched with `key`: refill for that key after `refill_delay`, and stop all at idle."""
        with self._lock:
            self._key, self._start, self._size = key, start, size
            self._cancel_timers()
            self._refill = _timer(refill_delay, self._fill)
            self._idle = _timer(idle_timeout, self.stop_all) if idle_timeout > 0 else None

    def _cancel_timers(self) -> None:
        """(Under the lock.) A timer that has fired already runs on: _fill and stop_all allow for that."""
        for timer in (self._refill, self._idle):
            if timer is not None:
                timer.cancel()
        self._refill = self._idle = None

    def _fill(self) -> None:
        if not self._filling.acquire(blocking=False):
            return  # another refill runs: it reads the latest key and size at every step
        try:
            self._fill_up()
        finally:
            self._filling.release()

    def _fill_up(self) -> None:
        while True:
            with self._lock:
                key, start = self._key, self._start
                if key is None or start is None:
                    return
                ours = sum(k.key == key for k in self._waiting)
                if ours >= self._size:
                    return
                # Kernels of other launches make room (the oldest first): the pool holds at most `size`.
                spare = len(self._waiting) + 1 - self._size
                evicted = [k for k in self._waiting if k.key != key][: max(spare, 0)]
                self._waiting = [k for k in self._waiting if k not in evicted]
            for kernel in evicted:
                kernel.stop()
            try:
                kernel = WaitingKernel.start(key, start)
            except Exception:  # the next launch starts cold, and says what is wrong in its own words
                log.exception("starting a waiting kernel failed")
                return
            with self._lock:
                if self._key != key:  # a launch with another key came meanwhile: this one is not wanted
                    unwanted: WaitingKernel | None = kernel
                else:
                    self._waiting.append(kernel)
                    self._changed.notify_all()
                    unwanted = None
            if unwanted is not None:
                unwanted.stop()

    def stop_all(self) -> None:
        """Stop every waiting kernel (at idle and at exit); a refill under way stops too, until the next launch."""
        with self._lock:
            self._key = self._start = None
            waiting, self._waiting = self._waiting, []
            self._stopping += len(waiting)
            self._cancel_timers()
        try:
            for kernel in waiting:
                kernel.stop()
        finally:
            with self._lock:
                self._stopping -= len(waiting)
                self._changed.notify_all()


def _timer(delay: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(max(delay, 0.0), action)
    timer.daemon = True
    timer.start()
    return timer


POOL = KernelPool()
atexit.register(POOL.stop_all)
