"""Shared fixtures: real kernels started through jupyter_client, real Deno, real Pyodide."""

from __future__ import annotations

import http.server
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME, install
from sandbox_kernel.provisioner.pooled import POOL_SIZE_VARIABLE

# The kernels that the tests start come cold: a kernel left waiting after each launch, most of them with settings
# of their own that no later launch shares, would double the suite's kernel starts. The pool's own tests
# (tests/test_kernel_pool.py) turn it on.
os.environ[POOL_SIZE_VARIABLE] = "0"

# bench/kernel_gateway.py, the Kernel Gateway runner that the tests share with bench/load.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

START_TIMEOUT = 180
FIXTURES_DIR = Path(__file__).parent / "skill_fixtures"  # skills used by the tests


@pytest.fixture(scope="session", autouse=True)
def kernelspec() -> str:
    """The kernelspec, installed into this environment's prefix (as the README does)."""
    return install(prefix=sys.prefix)


@dataclass
class Run:
    """What one execute_request produced."""

    reply: dict[str, Any]
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def content(self) -> dict[str, Any]:
        return self.reply["content"]

    def of_type(self, msg_type: str) -> list[dict[str, Any]]:
        return [m["content"] for m in self.outputs if m["msg_type"] == msg_type]

    def stream(self, name: str = "stdout") -> str:
        return "".join(c["text"] for c in self.of_type("stream") if c["name"] == name)


def value(run: Run) -> str:
    """The text/plain result of a cell that must have succeeded."""
    assert run.content["status"] == "ok", run.content
    return run.of_type("execute_result")[0]["data"]["text/plain"]


def execute(
    kc: BlockingKernelClient,
    code: str,
    timeout: float = 60,
    on_output: Callable[[dict[str, Any]], None] | None = None,
    **kwargs: Any,
) -> Run:
    """Execute `code` and collect its IOPub messages (with arrival times) until idle.

    `on_output(msg)` is called for each output message as it arrives (while the cell still runs).
    """
    msg_id = kc.execute(code, **kwargs)
    outputs: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        msg["received"] = time.monotonic()
        msg["received_wall"] = time.time()
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        if msg["msg_type"] not in ("status", "execute_input"):
            outputs.append(msg)
            if on_output is not None:
                on_output(msg)
    reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
    return Run(reply, outputs)


def once_running(action: Callable[[], object]) -> Callable[[dict[str, Any]], None]:
    """An `on_output` hook that calls `action` once, when the cell's first stdout arrives.

    The cell prints before it does what the test acts on (waits, loops, sleeps): the action then surely
    lands while the cell runs, however long the kernel took to start it. The time of the action is kept in
    the hook's `at` list (time.monotonic()).
    """
    at: list[float] = []

    def hook(msg: dict[str, Any]) -> None:
        if not at and msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            at.append(time.monotonic())
            action()

    hook.at = at  # type: ignore[attr-defined]
    return hook


def serve_http(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """An HTTP server on a free loopback port serving in a daemon thread, and its URL (`http://127.0.0.1:PORT/`);
    `server.shutdown()` stops it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def sandbox_pids(kernel_pid: int) -> list[int]:
    """Deno host processes whose parent is the given kernel process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if ppid == kernel_pid and "main.ts" in cmdline:
            found.append(int(entry.name))
    return found


def start_kernel(
    extra_arguments: list[str] | None = None, env: dict[str, str] | None = None
) -> tuple[KernelManager, BlockingKernelClient]:
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(extra_arguments=extra_arguments or [], **({"env": {**os.environ, **env}} if env else {}))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=START_TIMEOUT)
    return km, kc


def stop_kernel(km: KernelManager, kc: BlockingKernelClient) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=False)


@contextmanager
def ipykernel_control() -> Iterator[BlockingKernelClient]:
    """A client of ipykernel's own kernel (`python3`): the control a test holds the sandbox to."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=START_TIMEOUT)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """One kernel shared by a test module."""
    km, kc = start_kernel()
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture(scope="module")
def kc(kernel: tuple[KernelManager, BlockingKernelClient]) -> BlockingKernelClient:
    return kernel[1]


@pytest.fixture
def fresh_kernel() -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A kernel of its own, for tests that break or restart it."""
    km, kc = start_kernel()
    yield km, kc
    stop_kernel(km, kc)


class Listener:
    """A TCP server on 127.0.0.1 that records every connection (and answers like HTTP)."""

    def __init__(self, host: str = "127.0.0.1", reply: bytes | None = None) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.sock.setblocking(False)  # accept() only after select() said a connection waits
        self.port = self.sock.getsockname()[1]
        self.reply = reply or (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nAccess-Control-Allow-Origin: *\r\nConnection: close\r\n\r\nhello"
        )
        self.hits: list[bytes] = []
        # Held while a connection is taken from the backlog; _serving counts the connections being served.
        # So settle() sees each connection either queued in the backlog or served, never in between.
        self._changed = threading.Condition()
        self._serving = 0
        self._running = True
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _queued(self) -> bool:
        """A connection is established (the handshake is done) and waits in the backlog to be accepted."""
        return bool(select.select([self.sock], [], [], 0)[0])

    def _serve(self) -> None:
        while self._running:
            if not select.select([self.sock], [], [], 0.1)[0]:
                continue
            with self._changed:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    continue
                self._serving += 1
            try:
                with conn:
                    conn.settimeout(1)
                    try:
                        data = conn.recv(4096)
                    except OSError:
                        data = b""
                    self.hits.append(data or b"<connected>")
                    try:
                        conn.sendall(self.reply)
                    except OSError:
                        pass
            finally:
                with self._changed:
                    self._serving -= 1
                    self._changed.notify_all()

    def settle(self, timeout: float = 10) -> list[bytes]:
        """The connections seen so far, once none waits in the backlog and none is being served.

        A connection the guest made during a cell is established before the cell ends (connect() returns
        after the handshake), so it is in the backlog, being served or recorded: no waiting on the clock.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._serving or self._queued():
                left = deadline - time.monotonic()
                assert left > 0, f"the listener on port {self.port} was still busy after {timeout}s"
                self._changed.wait(min(left, 0.05))  # also re-checks the backlog, which notifies nobody
            return list(self.hits)

    def assert_untouched(self) -> None:
        hits = self.settle()
        assert hits == [], f"LEAK: the guest reached the listener on port {self.port}: {hits!r}"

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=2)
        self.sock.close()
