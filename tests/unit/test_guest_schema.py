"""The one schema of what the sandbox sends: valid messages pass, anything else is refused without quoting it."""

from __future__ import annotations

import json

import pytest

from sandbox_kernel.protocol import schema as guest_schema
from sandbox_kernel.protocol.schema import InvalidGuestMessage

SECRET = "guest-data-never-quoted"

VALID_EVENTS = [
    {
        "type": "iopub",
        "msg_type": "display_data",
        "content": {"data": {"text/plain": "x"}, "metadata": {}, "transient": {}},
    },
    {"type": "iopub", "msg_type": "execute_result", "content": {"data": {}, "metadata": {}, "execution_count": 3}},
    {"type": "iopub", "msg_type": "update_display_data", "content": {"data": {}, "transient": {"display_id": "d"}}},
    {"type": "iopub", "msg_type": "clear_output", "content": {"wait": True}},
    {"type": "iopub", "msg_type": "error", "content": {"ename": "E", "evalue": "v", "traceback": ["t"]}},
    {"type": "interrupt_taken"},
    {"type": "input_request", "n": 1, "prompt": "name? ", "password": False},
    {"type": "skill_call", "n": 2, "skill": "TimeSkill", "method": "now", "args": [1, "a"], "kwargs": {"k": None}},
    {"type": "load_packages", "n": 3, "imports": ["numpy"]},
    {"type": "pip_installed", "n": 4, "specs": ["six"], "index_urls": None},
    {"type": "pip_uninstalled", "n": 5, "names": ["six"]},
]

INVALID_EVENTS = [
    ("not json", b"{not json " + SECRET.encode(), "not valid JSON"),
    ("a list", [SECRET], "not a JSON object"),
    ("unknown type", {"type": "reply", "content": {"status": "ok", "x": SECRET}}, "unknown event 'reply'"),
    ("no type", {"x": SECRET}, "unknown event"),
    ("interrupt_taken with more", {"type": "interrupt_taken", "x": SECRET}, "additional"),
    ("status on iopub", {"type": "iopub", "msg_type": "status", "content": {"execution_state": SECRET}}, "msg_type"),
    ("stream on iopub", {"type": "iopub", "msg_type": "stream", "content": {"text": SECRET}}, "msg_type"),
    ("result without count", {"type": "iopub", "msg_type": "execute_result", "content": {"data": {}}}, "required"),
    (
        "traceback of ints",
        {"type": "iopub", "msg_type": "error", "content": {"ename": "E", "evalue": SECRET, "traceback": [1]}},
        "traceback",
    ),
    (
        "update without id",
        {"type": "iopub", "msg_type": "update_display_data", "content": {"data": {}, "transient": {}}},
        "required",
    ),
    (
        "extra iopub key",
        {"type": "iopub", "msg_type": "clear_output", "content": {"wait": True, SECRET: 1}},
        "additionalProperties",
    ),
    ("pip specs not strings", {"type": "pip_installed", "n": 1, "specs": [{"x": SECRET}]}, "specs"),
    ("pip specs empty", {"type": "pip_installed", "n": 1, "specs": []}, "minItems"),
    ("too many specs", {"type": "pip_installed", "n": 1, "specs": ["a"] * 101}, "maxItems"),
    ("uninstalled names empty", {"type": "pip_uninstalled", "n": 1, "names": []}, "minItems"),
    ("uninstalled names not strings", {"type": "pip_uninstalled", "n": 1, "names": [{"x": SECRET}]}, "names"),
    (
        "skill name too long",
        {"type": "skill_call", "n": 1, "skill": "S" * 129, "method": "m", "args": [], "kwargs": {}},
        "maxLength",
    ),
    ("request without n", {"type": "input_request", "prompt": SECRET, "password": False}, "required"),
    ("n not an integer", {"type": "input_request", "n": "1", "prompt": "", "password": False}, "n"),
    ("n of zero", {"type": "input_request", "n": 0, "prompt": "", "password": False}, "minimum"),
    ("prompt too long", {"type": "input_request", "n": 1, "prompt": "x" * 5000, "password": False}, "maxLength"),
    (
        "mime type name too long",
        {"type": "iopub", "msg_type": "display_data", "content": {"data": {"x" * 200: ""}}},
        "display_data.data",
    ),
]


