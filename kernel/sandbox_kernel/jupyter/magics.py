"""The cells the kernel serves itself: `%checkpoint [NAME]` and `%restore NAME` (alone in a cell), and the
`%checkpoint_get / _put / _drop` cells that move checkpoint files in parts (checkpoints/parts.py).

A checkpoint is the guest's state (pickled variables, its own files), sent as BLOB frames and sealed by the kernel
in a file of its private checkpoint folder; a restore starts a fresh sandbox and hands it that state as DATA
frames. Names only, never paths: a cell cannot make the kernel touch a host file of its choosing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_kernel import __version__
from sandbox_kernel.checkpoints import cells as checkpoint_cells
from sandbox_kernel.checkpoints import file as checkpoint_file
from sandbox_kernel.checkpoints import parts as checkpoint_parts
from sandbox_kernel.checkpoints.cells import CheckpointCollector, CheckpointFolder, KernelMagic
from sandbox_kernel.jupyter.cell_runner import CellOutcome, CellRequest, CellRunner, Listen, error_reply, ok_reply
from sandbox_kernel.jupyter.guest_services import PipReplays
from sandbox_kernel.jupyter.output import OutputRouter, guest_text
from sandbox_kernel.protocol.dispatcher import RequestDispatcher
from sandbox_kernel.sandbox.pool import SandboxPool
from sandbox_kernel.sandbox.process import GuestListener, SandboxProcess
from sandbox_kernel.sandbox.supervision import StopCause

MAX_CHECKPOINT_PART = 8 << 20  # bytes of a checkpoint per message, either way


@dataclass
class CheckpointSettings:
    """What the magics need of the kernel's settings."""

    max_bytes: int  # SandboxKernel.max_checkpoint_bytes
    part_bytes: int  # bytes per part, either way: one fits in an event and in a frame
    pyodide_version: str
    mounts: Callable[[], list[str]]  # guest paths of the mounts (not part of a checkpoint)


