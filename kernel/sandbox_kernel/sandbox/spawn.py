"""Spawning one sandbox process, with no event loop needed: the first stage of a sandbox's start.

`spawn()` makes the private folder and the launch plan, binds the private socket, starts the launcher (which
becomes Deno) and hands it its init message; Deno then boots, loads Pyodide and connects on its own. The kernel
process can therefore spawn its first sandbox before it has imported ipykernel (jupyter/early_start.py), and
attach to it later from its event loop (`SandboxProcess.start(spawned)`), so that the two start side by side.
`Child` is the spawned process seen from an event loop: its end, and its output as streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox_kernel.sandbox import partials, private_folders, provision, startup
from sandbox_kernel.sandbox.launch_plan import LaunchPlan
from sandbox_kernel.sandbox.startup import SandboxOptions


@dataclass
class Spawned:
    """A sandbox process that was started and not yet attached to: what attaching needs, and its clean-up."""

    options: SandboxOptions
    plan: LaunchPlan
    snapshot: Path | None  # the memory snapshot offered to it, if any
    token: str  # what it must say first on the socket
    process: subprocess.Popen[bytes]
    listener: socket.socket  # the private socket, bound and listening (0600), for its one connection
    report_read: int  # the launcher's report of the OS layers (a pipe)
    partial_tag: str = "0"  # in the names of the files it writes aside (partials.py removes those left)

    @property
    def private(self) -> Path:
        return self.plan.private

    def discard(self) -> None:
        """Kill it and remove what it left (never attached: nothing else owns it)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self.listener.close()
        try:
            os.close(self.report_read)
        except OSError:
            pass
        shutil.rmtree(self.private, ignore_errors=True)


def spawn(options: SandboxOptions) -> Spawned:
    """Start a sandbox process: the launcher applies the OS layers and becomes Deno, which reads its init message
    (written here from a thread: the lock file in it can exceed a pipe's buffer) and connects to the socket."""
    snapshot_file = provision.snapshot_path()
    with contextlib.suppress(OSError):  # made for the launch plan to read; a read-only cache may lack it
        snapshot_file.parent.mkdir(parents=True, exist_ok=True)
    snapshot = snapshot_file if options.use_snapshot and snapshot_file.is_file() else None
    private = private_folders.make()
    listener: socket.socket | None = None
    report_read = -1
    try:
        plan = startup.launch_plan(options, private, snapshot)
        plan.prepare_scratch()
        token = secrets.token_hex(16)
        listener = listening_socket(plan.socket)
        spec = plan.launch_spec()
        report_read, spec.report_fd = os.pipe()
        try:
            process = subprocess.Popen(
                plan.launcher_argv(spec),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=spec.env,
                cwd=private,
                start_new_session=True,  # keep the kernel's SIGINT (process group) away from Deno
                pass_fds=(spec.report_fd,),
            )
        finally:
            os.close(spec.report_fd)
    except BaseException:
        if listener is not None:
            listener.close()
        if report_read >= 0:
            os.close(report_read)
        shutil.rmtree(private, ignore_errors=True)
        raise
    partial_tag = partials.new_tag()
    init = json.dumps(plan.init_message(token, partial_tag)).encode()
    threading.Thread(target=_send_init, args=(process, init), name="sandbox-init", daemon=True).start()
    return Spawned(options, plan, snapshot, token, process, listener, report_read, partial_tag)


def listening_socket(path: Path) -> socket.socket:
    """The private socket (0600), bound and listening for one connection."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(1)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


def _send_init(process: subprocess.Popen[bytes], init: bytes) -> None:
    """The supervisor's init message on its stdin, then EOF (it may have died at once: its start says why)."""
    assert process.stdin is not None
    try:
        process.stdin.write(init)
        process.stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        pass


class Child:
    """A spawned process seen from the event loop: its pid, its end (a thread waits for it, as asyncio's own child
    watcher does), and its stdout and stderr as streams."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self.pid = process.pid
        loop = asyncio.get_running_loop()
        self._ended: asyncio.Future[int] = loop.create_future()

        def wait() -> None:
            code = process.wait()
            try:
                loop.call_soon_threadsafe(self._end, code)
            except RuntimeError:  # the loop is closed (the kernel is exiting)
                pass

        threading.Thread(target=wait, name=f"sandbox-{self.pid}", daemon=True).start()

    def _end(self, code: int) -> None:
        if not self._ended.done():
            self._ended.set_result(code)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def wait_now(self, timeout: float) -> int | None:
        """Wait, from any thread, at most `timeout` s for the process to end: its exit code, or None."""
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    async def streams(self) -> list[asyncio.StreamReader]:
        """Its stdout and stderr, for draining (never read as protocol)."""
        loop = asyncio.get_running_loop()
        readers = []
        for pipe in (self._process.stdout, self._process.stderr):
            reader = asyncio.StreamReader(loop=loop)
            if pipe is not None:
                await loop.connect_read_pipe(functools.partial(asyncio.StreamReaderProtocol, reader), pipe)
            else:
                reader.feed_eof()
            readers.append(reader)
        return readers
