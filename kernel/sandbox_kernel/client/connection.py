"""The one seam between the agent API and a kernel: what AsyncSandbox needs of a connection, local or remote.

AsyncSandbox runs every operation (run, input, approvals, interrupts, restarts, checkpoints, files) through a
KernelConnection, so a kernel started here (local_kernel.LocalKernel, over jupyter_client) and one behind a
Jupyter Kernel Gateway or Enterprise Gateway (gateway_kernel.GatewayKernel, over REST and a websocket) take the
same code path.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

Channel = Literal["shell", "iopub", "stdin"]


class KernelDied(RuntimeError):
    """The kernel process itself exited (killed, or out of host memory), or was restarted, while a request was
    waiting on it. The sandbox's state is gone; `restart()` starts a fresh kernel."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # the process's, when it exited (negative: killed by that signal)


class KernelConnection(Protocol):
    """A started kernel, as the agent API drives it."""

    shares_files: bool  # the kernel's checkpoint folder is on this machine (else checkpoints move in parts)

    async def start(self, timeout: float) -> None:
        """Start the kernel and wait (at most `timeout` s) until it answers."""

    def send(
        self,
        channel: Channel,
        msg_type: str,
        content: dict[str, Any],
        parent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Send a message (shell or stdin; `parent`: the header it answers); returns its msg_id."""

    async def receive(self, channel: Channel, timeout: float) -> dict[str, Any]:
        """The next message on `channel`; queue.Empty after `timeout` s (0: only one already here)."""

    async def gone(self) -> KernelDied | None:
        """Why the kernel can no longer answer (its process exited, the gateway lost it), or None."""

    async def interrupt(self) -> None: ...

    async def restart(self, timeout: float) -> None:
        """A fresh kernel process; returns once it answers (at most `timeout` s)."""

    async def close(self) -> None:
        """Shut the kernel down and free what the connection holds (also after a failed start)."""


def execute_content(
    code: str,
    *,
    silent: bool = False,
    store_history: bool = True,
    user_expressions: dict[str, str] | None = None,
    allow_stdin: bool = True,
    stop_on_error: bool = True,
) -> dict[str, Any]:
    """The content of an execute_request (as jupyter_client's KernelClient.execute makes it)."""
    return {
        "code": code,
        "silent": silent,
        "store_history": store_history,
        "user_expressions": user_expressions or {},
        "allow_stdin": allow_stdin,
        "stop_on_error": stop_on_error,
    }