class KernelMagics:
    """Runs %checkpoint and %restore through the cell runner."""

    def __init__(
        self,
        runner: CellRunner,
        pool: SandboxPool,
        folder: CheckpointFolder,
        pip_replays: PipReplays,
        settings: CheckpointSettings,
    ) -> None:
        self.runner = runner
        self.pool = pool
        self.folder = folder
        self.pip_replays = pip_replays
        self.settings = settings
        self.parts = checkpoint_parts.PartStore(folder, checkpoint_file.max_file_bytes(settings.max_bytes))

    async def run(
        self, code: str, execution_count: int, router: OutputRouter, metadata: dict[str, Any] | None = None
    ) -> CellOutcome | None:
        """The outcome of the cell if the kernel serves it (`metadata`: the request's); None for any other cell."""
        try:
            magic = checkpoint_cells.parse(code)
            part = None if magic is not None else checkpoint_parts.parse(code)
        except checkpoint_cells.MagicUsageError as exc:
            return CellOutcome(error_reply("UsageError", str(exc), router))
        if magic is None and part is None:
            return None
        error = self.runner.settings_error()
        if error:
            return CellOutcome(error_reply("SandboxSettingsError", error, router))
        if part is not None:
            return await self._part(part, metadata or {}, router)
        assert magic is not None
        if magic.command == "restore":
            return await self._restore(magic, execution_count, router)
        if magic.name is None:
            names = self.folder.names()
            router.stream("stdout", f"Checkpoints: {', '.join(names)}\n" if names else "No checkpoints yet.\n")
            return CellOutcome(ok_reply())
        return await self._checkpoint(magic.name, execution_count, router)

    async def _part(
        self, command: checkpoint_parts.PartCommand, metadata: dict[str, Any], router: OutputRouter
    ) -> CellOutcome:
        """%checkpoint_get / _put / _drop: a part of a checkpoint file, in the reply's metadata or from the
        request's (file work in a thread: the kernel's loop goes on)."""
        try:
            if command.command == "get":
                facts = await asyncio.to_thread(self.parts.get, command.name, command.offset)
            elif command.command == "put":
                facts = await asyncio.to_thread(self.parts.put, command, metadata)
            else:
                facts = {"name": command.name}
                await asyncio.to_thread(self.parts.drop, command.name)
        except checkpoint_file.CheckpointError as exc:
            return CellOutcome(error_reply("CheckpointError", str(exc), router))
        return CellOutcome(ok_reply(), facts={checkpoint_parts.METADATA_KEY: facts})

    def _request(self, op: str, execution_count: int, extra: dict[str, Any], listen: Listen) -> CellRequest:
        """A request of the magic's own: silent, not in history, nothing but `extra` in its payload."""
        return CellRequest("", execution_count, silent=True, store_history=False, op=op, extra=extra, listen=listen)

    async def _checkpoint(self, name: str, execution_count: int, router: OutputRouter) -> CellOutcome:
        """%checkpoint NAME: the guest's state, sealed in a file of the kernel's checkpoint folder."""
        folder = self.folder
        if not folder.room_for(name):
            return CellOutcome(
                error_reply(
                    "CheckpointError",
                    f"this kernel already keeps {folder.max_count} checkpoints ({', '.join(folder.names())}; "
                    "SandboxKernel.max_checkpoints): reuse a name to replace one",
                    router,
                )
            )
        collectors: list[CheckpointCollector] = []

        def listen(sandbox: SandboxProcess, dispatcher: RequestDispatcher) -> GuestListener:
            collectors.append(CheckpointCollector(dispatcher, self.settings.max_bytes))
            return collectors[-1]

        extra = {"exclude": self.settings.mounts(), "part_bytes": self.settings.part_bytes}
        outcome = await self.runner.run(self._request("checkpoint", execution_count, extra, listen), router)
        if outcome.reply["status"] != "ok":
            return outcome
        reply, collector = outcome.reply, collectors[-1]
        if collector.too_large:
            outcome.reply = error_reply(
                "CheckpointTooLarge",
                f"the session's state is larger than SandboxKernel.max_checkpoint_bytes={self.settings.max_bytes}"
                "; free some (del large variables, remove files in /tmp) or raise the limit",
                router,
            )
            return outcome
        payload = collector.payload()
        if len(payload) != reply["bytes"]:
            why = f"{len(payload)} of {reply['bytes']} bytes arrived"
            outcome.reply = error_reply("SandboxProtocolError", f"the checkpoint did not arrive whole ({why})", router)
            return outcome
        summary = {k: reply[k] for k in ("variables", "variable_count", "files", "not_kept")}
        header = {
            "name": name,
            "created": time.time(),
            "pyodide": self.settings.pyodide_version,
            "sandbox_kernel": __version__,
            "summary": summary,
            "pip": list(self.pip_replays.installs),
        }
        path = folder.path(name)
        size = await asyncio.to_thread(checkpoint_file.write, path, header, payload)
        left_out = "".join(
            f"\n  not kept: {guest_text(n)} ({guest_text(why)})" for n, why in summary["not_kept"].items()
        )
        router.stream(
            "stdout",
            f"Checkpoint {name!r}: {summary['variable_count']} variables, {summary['files']} files, "
            f"{size / 1e6:.1f} MB.{left_out}\n",
        )
        outcome.facts["checkpoint"] = {"name": name, "path": str(path), "bytes": size, **summary}
        self.pool.expect_restarts("as a checkpoint was taken")  # its restore then finds a sandbox ready
        outcome.reply = ok_reply()
        return outcome

    async def _restore(self, magic: KernelMagic, execution_count: int, router: OutputRouter) -> CellOutcome:
        """%restore NAME: a fresh sandbox, given the checkpoint's state."""
        assert magic.name is not None
        path = self.folder.path(magic.name)
        if not path.is_file():
            names = self.folder.names()
            known = f"this kernel has {', '.join(names)}" if names else "make one with %checkpoint NAME"
            return CellOutcome(error_reply("CheckpointError", f"no checkpoint named {magic.name!r} ({known})", router))
        try:
            header, payload = await asyncio.to_thread(
                checkpoint_file.read, path, self.settings.max_bytes, self.settings.pyodide_version
            )
        except checkpoint_file.CheckpointError as exc:
            return CellOutcome(error_reply("CheckpointError", str(exc), router))
        # The next spare starts once the state is in: booting it meanwhile would take CPU from the restore.
        await self.pool.restart("a checkpoint is being restored", StopCause.INTERRUPT, spare_now=False)
        step = self.settings.part_bytes

        def send(sandbox: SandboxProcess, dispatcher: RequestDispatcher) -> GuestListener:
            sandbox.send_data([payload[start : start + step] for start in range(0, len(payload), step)])
            return dispatcher

        try:
            request = self._request("restore", execution_count, {"exclude": self.settings.mounts()}, send)
            outcome = await self.runner.run(request, router)
        finally:
            self.pool.start_spare()
        reply = outcome.reply
        if reply["status"] != "ok":
            return outcome
        self.pip_replays.installs = [i for i in header.get("pip", []) if isinstance(i, dict)]
        missing = "".join(
            f"\n  not restored: {guest_text(n)} ({guest_text(why)})" for n, why in reply["not_restored"].items()
        )
        router.stream(
            "stdout",
            f"Restored checkpoint {magic.name!r} in a fresh sandbox: {reply['variable_count']} variables, "
            f"{reply['files']} files.{missing}\n",
        )
        outcome.facts["restored"] = {
            "name": magic.name, "variable_count": reply["variable_count"], "files": reply["files"]
        }  # fmt: skip
        outcome.reply = ok_reply()
        return outcome
