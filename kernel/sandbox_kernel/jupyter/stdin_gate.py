"""The kernel's stdin channel: one prompt open at a time, and a reply counts only for the prompt it answers."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import zmq
from jupyter_client.session import Session


async def _readable(sock: zmq.Socket[Any]) -> None:
    """Wait, without blocking the event loop, until `sock` has a message."""
    loop = asyncio.get_running_loop()
    fd = _int_option(sock, zmq.FD)
    while not _int_option(sock, zmq.EVENTS) & zmq.POLLIN:  # also re-arms zmq's edge-triggered FD
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _set, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


def _int_option(sock: zmq.Socket[Any], option: int) -> int:
    value = sock.getsockopt(option)
    assert isinstance(value, int)  # FD and EVENTS are integer options
    return value


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class StdinGate:
    """Sends input_request messages one at a time and takes only the reply that answers the open one.

    A reply must name the open request as its parent, or name none (jupyter_client's `input()`
    sends none); a reply to an older prompt is dropped. So concurrent prompts (a guest's own
    `input()` racing skill approvals) can never take each other's answers.
    """

    def __init__(self, session: Session, socket: zmq.Socket[Any], log: logging.Logger) -> None:
        self.session = session
        self.socket = socket
        self.log = log
        self._lock = asyncio.Lock()

    async def ask(
        self, prompt: str, password: bool, ident: Any, parent: Any, metadata: dict[str, Any] | None = None
    ) -> str:
        """The person's answer to `prompt` (cancellable: an interrupt abandons the prompt)."""
        async with self._lock:
            self._drop_stale()
            sent = self.session.send(
                self.socket,
                "input_request",
                {"prompt": prompt, "password": password},
                parent,
                ident=ident,
                metadata=metadata or {},
            )
            assert sent is not None  # Session.send returns None only when sending nothing
            asked = sent["header"]["msg_id"]
            while True:
                await _readable(self.socket)
                _, reply = self.session.recv(self.socket, zmq.NOBLOCK)
                if reply is None:
                    continue
                answers = reply.get("parent_header", {}).get("msg_id")
                if reply.get("msg_type") != "input_reply" or answers not in (None, asked):
                    self.log.warning("dropped a stdin reply that does not answer the open prompt")
                    continue
                return str(reply.get("content", {}).get("value", ""))

    def _drop_stale(self) -> None:
        while True:
            try:
                self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
