"""Running one cell in the sandbox: a `CellRequest` in, a `CellOutcome` out (reply, what happened, what it cost).

The runner gets the current sandbox from the pool, sends the request, watches it (SIGINT and cell_timeout send
interrupts; a cell that will not stop within interrupt_grace gets a fresh sandbox), replaces a sandbox that died
before the cell began, and cleans the guest's reply for the frontend. Every path ends in a reply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox_kernel.jupyter import replies
from sandbox_kernel.jupyter.channels import KernelChannels
from sandbox_kernel.jupyter.output import OutputRouter, guest_text, size_of
from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.protocol import schema as guest_schema
from sandbox_kernel.protocol.dispatcher import RequestDispatcher
from sandbox_kernel.sandbox.pool import SandboxPool
from sandbox_kernel.sandbox.process import GuestListener, SandboxDied, SandboxProcess
from sandbox_kernel.sandbox.startup import SandboxStartError
from sandbox_kernel.sandbox.supervision import Action, StopCause, Supervisor

SIMPLE_REQUEST_TIMEOUT = 30.0  # seconds for completion, inspection, is_complete, configure
SHORT_EVALUE = 1000  # characters of an error's message kept when the cell's output budget is spent
OVER_BUDGET = {
    "status": "error",
    "ename": "OutputTruncated",
    "evalue": "this value passed the cell's max_output_bytes",
    "traceback": [],
}
ERROR_NAMES = {
    StopCause.TIMEOUT: "SandboxTimeout",
    StopCause.INTERRUPT: "SandboxRestarted",
    StopCause.CRASH: "SandboxRestarted",
}
Listen = Callable[[SandboxProcess, RequestDispatcher], GuestListener]


@dataclass
class CellRequest:
    """One cell, as the frontend sent it (or a request of the kernel's own magics, `op` other than execute)."""

    code: str
    execution_count: int
    silent: bool = False
    store_history: bool = True
    user_expressions: dict[str, Any] = field(default_factory=dict)
    allow_stdin: bool = False
    cell_id: str | None = None
    op: str = "execute"
    extra: dict[str, Any] = field(default_factory=dict)  # more of the request's payload (a magic's)
    listen: Listen | None = None  # gives the request's listener, just before it is sent (default: the dispatcher)

    def payload(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "silent": self.silent,
            "store_history": self.store_history,
            "user_expressions": self.user_expressions,
            "allow_stdin": self.allow_stdin,
            "execution_count": self.execution_count,
            "cell_id": self.cell_id,
            **self.extra,
        }


@dataclass
class CellOutcome:
    """What became of a cell: its reply, what happened to the sandbox, what it cost, and facts for the metadata."""

    reply: dict[str, Any]
    timed_out: bool = False
    restarted: bool = False
    cpu_s: float = 0.0
    peak_memory_bytes: int | None = None
    skill_calls: int = 0
    facts: dict[str, Any] = field(default_factory=dict)  # more of the reply's sandbox_kernel metadata

    def metadata(self) -> dict[str, Any]:
        """The reply's metadata under "sandbox_kernel" (metrics are added by the kernel, which times the cell)."""
        return {"timed_out": self.timed_out, "restarted": self.restarted, **self.facts}

    def metrics(self) -> dict[str, Any]:
        return {"cpu_s": self.cpu_s, "peak_memory_bytes": self.peak_memory_bytes, "skill_calls": self.skill_calls}


def error_reply(ename: str, evalue: str, router: OutputRouter) -> dict[str, Any]:
    """An error the kernel itself reports: shown in the frontend (as the kernel's) and returned as the reply."""
    content = {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
    router.kernel_message("error", content, ename)
    return {"status": "error", **content, "user_expressions": {}, "payload": []}


def ok_reply() -> dict[str, Any]:
    """The execute reply of a cell the kernel handled itself (%checkpoint, %restore) without an error."""
    return {"status": "ok", "user_expressions": {}, "payload": []}


class CellRunner:
    """Runs cells and the kernel's other requests in the pool's current sandbox."""

    def __init__(  # its collaborators and the three settings it applies: a constructor, not a call site
        self,
        pool: SandboxPool,
        channels: KernelChannels,
        sanitizer: OutputSanitizer,
        log: logging.Logger,
        cell_timeout: float | None,
        interrupt_grace: float,
        settings_error: Callable[[], str],
        next_count: Callable[[], int],
    ) -> None:
        self.pool = pool
        self.channels = channels
        self.sanitizer = sanitizer
        self.log = log
        self.cell_timeout = cell_timeout
        self.interrupt_grace = interrupt_grace
        self.settings_error = settings_error
        self.next_count = next_count  # the execution count the next stored cell gets (requests outside cells)
        self._interrupted = asyncio.Event()
        self._running = False
        self._one_at_a_time = asyncio.Lock()  # a frontend's comm message waits for the running cell

    def on_sigint(self) -> None:
        """SIGINT (Jupyter's interrupt) reaches the running cell; between cells it does nothing."""
        if self._running:
            self._interrupted.set()

    @property
    def busy(self) -> bool:
        """Whether a request is being run (another one waits for it)."""
        return self._one_at_a_time.locked()

    async def run(self, request: CellRequest, router: OutputRouter) -> CellOutcome:
        """Run one cell (request `op`); its outcome, never an exception the kernel did not mean."""
        async with self._one_at_a_time:
            return await self._run(request, router)

    async def _run(self, request: CellRequest, router: OutputRouter) -> CellOutcome:
        error = self.settings_error()
        if error:
            return CellOutcome(error_reply("SandboxSettingsError", error, router))
        outcome = CellOutcome({})
        for attempt in range(2):  # a sandbox that died before the cell began is replaced once
            try:
                sandbox = await self.pool.get()
            except (SandboxStartError, SandboxDied) as exc:
                reply = error_reply("SandboxUnavailable", f"the sandbox could not be started: {exc}", router)
                return CellOutcome(reply)
            death = self.pool.take_unreported_death()
            if death:
                outcome.restarted = True
                router.notice(
                    f"SandboxRestarted: {death}; the sandbox was restarted and all variables were lost.\n", "restarted"
                )
            dispatcher = self.channels.dispatcher(router, sandbox, request.allow_stdin, True, request.execution_count)
            cpu_before = sandbox.cpu_seconds()
            try:
                listener = request.listen(sandbox, dispatcher) if request.listen is not None else None
                reply, supervisor = await self._supervise(sandbox, request, dispatcher, listener)
                break
            except guest_schema.InvalidGuestMessage as exc:
                outcome.reply = error_reply(
                    "SandboxProtocolError", f"the sandbox sent an invalid reply ({exc})", router
                )
                return outcome
            except SandboxDied as exc:
                outcome.restarted, outcome.timed_out = True, exc.cause is StopCause.TIMEOUT
                if attempt == 0 and not exc.started and exc.cause is StopCause.CRASH:
                    # It died before this cell began (e.g. of something a previous cell left behind).
                    router.notice(
                        f"SandboxRestarted: {exc.reason}; the sandbox was restarted and all variables were lost.\n",
                        "restarted",
                    )
                    continue
                reason = f"{exc.reason}; the sandbox was restarted and all variables were lost."
                outcome.reply = error_reply(ERROR_NAMES[exc.cause], reason, router)
                return outcome
            finally:
                dispatcher.finish()
                self._count(outcome, sandbox, dispatcher, cpu_before)
        outcome.reply, timed_out = self._reply(
            request, {"user_expressions": {}, "payload": [], **reply}, supervisor, router
        )
        outcome.timed_out = outcome.timed_out or timed_out
        return outcome

    @staticmethod
    def _count(outcome: CellOutcome, sandbox: SandboxProcess, dispatcher: RequestDispatcher, cpu_before: Any) -> None:
        """What the sandbox spent on the request: CPU, wasm memory, skill calls."""
        cpu_after = sandbox.cpu_seconds()
        if cpu_before is not None and cpu_after is not None:
            outcome.cpu_s = round(outcome.cpu_s + cpu_after - cpu_before, 3)
        outcome.peak_memory_bytes = sandbox.wasm_bytes or None
        outcome.skill_calls += dispatcher.requests.get("skill_call", 0)

    def _reply(
        self, request: CellRequest, reply: dict[str, Any], supervisor: Supervisor, router: OutputRouter
    ) -> tuple[dict[str, Any], bool]:
        """The guest's reply as it may reach the frontend, and whether cell_timeout ended the cell."""
        if request.op != "execute" and reply["status"] == "error" and reply["ename"] != "KeyboardInterrupt":
            # The guest did not show it; the kernel does, with the guest's words escaped (they are its own message).
            return error_reply(guest_text(reply["ename"]), guest_text(reply["evalue"], 1000), router), False
        reply = self._clean_reply(reply, router)
        if supervisor.timed_out and reply.get("status") == "error":
            evalue = f"the cell ran past cell_timeout={self.cell_timeout:g}s and was interrupted; variables were kept."
            router.notice(f"SandboxTimeout: {evalue}\n", "timeout")
            return {**reply, "ename": "SandboxTimeout", "evalue": evalue}, True
        return reply, False

    async def _supervise(
        self,
        sandbox: SandboxProcess,
        request: CellRequest,
        dispatcher: RequestDispatcher,
        listener: GuestListener | None,
    ) -> tuple[dict[str, Any], Supervisor]:
        """Send the request; interrupt on SIGINT or cell_timeout; restart the sandbox if it will not stop. What the
        sandbox sends goes to `listener` (default: the dispatcher)."""
        loop = asyncio.get_running_loop()
        supervisor = Supervisor(started=loop.time(), timeout=self.cell_timeout, grace=self.interrupt_grace)
        self._interrupted.clear()
        self._running = True
        task = asyncio.ensure_future(sandbox.request(request.op, request.payload(), listener or dispatcher))
        flag = asyncio.ensure_future(self._interrupted.wait())
        try:
            while not task.done():
                wake = supervisor.next_wake()
                timeout = None if wake is None else max(0.0, wake - loop.time())
                await asyncio.wait({task, flag}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    break
                if flag.done():
                    self._interrupted.clear()
                    flag = asyncio.ensure_future(self._interrupted.wait())
                    dispatcher.interrupt_taken = False
                    actions = supervisor.interrupt(loop.time())
                else:
                    # Untrusted, but it can only stop the re-sends: the restart after the grace still comes.
                    supervisor.taken = dispatcher.interrupt_taken
                    actions = supervisor.tick(loop.time())
                for action in actions:
                    if action is Action.SEND_INTERRUPT:
                        sandbox.interrupt()
                        dispatcher.cancel_open()
                    elif action is Action.RESTART and supervisor.cause is not None:
                        await self.pool.restart(self._stop_reason(supervisor), supervisor.cause)
            return task.result(), supervisor
        except SandboxDied:
            self.pool.died_under_request(sandbox)
            raise
        finally:
            self._running = False
            flag.cancel()
            if not task.done():
                task.cancel()

    def _stop_reason(self, supervisor: Supervisor) -> str:
        if supervisor.cause is StopCause.TIMEOUT:
            return (
                f"the cell ran past cell_timeout={self.cell_timeout:g}s and did not stop within "
                f"interrupt_grace={self.interrupt_grace:g}s"
            )
        return f"the cell did not stop within {self.interrupt_grace:g}s of the interrupt"

    def _clean_reply(self, reply: dict[str, Any], router: OutputRouter) -> dict[str, Any]:
        """The guest's execute reply: pager pages and expression values cleaned, everything within budget."""
        payload = []
        for item in reply["payload"]:
            kept = replies.payload_item(item, self.sanitizer)
            if kept is not None and router.spend(size_of(kept)):
                payload.append(kept)
        expressions = {}
        for name, value in reply["user_expressions"].items():
            value = replies.expression_value(value, self.sanitizer)
            expressions[name] = value if router.spend(size_of(value)) else OVER_BUDGET
        clean = {**reply, "payload": payload, "user_expressions": expressions}
        if reply["status"] == "error" and not router.spend(size_of([reply["evalue"], reply["traceback"]])):
            clean["evalue"] = reply["evalue"][:SHORT_EVALUE] + " [... cut: max_output_bytes]"
            clean["traceback"] = []
        return clean

    # ---- requests that are not cells -------------------------------------------------------------------
    async def simple_request(self, op: str, payload: dict[str, Any], fallback: dict[str, Any]) -> dict[str, Any]:
        """Completion, inspection, is_complete: the guest's answer, or `fallback` when there is none in time."""
        router = self.channels.router()
        try:
            sandbox = await self.pool.get()
            dispatcher = self.channels.dispatcher(router, sandbox, False, False, self.next_count())
            try:
                return await asyncio.wait_for(sandbox.request(op, payload, dispatcher), SIMPLE_REQUEST_TIMEOUT)
            finally:
                dispatcher.finish()
        except (SandboxStartError, SandboxDied, asyncio.TimeoutError, guest_schema.InvalidGuestMessage) as exc:
            self.log.warning("%s failed: %s", op, exc)
            return fallback

    async def background_request(
        self, sandbox: SandboxProcess, op: str, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """A request of the kernel's own (no cell): its output goes to whichever cell is current."""
        router = self.channels.router()
        dispatcher = self.channels.dispatcher(router, sandbox, False, False, self.next_count())
        try:
            return await asyncio.wait_for(sandbox.request(op, payload, dispatcher), timeout)
        finally:
            dispatcher.finish()
