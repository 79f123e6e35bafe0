"""sandbox-kernel: a Jupyter kernel that runs Python in a Deno + Pyodide sandbox."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["AsyncSandbox", "Checkpoint", "ExecutionResult", "KernelDied", "Sandbox", "__version__"]


def __getattr__(name: str) -> Any:
    """`from sandbox_kernel import Sandbox, AsyncSandbox, Checkpoint`, imported on first use (the kernel never needs
    them)."""
    if name in ("AsyncSandbox", "KernelDied"):
        from sandbox_kernel.client import agent

        return getattr(agent, name)
    if name == "Sandbox":
        from sandbox_kernel.client.sync_sandbox import Sandbox

        return Sandbox
    if name == "Checkpoint":
        from sandbox_kernel.checkpoints.client import Checkpoint

        return Checkpoint
    if name == "ExecutionResult":
        from sandbox_kernel.client.results import ExecutionResult

        return ExecutionResult
    raise AttributeError(f"module 'sandbox_kernel' has no attribute {name!r}")
