"""sandbox-kernel: a Jupyter kernel that runs Python in a Deno + Pyodide sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time each is imported on first use (below)
    from sandbox_kernel.checkpoints.client import Checkpoint
    from sandbox_kernel.client.agent import AsyncSandbox, GatewayError, KernelDied, SandboxSettingsError
    from sandbox_kernel.client.approvals import ApprovalRequest
    from sandbox_kernel.client.pool import AsyncSandboxPool
    from sandbox_kernel.client.results import ExecutionResult
    from sandbox_kernel.client.sync_sandbox import Sandbox

__version__ = "0.1.0"
__all__ = [
    "ApprovalRequest",
    "AsyncSandbox",
    "AsyncSandboxPool",
    "Checkpoint",
    "ExecutionResult",
    "GatewayError",
    "KernelDied",
    "Sandbox",
    "SandboxSettingsError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """`from sandbox_kernel import Sandbox, AsyncSandbox, AsyncSandboxPool, Checkpoint, ...`, imported on first use (the kernel never needs
    them)."""
    if name in ("AsyncSandbox", "GatewayError", "KernelDied", "SandboxSettingsError"):
        from sandbox_kernel.client import agent

        return getattr(agent, name)
    if name == "AsyncSandboxPool":
        from sandbox_kernel.client.pool import AsyncSandboxPool

        return AsyncSandboxPool
    if name == "Sandbox":
        from sandbox_kernel.client.sync_sandbox import Sandbox

        return Sandbox
    if name == "ApprovalRequest":
        from sandbox_kernel.client.approvals import ApprovalRequest

        return ApprovalRequest
    if name == "Checkpoint":
        from sandbox_kernel.checkpoints.client import Checkpoint

        return Checkpoint
    if name == "ExecutionResult":
        from sandbox_kernel.client.results import ExecutionResult

        return ExecutionResult
    raise AttributeError(f"module 'sandbox_kernel' has no attribute {name!r}")
