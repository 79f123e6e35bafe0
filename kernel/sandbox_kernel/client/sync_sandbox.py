"""`Sandbox`: the agent API for code without an event loop, the synchronous twin of AsyncSandbox."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_kernel.checkpoints.client import Checkpoint
from sandbox_kernel.client.agent import AsyncSandbox, SandboxOptions
from sandbox_kernel.client.results import ExecutionResult

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")


class Sandbox:
    """The synchronous twin of AsyncSandbox (it drives one in a background event loop)."""

    def __init__(self, **options: Unpack[SandboxOptions]) -> None:
        """Keywords as for AsyncSandbox: every kernel setting (checked here: SandboxSettingsError), and the API's."""
        self._async = AsyncSandbox._for("Sandbox", options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandbox-loop", daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def start(self) -> Sandbox:
        """Start the kernel (once: a started sandbox, e.g. from fork(), may then be used with `with`)."""
        try:
            self._call(self._async.start())
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._call(self._async.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def run(self, code: str, **kwargs: Any) -> ExecutionResult:
        return self._call(self._async.run(code, **kwargs))

    def facts(self) -> dict[str, Any]:
        return self._call(self._async.facts())

    def os_layers(self) -> dict[str, Any]:
        return self._call(self._async.os_layers())

    def interrupt(self) -> None:
        self._call(self._async.interrupt())

    def restart(self) -> None:
        self._call(self._async.restart())

    def upload(self, host_path: str | Path, guest_path: str) -> int:
        return self._call(self._async.upload(host_path, guest_path))

    def download(self, guest_path: str, max_bytes: int | None = None) -> bytes:
        return self._call(self._async.download(guest_path, max_bytes))

    def checkpoint(self, name: str | None = None) -> Checkpoint:
        return self._call(self._async.checkpoint(name))

    def restore(self, checkpoint: Checkpoint) -> None:
        self._call(self._async.restore(checkpoint))

    def fork(self) -> Sandbox:
        """A second sandbox, with this one's settings, started from this one's state now."""
        return Sandbox.from_checkpoint(self.checkpoint(), **self._async._settings)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, **options: Unpack[SandboxOptions]) -> Sandbox:
        """A new sandbox (keywords as for Sandbox) started from `checkpoint`."""
        sandbox = cls(**options).start()
        try:
            sandbox.restore(checkpoint)
        except BaseException:
            sandbox.close()
            raise
        return sandbox
