"""LocalKernel: a private kernel process on this machine, started and driven through jupyter_client."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import NoSuchKernel
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

from sandbox_kernel.client.connection import Channel, KernelDied
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME
from sandbox_kernel.provisioner.pooled import NO_POOL
from sandbox_kernel.sandbox import private_folders


class KernelNotInstalled(NoSuchKernel):
    """jupyter_client finds no kernelspec of this name: the message says how to install it."""

    def __str__(self) -> str:
        if self.name == KERNEL_NAME:
            return (
                f"the {KERNEL_NAME} kernel is not installed where Jupyter looks: run `sandbox-kernel install "
                "--sys-prefix` (this environment) or `sandbox-kernel install --user`"
            )
        return f"no kernel named {self.name!r} is installed (`jupyter kernelspec list` shows those that are)"


class LocalKernel:
    """A kernel process of this user's, talking over ZeroMQ unix sockets (IPC) in a 0700 folder: no other user
    can reach them (over TCP any local process could connect, and the kernel warns on every start that TCP is not
    encrypted)."""

    shares_files = True

    def __init__(self, kernel_name: str, arguments: list[str], cwd: str | None, stderr: int | None) -> None:
        self.kernel_name = kernel_name
        self.arguments = arguments  # the kernel's command line: settings as --SandboxKernel.name=value, ...
        self.cwd = cwd
        self.stderr = stderr  # where the kernel process's own stderr goes; None: ours
        self.km: AsyncKernelManager | None = None
        self.kc: Any = None
        self._sockets: Path | None = None
        self._answered = False  # the kernel answered its first request (else closing it kills it at once)

    async def start(self, timeout: float) -> None:
        self._sockets = private_folders.make()
        self.km = AsyncKernelManager(
            kernel_name=self.kernel_name, transport="ipc", ip=str(self._sockets / "kernel"), config=Config(NO_POOL)
        )
        options: dict[str, Any] = {"cwd": self.cwd} if self.cwd else {}
        if self.stderr is not None:
            options["stderr"] = self.stderr
        try:
            await self.km.start_kernel(extra_arguments=self.arguments, **options)
        except NoSuchKernel:
            self.km = None
            raise KernelNotInstalled(self.kernel_name) from None
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=timeout)
        self._answered = True

    def send(
        self,
        channel: Channel,
        msg_type: str,
        content: dict[str, Any],
        parent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        msg = self.kc.session.msg(msg_type, content, parent=parent, metadata=metadata)
        getattr(self.kc, f"{channel}_channel").send(msg)
        return str(msg["header"]["msg_id"])

    async def receive(self, channel: Channel, timeout: float) -> dict[str, Any]:
        msg: dict[str, Any] = await getattr(self.kc, f"get_{channel}_msg")(timeout=timeout)
        return msg

    async def gone(self) -> KernelDied | None:
        assert self.km is not None
        if await self.km.is_alive():
            return None
        code = await self.km.provisioner.poll() if self.km.provisioner else None
        how = f" (exit code {code})" if code is not None else ""
        return KernelDied(
            f"the kernel process exited{how}; the sandbox's state is gone (restart() starts a fresh one)", code
        )

    async def interrupt(self) -> None:
        assert self.km is not None
        await self.km.interrupt_kernel()

    async def restart(self, timeout: float) -> None:
        assert self.km is not None
        await self.km.restart_kernel(now=False)
        await self.kc.wait_for_ready(timeout=timeout)

    async def close(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None and await self.km.is_alive():
            # One that never answered (a start given up on, e.g. a pool closed while it starts one) cannot take a
            # polite shutdown request: it is killed, not waited on.
            await self.km.shutdown_kernel(now=not self._answered)
        elif self.km is not None and self.km.has_kernel:
            await self.km.shutdown_kernel(now=True)  # it died (KernelDied): remove what it left (connection file)
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
