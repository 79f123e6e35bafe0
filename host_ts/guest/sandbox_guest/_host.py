"""Thin wrappers over the JS functions the worker registers as ``_sandbox_host``."""

from __future__ import annotations

import base64
import contextvars
import itertools
import json
from typing import Any, SupportsIndex

from ._protocol import Event, Kind
from .cleantb import CleanTraceback

_js: Any = None  # the worker's `_sandbox_host` JS module, bound by attach() after every (re)start


def attach() -> None:
    """Bind to the worker's JS functions (they cannot live in the memory snapshot)."""
    global _js
    import _sandbox_host

    _js = _sandbox_host


STDOUT = Kind.STDOUT
STDERR = Kind.STDERR

_numbers = itertools.count(1)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


# The kernel request a piece of code runs for; asyncio tasks inherit it from the cell that made them.
REQUEST: contextvars.ContextVar[int] = contextvars.ContextVar("sandbox_request", default=0)

_pending: list[str] = []
_pending_kind = STDOUT
_pending_request = 0
FLUSH_AT = 8192  # characters: a longer write is sent at once
# Characters of stream text handed to JavaScript in one call: a string crosses into the worker's JS heap whole, so a
# print() of 200 MB would need 200 MB of it at once (the JS heap is as large as memory_limit_mb: it ran out).
JS_PIECE = 1 << 20


def write(kind: int, text: str) -> None:
    """Send stream text (stdout or stderr) to the kernel.

    A fragment without a newline waits for the rest of its line (print() writes the text
    and its newline separately): one message per line instead of two. Anything else sent
    to the kernel, an input request, a sleep or the end of the cell sends it first.
    """
    global _pending_kind, _pending_request
    request = REQUEST.get()
    if _pending and (kind != _pending_kind or request != _pending_request):
        flush_streams()
    _pending.append(text)
    _pending_kind = kind
    _pending_request = request
    if text.endswith("\n") or len(_pending) > 64 or len(text) > FLUSH_AT:
        flush_streams()


def flush_streams() -> None:
    """Send any stream text still held back."""
    if _pending:
        text = "".join(_pending)
        _pending.clear()
        for start in range(0, len(text), JS_PIECE):
            _js.write(_pending_kind, text[start : start + JS_PIECE], _pending_request)


def emit(event: dict[str, Any]) -> None:
    """Send one JSON event to the kernel."""
    flush_streams()
    if not _js.emit(json.dumps(event, default=_json_default), REQUEST.get()):
        raise ValueError("output too large to send to the frontend (the limit follows SandboxKernel.max_output_bytes)")


def send_blob(data: memoryview) -> None:
    """Send bytes to the kernel, unparsed (a checkpoint's part); no larger than the kernel's event limit."""
    flush_streams()
    if not _js.send_blob(data, REQUEST.get()):
        raise ValueError(f"a part of {len(data)} bytes is larger than the sandbox may send at once")


def iopub(msg_type: str, content: dict[str, Any]) -> None:
    """Publish an IOPub message (display_data, execute_result, error, ...)."""
    emit({"type": Event.IOPUB, "msg_type": msg_type, "content": content})


def request(event: dict[str, Any]) -> Any:
    """Ask the kernel something and block until it answers; KeyboardInterrupt if interrupted."""
    __tracebackhide__ = True
    flush_streams()
    number = next(_numbers)
    emit({**event, "n": number})
    raw = _js.wait_reply(number)
    if raw is None:
        raise KeyboardInterrupt("Interrupted by user")
    return json.loads(raw)


class Interrupted(CleanTraceback, KeyboardInterrupt):
    """KeyboardInterrupt (caught as one, shown as one) without this module's frame."""


Interrupted.__name__ = Interrupted.__qualname__ = "KeyboardInterrupt"


def sleep(seconds: float | SupportsIndex) -> None:
    """Sleep without burning CPU; an interrupt raises KeyboardInterrupt."""
    __tracebackhide__ = True
    flush_streams()
    if _js.sleep(max(0.0, float(seconds)) * 1000.0):
        raise Interrupted


def take_refusal() -> str | None:
    """Why the host refused the last change to a read-write mount (once), or None."""
    if _js is None:
        return None
    why = _js.take_refusal()
    return why if isinstance(why, str) else None


def file_room(fd: int) -> int | None:
    """How many bytes the host file open as `fd` may still grow by before a mount limit refuses a write, as of its
    last write that reached the host; None when it is not a host folder's file open for writing."""
    if _js is None:
        return None
    room = _js.file_room(fd)
    return int(room) if isinstance(room, (int, float)) else None


def files_full() -> str | None:
    """Why the memory budget refused the last change to the in-memory files (once), or None."""
    if _js is None:
        return None
    why = _js.files_full()
    return why if isinstance(why, str) else None


def files_mib() -> int:
    """The MiB the sandbox's in-memory files hold now (0: unknown)."""
    if _js is None:
        return 0
    held = _js.files_mib()
    return held if isinstance(held, int) else 0


def shell(request: str, python: Any, write_refusal: Any) -> Any:
    """The worker's shell run of `request` (JSON): a JS Promise of the result's JSON, for run_sync.
    `write_refusal(path)`: the guards' words refusing a write there ('' if none)."""
    return _js.shell(request, python, write_refusal)


def shell_limit_bytes() -> int:
    """The most bytes the worker's shell takes or holds at once (a share of memory_limit_mb: host_ts/shell_limits.ts);
    0 before attach (no worker: nothing fits, as no shell runs)."""
    if _js is None:
        return 0
    return int(_js.shell_limit_bytes)
