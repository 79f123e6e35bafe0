"""Publishes one request's output on IOPub: stream text coalesced, every message within the cell's budget.

Stream text is held and sent as ipykernel's OutStream sends it: each stream (stdout, stderr) has its own timer,
started by its first text after the timer last ran out, and sends what it holds when the timer runs out; before
any other message and at the request's end, stdout's text and then stderr's are sent, and the timers run on. So
a quick cell that prints to both shows its stdout, then its stderr, as under ipykernel.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

FLUSH_INTERVAL = 0.2  # seconds: each stream's text reaches the frontend at least this often (ipykernel's interval)
STREAM_ORDER = ("stdout", "stderr")  # the order ipykernel flushes its streams in (any other name after them)
RESULT_TEXT_CHARS = 10_000  # of an execute_result's text/plain, kept for history's output
# What each guest message costs on top of its content: a Jupyter message's header, parent header and
# signature take about this much. Counting it keeps a flood of tiny messages (clear_output in a loop)
# within the budget in messages too, well below IOPub's high-water mark, where ZMQ would drop messages
# (and with them the truncation notice) silently.
ENVELOPE_BYTES = 256


# send(msg_type, content, metadata): metadata is the message's own, which only the kernel sets.
class Send(Protocol):
    """Sends one IOPub message (type, content, metadata, binary buffers) for the current request."""

    def __call__(
        self, msg_type: str, content: dict[str, Any], metadata: dict[str, Any], buffers: list[bytes] | None = None
    ) -> None: ...


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
GUEST_TEXT_CHARS = 200  # of one guest-made string inside a kernel notice


def guest_text(text: str, limit: int = GUEST_TEXT_CHARS) -> str:
    r"""A guest-made string (a file or package name, a mime type, a reason) as it may appear inside one of the
    kernel's own messages: on one line, nothing hidden, at most `limit` characters of it.

    Backslashes, line breaks and tabs are written as Python writes them (``\\``, ``\n``); every other character
    that str.isprintable() refuses (controls, bidi overrides and zero-width marks, line and paragraph separators,
    unusual spaces, surrogates, private-use and unassigned code points) as ``\xNN``, ``\uNNNN`` or ``\UNNNNNNNN``.
    So the guest can neither add lines of its own inside a notice nor reorder or hide what it says.
    """
    text = str(text)
    cut = len(text) > limit
    shown = "".join(_escaped(c) for c in text[:limit])
    return f"{shown}… ({len(text)} characters)" if cut else shown


def _escaped(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def notice_metadata(kind: str) -> dict[str, Any]:
    """Message metadata that marks the kernel's own notices (guest output can never carry it)."""
    return {"sandbox_kernel": {"notice": kind}}


def size_of(content: Any) -> int:
    """Bytes of a message content as JSON (what it costs to send and keep)."""
    return len(json.dumps(content, separators=(",", ":"), default=str).encode())


class OutputRouter:
    """Turns one request's output into IOPub messages, in order, within `max_bytes` (None: no limit)."""

    def __init__(self, send: Send, max_bytes: int | None = None) -> None:
        self._send = send
        self._held: dict[str, list[str]] = {}  # each stream's text not yet sent
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.max_bytes = max_bytes
        self.spent = 0
        self.truncated = False
        self.last_result_text: str | None = None

    @property
    def remaining(self) -> int | None:
        return None if self.max_bytes is None else max(0, self.max_bytes - self.spent)

    def spend(self, size: int) -> bool:
        """Whether `size` more bytes fit this cell's max_output_bytes (counted if they do)."""
        if self.max_bytes is not None and (self.truncated or self.spent + size > self.max_bytes):
            self._truncate()
            return False
        self.spent += size
        return True

    def _truncate(self) -> None:
        if not self.truncated:
            self.truncated = True
            self.notice(
                f"\n[output truncated: this cell's output passed max_output_bytes={self.max_bytes} bytes; "
                "the rest is dropped. Raise the limit with SandboxKernel.max_output_bytes.]\n",
                "truncated",
            )

    # ---- guest output --------------------------------------------------------------------
    def stream(self, name: str, text: str) -> None:
        size = len(text.encode())
        remaining = self.remaining
        if remaining is not None and not self.truncated and size > remaining:
            self._stream(name, text.encode()[:remaining].decode(errors="ignore"))  # what still fits
            self.spent = self.max_bytes or 0
            self._truncate()
        elif self.spend(size):
            self._stream(name, text)

    def publish(
        self,
        msg_type: str,
        content: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        buffers: list[bytes] | None = None,
    ) -> bool:
        """A guest IOPub message (already checked and cleaned); False if it was over the budget."""
        size = size_of(content) + (size_of(metadata) if metadata else 0) + sum(map(len, buffers or [])) + ENVELOPE_BYTES
        if not self.spend(size):
            return False
        self.flush()
        if msg_type == "execute_result":
            text = content["data"].get("text/plain")
            self.last_result_text = text[:RESULT_TEXT_CHARS] if isinstance(text, str) else None
        self._send(msg_type, content, metadata or {}, buffers)
        return True

    def _stream(self, name: str, text: str) -> None:
        held = self._held.setdefault(name, [])
        held.append(text)
        if name not in self._timers:
            self._timers[name] = asyncio.get_running_loop().call_later(FLUSH_INTERVAL, self._timer_ran_out, name)

    def _timer_ran_out(self, name: str) -> None:
        del self._timers[name]
        self._send_held(name)

    # ---- the kernel's own messages ---------------------------------------------------------
    def kernel_message(self, msg_type: str, content: dict[str, Any], kind: str) -> None:
        """A message from the kernel itself (e.g. the error of a restart), after pending stream text."""
        self.flush()
        self._send(msg_type, content, notice_metadata(kind))

    def notice(self, text: str, kind: str = "notice", name: str = "stderr") -> None:
        """A notice from the kernel, as stream text marked as the kernel's."""
        self.kernel_message("stream", {"name": name, "text": text}, kind)

    def flush(self) -> None:
        """Send the text every stream holds: stdout's, then stderr's (their timers run on, as ipykernel's do)."""
        for name in sorted(self._held, key=lambda n: STREAM_ORDER.index(n) if n in STREAM_ORDER else len(STREAM_ORDER)):
            self._send_held(name)

    def _send_held(self, name: str) -> None:
        text = "".join(self._held.pop(name, ()))
        if text:
            self._send("stream", {"name": name, "text": text}, {})
