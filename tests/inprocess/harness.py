"""The kernel in this process, its sandbox a FakeSandbox: protocol behaviour tested in milliseconds.

As ipykernel's in-process kernel does: the real SandboxKernel (settings, cell runner, supervision, pool,
dispatcher, magics, output budget and sanitizer), only the sandbox process and the frontend's sockets are
stand-ins. IOPub messages are captured as they are sent; stdin prompts are answered from a list.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.session import Session

from inprocess.fake_sandbox import FakeSandbox
from sandbox_kernel.jupyter.kernel import SandboxKernel


@dataclass
class Cell:
    """What one execute_request produced."""

    reply: dict[str, Any]
    outputs: list[tuple[str, dict[str, Any], dict[str, Any]]]  # (msg_type, content, metadata) on IOPub
    metadata: dict[str, Any] = field(default_factory=dict)  # the reply's sandbox_kernel metadata

    def stream(self, name: str = "stdout") -> str:
        return "".join(c["text"] for t, c, _ in self.outputs if t == "stream" and c["name"] == name)

    def of_type(self, msg_type: str) -> list[dict[str, Any]]:
        return [c for t, c, _ in self.outputs if t == msg_type]


class FakeStdin:
    """Answers prompts in order; remembers what was asked."""

    def __init__(self) -> None:
        self.answers: list[str] = []
        self.prompts: list[str] = []

    async def ask(self, prompt: str, password: bool, ident: Any, parent: Any, metadata: Any = None) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


class InProcessKernel:
    """A SandboxKernel with fake sandboxes; use inside one event loop (`async with`)."""

    def __init__(self, *, hold_starts: bool = False, **settings: Any) -> None:
        self.sandboxes: list[FakeSandbox] = []
        self._launched = asyncio.Event()
        self.starts_allowed = asyncio.Event()  # with hold_starts, each sandbox start waits until this is set
        if not hold_starts:
            self.starts_allowed.set()
        self.session = Session(key=b"")
        self.sent: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.session.send = self._capture  # type: ignore[method-assign]
        self.kernel = SandboxKernel(
            session=self.session, sandbox_launch=self._launch, log=logging.getLogger("inprocess"), **settings
        )
        self.stdin = FakeStdin()
        self.kernel._channels.stdin = self.stdin  # type: ignore[assignment]

    async def _launch(self) -> FakeSandbox:
        await self.starts_allowed.wait()  # a slow start (a loaded machine) when the test holds it
        sandbox = FakeSandbox()
        self.sandboxes.append(sandbox)
        self._launched.set()
        return sandbox

    def _capture(self, stream: Any, msg_type: str, content: Any = None, parent: Any = None, **kwargs: Any) -> dict:
        self.sent.append((msg_type, content, kwargs.get("metadata") or {}))
        return {"header": {"msg_id": str(len(self.sent))}}

    async def __aenter__(self) -> InProcessKernel:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.kernel.do_shutdown(False)
        for sandbox in self.sandboxes:
            sandbox.kill_now()

    async def execute(self, code: str, **options: Any) -> Cell:
        first = len(self.sent)
        reply = await self.kernel.do_execute(code, options.pop("silent", False), **options)
        return Cell(reply, self.sent[first:], dict(self.kernel._reply_metadata))

    async def execute_and_interrupt(self, code: str, times: int = 1) -> Cell:
        """Run `code` and send SIGINT (as Jupyter's interrupt does) `times` once its script has begun."""
        cell = asyncio.ensure_future(self.execute(code))
        started = asyncio.ensure_future(self._running())
        await asyncio.wait({cell, started}, return_when=asyncio.FIRST_COMPLETED)
        for _ in range(times if started.done() else 0):
            self.kernel._runner.on_sigint()
            await asyncio.sleep(0)  # let the runner take it (an event loop turn, not a wait for time)
        started.cancel()
        return await cell

    async def _running(self) -> None:
        await self._launched.wait()
        await self.sandboxes[-1].running.wait()


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 30))
