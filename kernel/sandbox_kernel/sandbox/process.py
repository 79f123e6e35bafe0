"""One Deno + Pyodide sandbox process, seen from the kernel.

The kernel talks to the Deno supervisor over a private unix socket in a 0700
temporary folder; the supervisor proves itself with a token given on its stdin.
Deno's own stdout/stderr are logged, never read as protocol; when the process dies, their last lines
are searched for out-of-memory messages to word the reason (guest code can print those too).
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import concurrent.futures
import itertools
import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from sandbox_kernel.jupyter.output import guest_text
from sandbox_kernel.protocol import frames, names
from sandbox_kernel.protocol import schema as guest_schema
from sandbox_kernel.sandbox import spawn, startup
from sandbox_kernel.sandbox.oslayers.report import read_report
from sandbox_kernel.sandbox.partials import PartialFiles
from sandbox_kernel.sandbox.spawn import Spawned
from sandbox_kernel.sandbox.startup import SandboxOptions, SandboxStartError
from sandbox_kernel.sandbox.supervision import StopCause

MAX_WASM_BYTES = 1 << 32  # wasm32's whole address space: a larger size reported is not believed
EXIT_FRAMES_WAIT = 1.0  # seconds the last frames of an ended process may take to be read
KILL_NOW_WAIT = 5.0  # seconds kill_now waits for a killed process to end and its last frames to be read
# The protocol's names this module reads and sends (host_ts/protocol.json; one it does not declare fails here).
INTERRUPT_OP = names.declared("supervisorOps", "interrupt")
REPLY_OP = names.declared("supervisorOps", "reply")
FATAL = names.declared("hostEvents", "fatal")
STARTED = names.declared("hostEvents", "started")
MEMORY = names.declared("hostEvents", "memory")
PARTIAL = names.declared("hostEvents", "partial")
READY = names.declared("workerEvents", "ready")
# Requests served by the guest's glue alone, with nothing of the user's: until another one is sent, no guest code has
# run in the sandbox, and it is left running between requests (see _pause_if_idle).
GLUE_ONLY_OPS = frozenset(names.declared("guestOps", op) for op in ("configure", "warm"))


class GuestListener(Protocol):
    """Receives what the sandbox sends for one request: stream text and raw (unparsed) guest events."""

    def on_stream(self, name: str, text: str) -> None: ...

    def on_event(self, payload: bytes) -> None: ...

    def on_blob(self, payload: bytes) -> None: ...


class SandboxDied(Exception):
    """The sandbox process ended (or was killed) while a request was pending."""

    def __init__(self, reason: str, cause: StopCause = StopCause.CRASH, started: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cause = cause
        self.started = started  # False: the worker had not begun to serve the request (safe to retry)


@dataclass
class _Pending:
    op: str
    future: asyncio.Future[dict[str, Any]]
    listener: GuestListener
    decoders: dict[int, codecs.IncrementalDecoder]
    started: bool = False  # the worker said it began to serve this request


class SandboxProcess:
    """A running Deno host with Pyodide inside; requests go in, events come out."""

    live: ClassVar[set[SandboxProcess]] = set()  # spawned and not yet dead: what shutdown must kill

    def __init__(
        self,
        options: SandboxOptions,
        log: logging.Logger,
        say: Callable[[str], None],
        on_layers: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.options = options
        self.log = log
        self.say = say
        self.on_layers = on_layers  # told what the launcher applied, as soon as it has (before Python starts)
        self.info: dict[str, Any] = {}
        self.pid: int | None = None
        self.snapshot: Path | None = None  # the snapshot file offered to this sandbox, if any
        self.death_reported = False  # set once a user was told that this sandbox died
        self.pause_when_idle = True  # SIGSTOP between requests: no guest code runs between cells
        self._paused = False
        self._guest_code_may_run = False  # a request that may run the user's code (not GLUE_ONLY_OPS) was sent
        self._proc: spawn.Child | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._tmp: Path | None = None
        self._output_tail: collections.deque[str] = collections.deque(maxlen=20)  # Deno's stdout and stderr
        self._fatal: str | None = None
        self._killed_because: str | None = None
        self._kill_cause = StopCause.CRASH
        self._frames_task: asyncio.Task[None] | None = None
        self._dead: asyncio.Future[str] | None = None
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.os_layers: dict[str, Any] = {}  # what the launcher applied (oslayers.launch)
        self.wasm_bytes = 0  # the size of its wasm memory when the last request ended (it only grows)
        self._partials: PartialFiles | None = None  # its files written aside: removed when it ends
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that watches it (and reads its frames)
        self._loop_thread: int | None = None

    def cpu_seconds(self) -> float | None:
        """CPU time the process has used (user + system, every thread), or None once it is gone."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, TypeError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # ---- lifecycle --------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._dead is not None and not self._dead.done()

    async def start(self, spawned: Spawned | None = None) -> dict[str, Any]:
        """Spawn the process (unless `spawned` was, before the kernel's event loop ran) and wait until Python is
        ready; returns guest facts."""
        if spawned is None:
            spawned = spawn.spawn(self.options)
        self._attach(spawned)
        async with startup.OneConnection(spawned.plan.socket, spawned.listener) as connection:
            await self._apply_layers_report(spawned.report_read)
            reader, self._writer = await self._first(connection.accepted, "connect")
        hello = await self._first(asyncio.ensure_future(frames.read_frame(reader, 4096)), "say hello")
        if hello.kind != frames.HOST_EVENT or hello.json().get("token") != spawned.token:
            await self.kill("it failed the handshake")
            raise SandboxStartError("the sandbox process failed the handshake")
        self._frames_task = asyncio.get_running_loop().create_task(self._read_frames(reader))
        self._tasks.append(self._frames_task)
        assert self._ready is not None  # made by _attach
        self.info = await self._first(self._ready, "start Python")
        self._pause_if_idle()
        return self.info

    def _attach(self, spawned: Spawned) -> None:
        """Watch the spawned process from this event loop: its end, and its output (drained, never parsed)."""
        loop = asyncio.get_running_loop()
        self._loop, self._loop_thread = loop, threading.get_ident()
        self.snapshot = spawned.snapshot
        self._tmp = spawned.private
        self._partials = PartialFiles(spawned.plan.mounts, spawned.partial_tag)
        self.log.info("started sandbox: %s", " ".join(spawned.plan.deno_argv()))
        self._proc = spawn.Child(spawned.process)
        self.pid = self._proc.pid
        SandboxProcess.live.add(self)
        self._dead = loop.create_future()
        self._ready = loop.create_future()
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._tasks.append(loop.create_task(self._watch_exit()))
        self._tasks.append(loop.create_task(self._drain(self._proc)))

    async def _drain(self, child: spawn.Child) -> None:
        streams = await child.streams()
        await asyncio.gather(*(startup.drain_output(stream, self._output_tail, self.log) for stream in streams))

    async def _apply_layers_report(self, report_read: int) -> None:
        """Read what the launcher applied (written before exec, or before a refusal: within milliseconds)."""
        self.os_layers = await asyncio.to_thread(read_report, report_read)
        if self.on_layers is not None:
            self.on_layers(self.os_layers)
        refusal = startup.layers_refusal(self.os_layers, self.options.os_sandbox)
        if refusal is not None:
            await self.kill("os_sandbox could not be met")
            raise refusal

    async def _first(self, fut: asyncio.Future[Any], what: str) -> Any:
        """Await `fut`, failing clearly if the process dies or the start takes too long."""
        assert self._dead is not None
        dead = asyncio.ensure_future(asyncio.shield(self._dead))
        try:
            done, _ = await asyncio.wait(
                {fut, dead}, timeout=self.options.start_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:  # cancelled (e.g. the kernel shuts down while a spare starts): `fut` goes too
            fut.cancel()
            raise
        finally:
            dead.cancel()
        if fut in done:
            return fut.result()
        fut.cancel()
        if self._dead.done():
            detail = "\n".join(self._output_tail)
            raise SandboxStartError(f"the sandbox did not {what}: {self._dead.result()}\n{detail}".rstrip())
        await self.kill(f"it did not {what} in time")
        raise SandboxStartError(
            f"the sandbox did not {what} within {self.options.start_timeout:.0f} s (SandboxKernel.start_timeout)"
        )

    async def kill(self, why: str, cause: StopCause = StopCause.CRASH) -> None:
        """Stop the process for good (SIGKILL); pending requests fail with `why`."""
        if self._killed_because is None:
            self._killed_because, self._kill_cause = why, cause
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        frames_task = self._frames_task
        if frames_task is not None and frames_task is not asyncio.current_task():  # its last partial events
            await asyncio.wait({frames_task}, timeout=EXIT_FRAMES_WAIT)
        if proc is not None and proc.returncode is not None:
            self._remove_partials()
        if self._dead is not None and not self._dead.done():
            self._mark_dead(f"the sandbox was stopped because {why}", self._kill_cause)
        for task in self._tasks:
            task.cancel()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def kill_soon(self, why: str) -> None:
        """SIGKILL now, from synchronous code: pending requests fail with `why` at once, before any later frame."""
        if self._killed_because is None:
            self._killed_because = why
        self._signal(signal.SIGKILL)
        if self._dead is not None:
            self._mark_dead(f"the sandbox was stopped because {why}", self._kill_cause)

    def kill_now(self) -> None:
        """Synchronous last resort (shutdown on the control thread, atexit): SIGKILL the process group; its files
        written aside go once it is dead and the `partial` events it sent are read (a file reaches the host whole).

        From another thread while its loop runs (do_shutdown), the loop does it all (`kill`: its frames task reads
        the socket to its end), waited for at most KILL_NOW_WAIT. On the loop's own thread, `_watch_exit` does it
        when the loop next runs. Only if the loop does not answer in time (or runs no more) are they removed from
        here after a bounded wait for the process, without the frames the loop has not read."""
        if self._killed_because is None:
            self._killed_because = "the kernel shut down"
        loop = self._loop
        if loop is not None and loop.is_running() and threading.get_ident() == self._loop_thread:
            self._signal(signal.SIGKILL)
            return
        if loop is not None and loop.is_running() and self.alive:
            try:
                asyncio.run_coroutine_threadsafe(self.kill(self._killed_because), loop).result(KILL_NOW_WAIT)
                return
            except (concurrent.futures.TimeoutError, RuntimeError):
                self.log.warning("the event loop did not stop sandbox %s in time: stopping it from here", self.pid)
        self._signal(signal.SIGKILL)
        if self._proc is not None and self._proc.wait_now(KILL_NOW_WAIT) is None:
            self.log.warning("sandbox process %s did not end within %.0f s of SIGKILL", self.pid, KILL_NOW_WAIT)
        self._remove_partials()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _remove_partials(self) -> None:
        """Remove the files it was writing aside (a file reaches the host whole, or not at all)."""
        if self._partials is not None:
            for path in self._partials.remove():
                self.log.info("removed %s: the sandbox ended while writing it", path)

    def _mark_dead(self, reason: str, cause: StopCause = StopCause.CRASH) -> None:
        assert self._dead is not None
        SandboxProcess.live.discard(self)
        if not self._dead.done():
            self._dead.set_result(reason)
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(SandboxDied(reason, cause, pending.started))
        self._pending.clear()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(SandboxDied(reason, cause))

    async def _watch_exit(self) -> None:
        assert self._proc is not None
        code = await self._proc.wait()
        if self._frames_task is not None:  # the last frames (e.g. a fatal-error report) are read to EOF
            await asyncio.wait({self._frames_task}, timeout=EXIT_FRAMES_WAIT)
        if self._killed_because:
            reason = f"the sandbox was stopped because {self._killed_because}"
        else:
            reason = self._fatal or startup.exit_reason(code, self._output_tail, self.options.memory_limit_mb)
        (self.log.info if self._killed_because else self.log.warning)("sandbox process %s ended: %s", self.pid, reason)
        self._remove_partials()  # before anyone learns that it died: the next cell sees the folder clean
        self._mark_dead(reason, self._kill_cause if self._killed_because else StopCause.CRASH)
        if self._tmp is not None:  # however it ended, its private folder goes with it
            shutil.rmtree(self._tmp, ignore_errors=True)

    # ---- frames -----------------------------------------------------------------------
    async def _read_frames(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                frame = await frames.read_frame(reader, self.options.max_frame_bytes)
                self._dispatch(frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except frames.FrameError as exc:
            self.log.error("sandbox protocol violation: %s", exc)
            await self.kill(f"it broke the protocol ({exc})")

    def _dispatch(self, frame: frames.Frame) -> None:
        if frame.kind == frames.HOST_EVENT:
            event = frame.json()
            if event.get("event") == FATAL:
                self._fatal = f"the sandbox crashed: {guest_text(str(event.get('message')), 1000)}"
            elif event.get("event") == STARTED and event.get("id") in self._pending:
                self._pending[event["id"]].started = True
            elif event.get("event") == PARTIAL and self._partials is not None:
                self._partials.note(event)
            elif event.get("event") == MEMORY:
                size = event.get("bytes")
                if isinstance(size, int) and 0 <= size <= MAX_WASM_BYTES:
                    self.wasm_bytes = size
            return
        if frame.request_id == 0:
            if frame.kind == frames.GUEST_EVENT and self._ready is not None and not self._ready.done():
                try:
                    ready = guest_schema.parse(frame.payload, "ready event")
                except guest_schema.InvalidGuestMessage:
                    return
                if isinstance(ready, dict) and ready.get("type") == READY:
                    self._ready.set_result(ready)
            return  # output made while no request was served: it belongs to no cell
        pending = self._pending.get(frame.request_id)
        if pending is None:
            return  # output of a request that is over: never attributed to another one
        # Output tagged with the request shows that the worker began it, even when the ring was
        # pumped before the "started" notice arrived (a forged tag can only prevent a retry).
        pending.started = True
        if frame.kind == frames.REPLY:
            del self._pending[frame.request_id]
            try:
                pending.future.set_result(guest_schema.reply(pending.op, frame.payload))
            except guest_schema.InvalidGuestMessage as exc:
                pending.future.set_exception(exc)
            return
        if frame.kind == frames.GUEST_EVENT:
            pending.listener.on_event(frame.payload)
            return
        if frame.kind == frames.BLOB:
            pending.listener.on_blob(frame.payload)
            return
        decoder = pending.decoders.get(frame.kind)
        if decoder is None:
            decoder = pending.decoders[frame.kind] = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(frame.payload)
        if text:
            pending.listener.on_stream("stdout" if frame.kind == frames.STDOUT else "stderr", text)

    def _send(self, request_id: int, request: dict[str, Any]) -> None:
        self._write(frames.encode_request(request_id, request))

    def _write(self, *encoded: bytes) -> None:
        """Frames to the host, in order (the process is woken first)."""
        if self._writer is None or not self.alive:
            raise SandboxDied("the sandbox is not running")
        self._resume()
        for frame in encoded:
            self._writer.write(frame)

    # ---- pausing between requests ------------------------------------------------------------
    def _signal(self, signum: int) -> None:
        if self._proc is not None and self._proc.returncode is None:
            try:
                os.killpg(self._proc.pid, signum)
            except ProcessLookupError:
                pass

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            self._signal(signal.SIGCONT)

    def _pause_if_idle(self) -> None:
        """Stop the process while no request is pending: leftover timers and tasks use no CPU between cells.

        Not before the first request that may run the user's code: until then the sandbox holds nothing of the
        user's, and V8 finishes compiling what the start made hot (Python's interpreter loop: a first cell that
        finds it compiled runs at its warm speed, not ~1.5x slower; issue 28)."""
        ready = self.pause_when_idle and self._guest_code_may_run
        if ready and not self._paused and not self._pending and self.alive:
            self._paused = True
            self._signal(signal.SIGSTOP)

    # ---- requests ---------------------------------------------------------------------
    async def request(self, op: str, payload: dict[str, Any], listener: GuestListener) -> dict[str, Any]:
        """Send one request; what it sends goes to `listener`; returns the reply content (checked)."""
        names.declared("guestOps", op)  # a request the guest does not serve is a bug here: it fails before it is sent
        if not self.alive:
            raise SandboxDied(self._dead.result() if self._dead and self._dead.done() else "the sandbox is not running")
        request_id = next(self._ids)
        self._guest_code_may_run = self._guest_code_may_run or op not in GLUE_ONLY_OPS
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(op, future, listener, {})
        try:
            self._send(request_id, {"op": op, **payload})
            return await future
        finally:
            self._pending.pop(request_id, None)
            self._pause_if_idle()

    def send_data(self, parts: list[bytes]) -> None:
        """Bytes for the next request (it gets them as a list): e.g. a checkpoint to restore."""
        self._write(*(frames.encode_frame(frames.DATA, 0, part) for part in parts))

    def interrupt(self) -> None:
        """Raise KeyboardInterrupt in the guest (and cut short its blocking waits)."""
        if self.alive:
            self._send(min(self._pending, default=0), {"op": INTERRUPT_OP})  # the one served (they run in order)

    def answer(self, number: int, content: dict[str, Any]) -> None:
        """Answer a blocking guest request (e.g. input()) numbered `number`."""
        if self.alive and self._pending:
            self._send(0, {"op": REPLY_OP, "n": number, "content": content})

    @property
    def death_reason(self) -> str | None:
        return self._dead.result() if self._dead is not None and self._dead.done() else None
