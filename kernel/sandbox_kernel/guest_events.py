"""Checks on what the sandbox sends: guest data is never trusted as protocol."""

from __future__ import annotations

from typing import Any

REPLY_STATUSES = {"ok", "error", "abort", "complete", "incomplete", "invalid", "unknown"}
IOPUB_TYPES = {"display_data", "update_display_data", "execute_result", "clear_output", "error"}


class InvalidGuestEvent(ValueError):
    """The sandbox sent an event that does not have the required shape."""


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise InvalidGuestEvent(what)


def _is_str_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def iopub_content(msg_type: Any, content: Any) -> dict[str, Any]:
    """Return a clean copy of an IOPub message from the guest, or raise InvalidGuestEvent."""
    _require(msg_type in IOPUB_TYPES, f"iopub message type {msg_type!r} is not allowed")
    _require(_is_str_dict(content), "iopub content must be an object")
    if msg_type == "clear_output":
        return {"wait": bool(content.get("wait", False))}
    if msg_type == "error":
        traceback = content.get("traceback", [])
        _require(
            isinstance(traceback, list) and all(isinstance(t, str) for t in traceback),
            "traceback must be a list of strings",
        )
        _require(
            isinstance(content.get("ename"), str) and isinstance(content.get("evalue"), str),
            "ename and evalue must be strings",
        )
        return {"ename": content["ename"], "evalue": content["evalue"], "traceback": traceback}
    data = content.get("data", {})
    metadata = content.get("metadata", {})
    _require(_is_str_dict(data), "data must be an object keyed by mime type")
    _require(_is_str_dict(metadata), "metadata must be an object")
    clean: dict[str, Any] = {"data": data, "metadata": metadata}
    if msg_type == "execute_result":
        count = content.get("execution_count")
        _require(isinstance(count, int), "execute_result needs an integer execution_count")
        clean["execution_count"] = count
    else:
        transient = content.get("transient", {})
        _require(_is_str_dict(transient), "transient must be an object")
        clean["transient"] = transient
        if msg_type == "update_display_data":
            _require(isinstance(transient.get("display_id"), str), "update_display_data needs transient.display_id")
    return clean


def input_request(event: dict[str, Any]) -> tuple[int, str, bool]:
    """(reply number, prompt, password) of a guest input request."""
    number = event.get("n")
    _require(isinstance(number, int), "input_request needs an integer n")
    return number, str(event.get("prompt", "")), bool(event.get("password", False))


def reply_content(content: Any) -> dict[str, Any]:
    """A request's reply from the guest: an object with a valid status."""
    _require(_is_str_dict(content), "reply content must be an object")
    _require(content.get("status") in REPLY_STATUSES, f"reply status must be one of {sorted(REPLY_STATUSES)}")
    return content
