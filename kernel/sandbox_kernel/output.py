"""Publishes one request's guest output on IOPub, coalescing stream text."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from . import guest_events

FLUSH_INTERVAL = 0.05  # seconds: stream text reaches the frontend at least this often


class OutputRouter:
    """Turns the events of one request into IOPub messages, in order."""

    def __init__(
        self,
        send: Callable[[str, dict[str, Any]], None],
        log: logging.Logger,
        on_request: Callable[[dict[str, Any]], None] | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._send = send
        self._log = log
        self._on_request = on_request
        self._streams: list[list[str]] = []  # [name, text] segments not yet sent
        self._timer: asyncio.TimerHandle | None = None
        self.last_result_text: str | None = None
        self._budget = max_bytes
        self._max_bytes = max_bytes
        self.truncated = False

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "stream":
            text = event["text"]
            if self._budget is not None and not self.truncated and len(text.encode()) > self._budget:
                text = text.encode()[: self._budget].decode(errors="ignore")  # what still fits
                self._stream(event["name"], text)
                self._spend(self._budget + 1)
            elif self._spend(len(text.encode())):
                self._stream(event["name"], text)
            return
        try:
            if kind == "iopub":
                content = guest_events.iopub_content(event.get("msg_type"), event.get("content"))
                if event["msg_type"] not in ("error", "clear_output") and not self._spend(len(json.dumps(content))):
                    return
                self.flush()
                if event["msg_type"] == "execute_result":
                    self.last_result_text = content["data"].get("text/plain")
                self._send(event["msg_type"], content)
            elif (
                kind in ("input_request", "skill_call", "load_packages", "pip_installed")
                and self._on_request is not None
            ):
                self.flush()
                self._on_request(event)
            else:
                raise guest_events.InvalidGuestEvent(f"unknown event type {kind!r}")
        except guest_events.InvalidGuestEvent as exc:
            self._log.warning("dropped an invalid message from the sandbox: %s", exc)

    def _spend(self, size: int) -> bool:
        """Whether output of `size` bytes still fits this cell's max_output_bytes."""
        if self._budget is None:
            return True
        if not self.truncated and size <= self._budget:
            self._budget -= size
            return True
        if not self.truncated:
            self.truncated = True
            self.notice(
                f"\n[output truncated: this cell's output passed max_output_bytes={self._max_bytes} bytes; "
                "the rest is dropped. Raise the limit with SandboxKernel.max_output_bytes.]\n"
            )
        return False

    def _stream(self, name: str, text: str) -> None:
        if self._streams and self._streams[-1][0] == name:
            self._streams[-1][1] += text
        else:
            self._streams.append([name, text])
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_INTERVAL, self.flush)

    def set_request_handler(self, on_request: Callable[[dict[str, Any]], None]) -> None:
        """Where the guest's blocking requests (input(), skill calls) go."""
        self._on_request = on_request

    def publish(self, msg_type: str, content: dict[str, Any]) -> None:
        """A message from the kernel itself, after any pending stream text."""
        self.flush()
        self._send(msg_type, content)

    def notice(self, text: str, name: str = "stderr") -> None:
        """A message from the kernel itself, shown as stream output."""
        self._stream(name, text)
        self.flush()

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        segments, self._streams = self._streams, []
        for name, text in segments:
            self._send("stream", {"name": name, "text": text})