@pytest.mark.parametrize("event", VALID_EVENTS, ids=lambda e: e["type"] + "/" + e.get("msg_type", ""))
def test_valid_events_pass(event):
    assert guest_schema.event(json.dumps(event).encode()) == event


@pytest.mark.parametrize(("name", "event", "says"), INVALID_EVENTS, ids=[c[0] for c in INVALID_EVENTS])
def test_invalid_events_are_refused_without_quoting_them(name, event, says):
    payload = event if isinstance(event, bytes) else json.dumps(event).encode()
    with pytest.raises(InvalidGuestMessage) as caught:
        guest_schema.event(payload)
    assert says in str(caught.value)
    assert SECRET not in str(caught.value)


def test_deep_nesting_is_refused():
    deep = {"type": "skill_call", "n": 1, "skill": "S", "method": "m", "args": [], "kwargs": {}}
    value: list = []
    for _ in range(100):
        value = [value]
    deep["args"] = value
    with pytest.raises(InvalidGuestMessage, match="nested deeper"):
        guest_schema.event(json.dumps(deep).encode())
    with pytest.raises(InvalidGuestMessage, match="nested deeper"):  # refused before anything is built
        guest_schema.event(b"[" * 100_000 + b"]" * 100_000)


def test_brackets_inside_strings_are_not_nesting():
    brackets = '[{"\\"' * 1000  # brackets, quotes and escapes, all inside one string
    event = {"type": "input_request", "n": 1, "prompt": brackets[:4000], "password": False}
    assert guest_schema.event(json.dumps(event).encode())["prompt"] == brackets[:4000]
    assert not guest_schema.too_deep(b'{"a": [1, [2, {"b": "[[[[[[[["}]]}', limit=4)
    assert guest_schema.too_deep(b'{"a": [1, [2, {"b": [[]]}]]}', limit=4)


@pytest.mark.parametrize(
    ("op", "reply", "ok"),
    [
        ("execute", {"status": "ok", "user_expressions": {}, "payload": []}, True),
        (
            "execute",
            {"status": "error", "ename": "E", "evalue": "v", "traceback": [], "user_expressions": {}, "payload": []},
            True,
        ),
        ("execute", {"status": "error", "user_expressions": {}, "payload": []}, False),  # an error names itself
        ("execute", {"status": "bogus", "user_expressions": {}, "payload": []}, False),
        ("execute", {"status": "ok", "user_expressions": {}, "payload": [{"source": "run_shell"}]}, False),
        ("complete", {"status": "ok", "matches": ["a"], "cursor_start": 0, "cursor_end": 1, "metadata": {}}, True),
        ("complete", {"status": "ok", "matches": [1], "cursor_start": 0, "cursor_end": 1, "metadata": {}}, False),
        ("inspect", {"status": "ok", "found": True, "data": {"text/plain": "x"}, "metadata": {}}, True),
        ("is_complete", {"status": "incomplete", "indent": "    "}, True),
        ("is_complete", {"status": "idle"}, False),
        ("configure", {"status": "ok"}, True),
        ("shutdown", {"status": "ok"}, False),  # no such request
    ],
)
def test_replies_are_checked_per_request(op, reply, ok):
    payload = json.dumps(reply).encode()
    if ok:
        assert guest_schema.reply(op, payload) == reply
    else:
        with pytest.raises(InvalidGuestMessage):
            guest_schema.reply(op, payload)


def test_every_request_type_has_a_service():
    from sandbox_kernel.protocol.dispatcher import REQUEST_TYPES, GuestServices

    assert set(REQUEST_TYPES) == {
        "input_request", "skill_call", "load_packages", "pip_installed", "pip_uninstalled", "wheelhouse_wheels"
    }  # fmt: skip
    for name in REQUEST_TYPES:
        assert callable(getattr(GuestServices, name))
