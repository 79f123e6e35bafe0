"""Serves everything the sandbox sends during one kernel request: its output, and the guest's requests.

Every message is untrusted: it is size-checked before it is parsed, checked against the schema
(guest_messages.json) before anything looks at it, and every request it makes is answered exactly
once, whatever its handler does. Invalid messages are counted and summarised once, never quoted.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from sandbox_kernel.jupyter.output import OutputRouter, guest_text
from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.jupyter.widget_guard import CommRefused, WidgetGuard, decoded_buffers
from sandbox_kernel.protocol import schema as guest_schema

MAX_OPEN_REQUESTS = 4  # guest requests served at once; the guest's own glue makes one at a time
TOO_MANY = f"more than {MAX_OPEN_REQUESTS} requests at once from the sandbox"
NAMED_REFUSALS = 20  # distinct Skill.method names a refusal count lists per reason (the rest are counted together)
ONE_WAY_TYPES = {"iopub", "interrupt_taken"}  # events the guest does not wait on
REQUEST_TYPES = sorted(guest_schema.names("events") - ONE_WAY_TYPES)
DISPLAY_TYPES = ("display_data", "update_display_data", "execute_result")
COMM_TYPES = ("comm_open", "comm_msg", "comm_close")

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# Tests only: outputs, display updates and comm messages go to IOPub as the sandbox sent them (no sanitizer, no
# widget guard), to test the page's Content-Security-Policy alone (page_policy.py). Only this variable, in the
# kernel's environment, turns it on; the kernel's log and every request's output say so.
TEST_NO_CLEANING = "SANDBOX_KERNEL_TEST_NO_CLEANING"
NO_CLEANING_NOTICE = (
    f"[sandbox-kernel] TEST MODE ({TEST_NO_CLEANING}=1): this output reached the browser UNCLEANED; never use this "
    "outside the project's tests.\n"
)


def cleaning_off() -> bool:
    """Whether the test switch that sends the sandbox's output uncleaned is on."""
    return os.environ.get(TEST_NO_CLEANING) == "1"


def error_answer(kind: str, message: str, exception: str = "") -> dict[str, Any]:
    """The answer to a guest request that failed: the guest raises an exception named `kind`."""
    return {"error": {"type": kind, "message": message, "exception": exception}}


class GuestServices(Protocol):
    """What the kernel does for the guest's requests (each returns {"value": ...} or an error answer)."""

    async def input_request(self, event: dict[str, Any]) -> dict[str, Any]: ...

    async def skill_call(self, event: dict[str, Any]) -> dict[str, Any]: ...

    async def load_packages(self, event: dict[str, Any]) -> dict[str, Any]: ...

    async def pip_installed(self, event: dict[str, Any]) -> dict[str, Any]: ...

    async def wheelhouse_wheels(self, event: dict[str, Any]) -> dict[str, Any]: ...

    async def pip_uninstalled(self, event: dict[str, Any]) -> dict[str, Any]: ...

    def skill_calls_refused(self, reason: str, calls: dict[str, int], unnamed: int) -> None:
        """Record skill calls refused before any handler saw them (`calls`: count per Skill.method, `unnamed`:
        those past the first NAMED_REFUSALS names)."""


