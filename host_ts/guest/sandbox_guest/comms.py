"""Jupyter comms in the sandbox (what ipywidgets, tqdm.notebook and other widget libraries talk over).

The `comm` package's create_comm/get_comm_manager are bound here, as ipykernel binds them: a comm the guest
opens or messages is an IOPub event to the kernel (which checks it before the frontend sees it), and the
frontend's comm messages arrive as the kernel's `comm` requests (serve). `get_ipython().kernel` answers
get_parent() with the kernel request being served, so ipywidgets' Output widget captures the right output.
"""

from __future__ import annotations

import base64
from typing import Any

import comm
from comm.base_comm import BaseComm, BuffersType, CommManager, MaybeDict

from . import _host
from ._protocol import Event

MAX_BUFFERS = 64  # binary buffers in one comm message (the kernel refuses more)


def _encoded(buffers: BuffersType) -> list[str]:
    return [base64.b64encode(bytes(buffer)).decode("ascii") for buffer in buffers or []]


class SandboxComm(BaseComm):
    """A comm whose messages go to the kernel as IOPub events."""

    def publish_msg(
        self,
        msg_type: str,
        data: MaybeDict = None,
        metadata: MaybeDict = None,
        buffers: BuffersType = None,
        **keys: Any,
    ) -> None:
        content = {"data": {} if data is None else data, "comm_id": self.comm_id, **keys}
        event: dict[str, Any] = {"type": Event.IOPUB, "msg_type": msg_type, "content": content}
        if metadata:
            event["metadata"] = metadata
        if buffers:
            event["buffers"] = _encoded(buffers)
        _host.emit(event)


class KernelStandIn:
    """What libraries look up on `get_ipython().kernel`: the request being served (get_parent) and the comms."""

    def __init__(self, manager: CommManager) -> None:
        self.comm_manager = manager
        self.parent_id = ""

    def get_parent(self, channel: str = "shell") -> dict[str, Any]:
        return {"header": {"msg_id": self.parent_id}} if self.parent_id else {}


_manager = CommManager()
KERNEL = KernelStandIn(_manager)


def _create_comm(*args: Any, **kwargs: Any) -> BaseComm:
    return SandboxComm(*args, **kwargs)


def _get_comm_manager() -> CommManager:
    return _manager


def install(shell: Any) -> None:
    """Bind the comm package to this sandbox, and give the shell its `kernel`."""
    comm.create_comm = _create_comm
    comm.get_comm_manager = _get_comm_manager
    shell.kernel = KERNEL


def serve(req: dict[str, Any]) -> dict[str, Any]:
    """A frontend's comm_open, comm_msg or comm_close, handed to the comm manager."""
    msg_type = req["msg_type"]
    buffers = [memoryview(base64.b64decode(text)) for text in req.get("buffers") or []]
    message = {
        "header": {"msg_id": req.get("msg_id", ""), "msg_type": msg_type},
        "parent_header": {},
        "metadata": req.get("metadata") or {},
        "content": req["content"],
        "buffers": buffers,
    }
    handler = {"comm_open": _manager.comm_open, "comm_msg": _manager.comm_msg, "comm_close": _manager.comm_close}
    handler[msg_type](None, None, message)  # type: ignore[arg-type]
    return {"status": "ok"}
