"""Where a request's traffic goes: output to the frontend's IOPub channel, prompts to its stdin channel, the
sandbox's requests to the kernel's services (skills, packages, input). Made per request, for its parent message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox_kernel.jupyter.guest_services import GuestServiceDesk, PipReplays, RequestContext
from sandbox_kernel.jupyter.output import OutputRouter, Send
from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.jupyter.stdin_gate import StdinGate
from sandbox_kernel.jupyter.widget_guard import WidgetGuard
from sandbox_kernel.packages import index as packages
from sandbox_kernel.packages.wheelhouse import PipWheelhouse
from sandbox_kernel.protocol.dispatcher import RequestDispatcher
from sandbox_kernel.sandbox.process import SandboxProcess
from sandbox_kernel.skills.calls import SkillService

if TYPE_CHECKING:
    from ipykernel.kernelbase import Kernel


class KernelChannels:
    """The routes of the kernel's current request (what ipykernel's Kernel knows: session, sockets, parent)."""

    def __init__(  # what one request's routes are made of: a constructor, not a call site
        self,
        kernel: Kernel,
        sanitizer: OutputSanitizer,
        skills: SkillService,
        pip_replays: PipReplays,
        pyodide_index: Callable[[], packages.PyodideIndex | None],
        max_output_bytes: int,
        request_bytes: int,
        widgets: WidgetGuard,
        pip_wheelhouse: Callable[[], PipWheelhouse | None] = lambda: None,
    ) -> None:
        self.kernel = kernel
        self.pip_wheelhouse = pip_wheelhouse
        self.widgets = widgets  # the open comms, and the rules for widget state
        self.sanitizer = sanitizer
        self.skills = skills
        self.pip_replays = pip_replays
        self.pyodide_index = pyodide_index
        self.max_output_bytes = max_output_bytes
        self.request_bytes = request_bytes  # the largest request the guest's glue makes
        self.stdin: StdinGate | None = None  # set once the kernel's sockets exist (Kernel.start)

    def router(self) -> OutputRouter:
        """Output of the current request, on IOPub, within max_output_bytes."""
        return OutputRouter(self._publisher(), self.max_output_bytes)

    def _publisher(self) -> Send:
        kernel = self.kernel
        parent = kernel.get_parent("shell")

        def send(
            msg_type: str, content: dict[str, Any], metadata: dict[str, Any], buffers: list[bytes] | None = None
        ) -> None:
            assert kernel.session is not None
            topic = kernel._topic(f"stream.{content['name']}" if msg_type == "stream" else msg_type)
            kernel.session.send(
                kernel.iopub_socket,
                msg_type,
                content,
                parent,
                ident=topic,
                metadata=metadata,
                buffers=list(buffers or []) or None,
            )

        return send

    async def ask(self, prompt: str, password: bool, ident: Any, parent: Any, metadata: dict[str, Any] | None) -> str:
        """The person's answer on the stdin channel (one prompt at a time)."""
        assert self.stdin is not None
        return await self.stdin.ask(prompt, password, ident, parent, metadata)

    def dispatcher(
        self, router: OutputRouter, sandbox: SandboxProcess, allow_stdin: bool, in_cell: bool, execution_count: int
    ) -> RequestDispatcher:
        """What handles the sandbox's events and requests while it serves one request."""
        kernel = self.kernel
        context = RequestContext(
            allow_stdin=allow_stdin,
            in_cell=in_cell,
            execution_count=execution_count,
            ident=kernel._get_shell_context_var(kernel._shell_parent_ident),
            parent=kernel.get_parent("shell"),
        )

        async def ask(prompt: str, password: bool, ident: Any, parent: Any, metadata: dict[str, Any] | None) -> str:
            router.flush()  # what the cell printed before the prompt reaches the frontend first
            await iopub_sent(kernel.iopub_socket)
            return await self.ask(prompt, password, ident, parent, metadata)

        desk = GuestServiceDesk(
            context,
            ask,
            lambda text: router.notice(text, "approval_view", "stdout"),
            self.skills,
            self.pyodide_index(),
            self.pip_replays,
            self.pip_wheelhouse(),
        )
        return RequestDispatcher(
            router,
            self.sanitizer,
            desk,
            sandbox.answer,
            kernel.log,
            self.request_bytes,
            on_broken=lambda why: sandbox.kill_soon(f"it broke the protocol ({why})"),
            widgets=self.widgets,
        )


IOPUB_FLUSH_TIMEOUT = 10.0  # seconds, as ipykernel's OutStream.flush_timeout: a stuck IOPub thread never hangs a prompt


async def iopub_sent(iopub_socket: Any) -> None:
    """Return once ipykernel's IOPub thread has sent every message queued before this call.

    The kernel publishes through a background thread, but sends input_request on its stdin socket directly; without
    this wait, a prompt can overtake the output printed before it (seen under load: `name? ` before the print)."""
    thread = getattr(iopub_socket, "io_thread", None)
    if thread is None or thread.thread is None or not thread.thread.is_alive():
        return  # no IOPub thread: messages were sent as they were made
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    thread.schedule(lambda: loop.call_soon_threadsafe(_settle, done))  # runs after everything queued before it
    try:
        await asyncio.wait_for(done, IOPUB_FLUSH_TIMEOUT)
    except asyncio.TimeoutError:  # (not yet the builtin TimeoutError on Python 3.10)
        pass  # the prompt goes anyway: a late print is better than a prompt nobody sees


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