class RequestDispatcher:
    """The one owner of a kernel request's guest traffic (streams, events, requests)."""

    def __init__(  # the request's routes, services and limits: a constructor, not a call site
        self,
        router: OutputRouter,
        sanitizer: OutputSanitizer,
        services: GuestServices,
        answer: Callable[[int, dict[str, Any]], None],
        log: logging.Logger,
        request_bytes: int,
        on_broken: Callable[[str], None] = lambda why: None,
        widgets: WidgetGuard | None = None,
    ) -> None:
        self.router = router
        self.widgets = widgets or WidgetGuard(sanitizer)  # the kernel's open comms (its own, for a test)
        self.on_broken = on_broken  # the sandbox sent what its glue never sends: it must be replaced
        self.sanitizer = sanitizer
        self.answer = answer
        self.log = log
        self.request_bytes = request_bytes  # largest guest request (skill arguments and some room)
        self.services = services
        # One handler per request type that the schema declares, named as the type.
        self.handlers: dict[str, Handler] = {name: getattr(services, name) for name in REQUEST_TYPES}
        self.open: set[asyncio.Task[None]] = set()
        self.invalid = 0
        self.failures = 0
        self.first_problem = ""
        self.interrupt_taken = False  # the cell got a KeyboardInterrupt (said by the guest: it only stops re-sends)
        self.comm_refused = 0  # comm messages the widget guard refused (the first one is told)
        self.requests: dict[str, int] = {}  # guest requests served, by type (the cell's metrics)
        self._dropped_types: set[str] = set()
        # Skill calls refused here, by reason, then by Skill.method: recorded once, when the request ends.
        self.refused_calls: dict[str, dict[str, int]] = {}
        self.refused_unnamed: dict[str, int] = {}
        self.uncleaned = cleaning_off()  # read per request: no cached answer to go stale
        self._told_uncleaned = False

    # ---- what the sandbox sends ------------------------------------------------------------
    def on_stream(self, name: str, text: str) -> None:
        self.router.stream(name, text)

    def on_event(self, payload: bytes) -> None:
        remaining = self.router.remaining
        if remaining is not None and len(payload) > max(remaining, self.request_bytes):
            # Too big for this cell's output and for any request: dropped before it is parsed.
            self.router.spend(len(payload))
            return
        try:
            event = guest_schema.event(payload)
        except guest_schema.NotJson as exc:
            self.log.warning("the sandbox sent %d bytes that are not JSON: its JS realm is broken", len(payload))
            self.on_broken(str(exc))
            return
        except guest_schema.InvalidGuestMessage as exc:
            self._invalid(str(exc), payload)
            return
        if event["type"] == "interrupt_taken":
            self.interrupt_taken = True
        elif event["type"] == "iopub" and event["msg_type"] in COMM_TYPES:
            self._comm(event)
        elif event["type"] == "iopub":
            self._display(event["msg_type"], event["content"])
        else:
            self._request(event)

    def on_blob(self, payload: bytes) -> None:
        """Bytes only a checkpoint sends (its collector takes them): here they are out of place."""
        self._invalid(f"{len(payload)} bytes of checkpoint data outside a checkpoint", b"")

    # ---- output ------------------------------------------------------------------------
    def _tell_uncleaned(self) -> None:
        """The test switch is on: said once per request, in the output, before the first uncleaned message."""
        if not self._told_uncleaned:
            self._told_uncleaned = True
            self.log.warning("%s is on: the sandbox's output goes to the browser uncleaned", TEST_NO_CLEANING)
            self.router.notice(NO_CLEANING_NOTICE, "test_no_cleaning")

    def _display(self, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type == "error" and content.get("ename") == "KeyboardInterrupt":
            self.interrupt_taken = True
        if msg_type in DISPLAY_TYPES and self.uncleaned:
            self._tell_uncleaned()
            if msg_type != "execute_result":
                content = {**content, "transient": content.get("transient", {})}
        elif msg_type in DISPLAY_TYPES:
            clean = self.sanitizer.bundle(content["data"], content.get("metadata"))
            for mime in clean.dropped:
                if mime not in self._dropped_types:
                    self._dropped_types.add(mime)
                    why = clean.reasons.get(
                        mime,
                        "the sandbox's output may not run code in your browser (SandboxKernel.trust_output is off)",
                    )
                    self.router.notice(
                        f"[sandbox-kernel] output of type {guest_text(mime)} was not sent: {why}.\n", "output_dropped"
                    )
            content = {**content, "data": clean.data, "metadata": clean.metadata}
            if msg_type != "execute_result":
                content.setdefault("transient", {})
        self.router.publish(msg_type, content)

    def _comm(self, event: dict[str, Any]) -> None:
        """A comm message (widgets): checked by the widget guard, then sent with its buffers."""
        try:
            buffers = decoded_buffers(event.get("buffers", []))
            if self.uncleaned:
                self._tell_uncleaned()
                content = event["content"]
            else:
                content, buffers = self.widgets.from_guest(event["msg_type"], event["content"], buffers)
        except CommRefused as exc:
            self.comm_refused += 1
            if self.comm_refused == 1:
                self.router.notice(
                    f"[sandbox-kernel] a widget message was not sent: {guest_text(str(exc), 400)}.\n", "comm_refused"
                )
            return
        self.router.publish(event["msg_type"], content, event.get("metadata"), buffers)

    # ---- requests ----------------------------------------------------------------------
    def _request(self, event: dict[str, Any]) -> None:
        number = event["n"]
        self.requests[event["type"]] = self.requests.get(event["type"], 0) + 1
        if len(self.open) >= MAX_OPEN_REQUESTS:
            self.answer(number, error_answer("SandboxProtocolError", TOO_MANY))
            self._refused(event, TOO_MANY)
            return
        task = asyncio.ensure_future(self._serve(self.handlers[event["type"]], event))
        self.open.add(task)
        task.add_done_callback(self.open.discard)

    async def _serve(self, handler: Handler, event: dict[str, Any]) -> None:
        """Run one request's handler; whatever happens, the guest gets exactly one answer."""
        try:
            answer = await handler(event)
        except asyncio.CancelledError:
            answer = error_answer("KeyboardInterrupt", "interrupted")
            self.answer(event["n"], answer)
            raise
        except Exception as exc:
            self.failures += 1
            if self.failures == 1:  # the log gets one traceback per kernel request, not one per guest call
                self.log.exception("serving a %s request from the sandbox failed", event["type"])
            answer = error_answer(
                "SandboxError", f"the kernel could not serve this {event['type']}: {type(exc).__name__}"
            )
        self.answer(event["n"], answer)

    def _refused(self, event: dict[str, Any], reason: str) -> None:
        """Count a skill call refused here, for the audit log."""
        if event.get("type") != "skill_call":
            return
        calls = self.refused_calls.setdefault(reason, {})
        name = f"{_short(event.get('skill'))}.{_short(event.get('method'))}"
        if name in calls or len(calls) < NAMED_REFUSALS:
            calls[name] = calls.get(name, 0) + 1
        else:
            self.refused_unnamed[reason] = self.refused_unnamed.get(reason, 0) + 1

    def _invalid(self, problem: str, payload: bytes) -> None:
        self.invalid += 1
        if self.invalid == 1:
            self.first_problem = problem
            self.log.warning("dropped an invalid message from the sandbox (%d bytes): %s", len(payload), problem)
        request = _parsed(payload)
        number = request.get("n")
        if isinstance(number, int) and not isinstance(number, bool) and 0 < number < 2**32:
            # A malformed request still gets its answer, so the guest does not wait.
            self.answer(number, error_answer("SandboxProtocolError", f"invalid request: {problem}"))
        self._refused(request, "invalid request (not the shape of a skill call; the kernel log says why)")

    # ---- the end of the kernel request ---------------------------------------------------
    def cancel_open(self) -> None:
        """Abandon requests still being served (their guest is no longer waiting)."""
        for task in list(self.open):
            task.cancel()

    def finish(self) -> None:
        """Cancel what is still open, send what is pending, report dropped messages once, and have the skill calls
        refused here recorded (one audit line per reason, with the counts)."""
        self.cancel_open()
        for reason, calls in self.refused_calls.items():
            self.services.skill_calls_refused(reason, calls, self.refused_unnamed.get(reason, 0))
        self.refused_calls, self.refused_unnamed = {}, {}
        if self.invalid:
            more = f" and {self.invalid - 1} more" if self.invalid > 1 else ""
            self.log.warning("this request's sandbox sent %d invalid messages", self.invalid)
            self.router.notice(
                f"[sandbox-kernel] dropped an invalid message from the sandbox ({guest_text(self.first_problem)}){more}.\n",
                "invalid_messages",
            )
        self.router.flush()


def _parsed(payload: bytes) -> dict[str, Any]:
    """A malformed message as a JSON object, if it is one (else {})."""
    try:
        value = guest_schema.parse(payload, "event")
    except guest_schema.InvalidGuestMessage:
        return {}
    return value if isinstance(value, dict) else {}


def _short(name: Any) -> str:
    """A guest-given skill or method name as the audit log keeps it (at most 100 characters; a name that is not a
    string, in a malformed request, by its JSON type)."""
    return name[:100] if isinstance(name, str) else f"<{type(name).__name__}>"
