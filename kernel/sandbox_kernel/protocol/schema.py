"""The one check of everything the sandbox sends: guest events, IOPub contents and request replies.

The shapes and bounds live in guest_messages.json (JSON Schema); this module parses and checks
messages against it, and describes a failure without quoting the guest's data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema

SCHEMA_FILE = Path(__file__).with_name("guest_messages.json")
MAX_DEPTH = 64  # JSON nesting accepted from the sandbox
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class InvalidGuestMessage(ValueError):
    """A message from the sandbox that does not have the declared shape; the text never quotes its data."""


class NotJson(InvalidGuestMessage):
    """Not even JSON: the guest's glue never sends that, so its JS realm is broken (or hostile)."""


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return loaded


@cache
def _validator(section: str, name: str) -> Callable[[Any], Any] | None:
    """A compiled check (it stops at the first failure: bounded work for any input)."""
    schema = _schema()
    part = schema[section].get(name)
    if part is None:
        return None
    return fastjsonschema.compile({**part, "$defs": schema["$defs"]})


def names(section: str) -> frozenset[str]:
    """The declared names of a section: 'events', 'iopub' or 'replies'."""
    return frozenset(_schema()[section])


def too_deep(payload: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests deeper than `limit` (strings skipped), found without building it."""
    brackets = _STRINGS.sub(b"", payload).translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return False
    level = 0
    for byte in brackets:
        level += 1 if byte in b"[{" else -1
        if level > limit:
            return True
    return False


def parse(payload: bytes | str, what: str) -> Any:
    """JSON from the sandbox, refusing invalid text and deep nesting (before it is built)."""
    raw = payload.encode() if isinstance(payload, str) else payload
    if too_deep(raw):
        raise InvalidGuestMessage(f"{what}: nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise NotJson(f"{what}: not valid JSON") from None


def check(section: str, name: Any, value: Any) -> dict[str, Any]:
    """`value` if it is a valid `name` of `section`, else InvalidGuestMessage."""
    validator = _validator(section, name) if isinstance(name, str) else None
    if validator is None:
        shown = name[:40] if isinstance(name, str) else type(name).__name__
        raise InvalidGuestMessage(f"unknown {section[:-1] if section != 'iopub' else 'iopub type'} {shown!r}")
    try:
        validator(value)
    except fastjsonschema.JsonSchemaValueException as exc:
        # Where and which rule failed: the path holds schema names and indices, never the guest's data.
        path = ".".join(str(p) for p in exc.path[1:])
        raise InvalidGuestMessage(f"{name}{'.' + path if path else ''}: fails '{exc.rule}'") from None
    checked: dict[str, Any] = value  # the schema makes every message an object
    return checked


def event(payload: bytes) -> dict[str, Any]:
    """A guest event (an IOPub message or a request to the kernel), checked."""
    value = parse(payload, "event")
    if not isinstance(value, dict):
        raise InvalidGuestMessage("event: not a JSON object")
    checked = check("events", value.get("type"), value)
    if checked["type"] == "iopub":
        check("iopub", checked["msg_type"], checked["content"])
    return checked


def reply(op: str, payload: bytes) -> dict[str, Any]:
    """The reply that ends request `op`, checked."""
    return check("replies", op, parse(payload, f"reply to {op}"))
