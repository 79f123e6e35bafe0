"""The frontend's comm messages (widgets), relayed to the sandbox's comm manager; comm_info from the kernel's record.

The frontend is trusted: its comm_open, comm_msg and comm_close go to the guest as `comm` requests, run as a
cell's code runs (interrupts and cell_timeout apply; one request at a time, after a running cell). What the
guest sends back comes through the widget guard (widget_guard.py), like all of its output.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from sandbox_kernel.jupyter.cell_runner import CellRequest, CellRunner
from sandbox_kernel.jupyter.widget_guard import WidgetGuard

COMM_MESSAGES = ("comm_open", "comm_msg", "comm_close")


class CommRelay:
    """Shell handlers for comm_open, comm_msg and comm_close, and comm_info_request's answer."""

    def __init__(self, runner: CellRunner, widgets: WidgetGuard) -> None:
        self.runner = runner
        self.widgets = widgets
        self._later: set[asyncio.Task[None]] = set()

    async def relay(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """Hand one frontend comm message to the guest (no reply: the protocol has none).

        While a cell runs, ipykernel hands comm messages over at once, outside its own order; such a message is
        served in the background once the cell is done, so that this handler returns at once (ipykernel restores
        its notion of the current request when it does, and waiting here would cross the next cell's)."""
        if self.runner.busy:
            task = asyncio.ensure_future(self._serve(parent))  # in a copy of this context: this request its parent
            self._later.add(task)
            task.add_done_callback(self._later.discard)
            return
        await self._serve(parent)

    async def _serve(self, parent: dict[str, Any]) -> None:
        msg_type = parent["header"]["msg_type"]
        content = parent.get("content") or {}
        self.widgets.from_frontend(msg_type, content)
        payload = {
            "msg_type": msg_type,
            "content": content,
            "metadata": parent.get("metadata") or {},
            "buffers": [base64.b64encode(bytes(buffer)).decode("ascii") for buffer in parent.get("buffers") or []],
            "msg_id": parent["header"].get("msg_id", ""),
        }
        request = CellRequest("", self.runner.next_count(), silent=True, store_history=False, op="comm", extra=payload)
        router = self.runner.channels.router()
        try:
            await self.runner.run(request, router)
        finally:
            router.flush()

    def comm_info(self, content: dict[str, Any]) -> dict[str, Any]:
        target = content.get("target_name")
        return {"status": "ok", "comms": self.widgets.comm_info(target if isinstance(target, str) else None)}
