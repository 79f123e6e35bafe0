"""Thin wrappers over the JS functions the worker registers as ``_sandbox_host``."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

_js: Any = None  # the worker's `_sandbox_host` JS module, bound by attach() after every (re)start


def attach() -> None:
    """Bind to the worker's JS functions (they cannot live in the memory snapshot)."""
    global _js
    import _sandbox_host  # type: ignore[import-not-found]

    _js = _sandbox_host


STDOUT = 1
STDERR = 2

_numbers = itertools.count(1)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def write(kind: int, text: str) -> None:
    """Send stream text (stdout or stderr) to the kernel."""
    _js.write(kind, text)


def emit(event: dict[str, Any]) -> None:
    """Send one JSON event to the kernel."""
    if not _js.emit(json.dumps(event, default=_json_default)):
        raise ValueError("output too large to send to the frontend (limit: max_event_bytes)")


def iopub(msg_type: str, content: dict[str, Any]) -> None:
    """Publish an IOPub message (display_data, execute_result, error, ...)."""
    emit({"type": "iopub", "msg_type": msg_type, "content": content})


def request(event: dict[str, Any]) -> Any:
    """Ask the kernel something and block until it answers; KeyboardInterrupt if interrupted."""
    __tracebackhide__ = True
    number = next(_numbers)
    emit({**event, "n": number})
    raw = _js.wait_reply(number)
    if raw is None:
        raise KeyboardInterrupt("Interrupted by user")
    return json.loads(raw)


def sleep(seconds: float) -> None:
    """Sleep without burning CPU; an interrupt raises KeyboardInterrupt."""
    __tracebackhide__ = True
    if _js.sleep(max(0.0, float(seconds)) * 1000.0):
        raise KeyboardInterrupt
