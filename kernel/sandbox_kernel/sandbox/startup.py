"""What starting one sandbox process takes, before it serves requests.

Its options, the launch plan made from them, the private socket that accepts its one connection, the draining of
Deno's own output, and the words for a start that fails: the OS layers it could not have, or how the process ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket as sockets
from collections.abc import Iterable, MutableSequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from sandbox_kernel import paths
from sandbox_kernel.jupyter.output import guest_text
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.launch_plan import LaunchPlan
from sandbox_kernel.sandbox.mounts import Mount
from sandbox_kernel.sandbox.oslayers.spec import LAYERS

OUT_OF_MEMORY_MARKS = ("out of memory", "heap limit", "Out of memory", "allocation failed")
SOCKET_READ_LIMIT = 1 << 20  # the stream reader's buffer for the private socket


class SandboxStartError(RuntimeError):
    """The sandbox could not be started; the message says why."""


@dataclass
class SandboxOptions:
    """Settings of one sandbox process (filled from the kernel's traitlets and its provisioning)."""

    pyodide_dir: Path  # the cached Pyodide, checked by the caller
    guest_site: Path  # the guest's extracted wheels
    start_timeout: float = 120.0
    ring_bytes: int = 4 << 20
    reply_bytes: int = 1 << 20
    max_frame_bytes: int = 64 << 20
    max_event_bytes: int = 32 << 20
    v8_flags: list[str] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    allow_net: list[str] = field(default_factory=list)
    ca_pem: bytes | None = None  # CA certificates TLS trusts besides Deno's own (sandbox/tls_trust.py)
    ca_store: str | None = None  # DENO_TLS_CA_STORE, when the host names a valid one
    memory_limit_mb: int = 1024
    packages_site: Path | None = None  # SandboxKernel.packages, unpacked once on the host (read-only)
    extra_read: list[Path] = field(default_factory=list)  # that folder and the folder of Pyodide packages
    pyodide_lock: str | None = None  # lock file contents of SandboxKernel.pyodide_index
    pyodide_packages: Path | None = None  # where the host puts Pyodide package files for the guest
    use_snapshot: bool = True
    os_sandbox: str = "auto"  # auto | required | off
    os_layers: list[str] = field(default_factory=lambda: list(LAYERS))


def launch_plan(options: SandboxOptions, private: Path, snapshot: Path | None) -> LaunchPlan:
    """The plan of one sandbox: what it may read, write and reach, and how it is launched."""
    return LaunchPlan(
        host=paths.host_dir(),
        pyodide=options.pyodide_dir,
        wheels=provision.wheels_dir(),
        snapshots=provision.snapshot_path().parent,
        extra_read=list(options.extra_read),
        mounts=list(options.mounts),
        allow_net=list(options.allow_net),
        ca_pem=options.ca_pem,
        ca_store=options.ca_store,
        private=private,
        shared_deno_dir=provision.deno_dir(),
        memory_limit_mb=options.memory_limit_mb,
        v8_flags=list(options.v8_flags),
        os_sandbox=options.os_sandbox,
        os_layers=list(options.os_layers),
        guest_site=options.guest_site,
        snapshot=snapshot,
        packages_site=options.packages_site,
        pyodide_lock=options.pyodide_lock,
        pyodide_packages=options.pyodide_packages,
        ring_bytes=options.ring_bytes,
        reply_bytes=options.reply_bytes,
        max_frame_bytes=options.max_frame_bytes,
        max_event_bytes=options.max_event_bytes,
    )


def layers_refusal(report: dict[str, Any], os_sandbox: str) -> SandboxStartError | None:
    """The error for a launcher that refused to start (an OS layer it could not apply), with the setting to change."""
    if "refused" not in report:
        return None
    fix = (
        "Set SandboxKernel.os_sandbox='auto' to run with the layers this system has, or leave the missing "
        "one out of SandboxKernel.os_layers."
        if os_sandbox == "required"
        else "Leave that layer out of SandboxKernel.os_layers, or set SandboxKernel.os_sandbox='off'."
    )
    return SandboxStartError(f"{report['refused']}. {fix}")


def exit_reason(code: int, output_tail: Iterable[str], memory_limit_mb: int) -> str:
    """Why a sandbox process ended on its own: out of memory, by Deno's last lines (guest code can print those
    too, so they only word the reason), or its exit code."""
    if any(mark in line for line in output_tail for mark in OUT_OF_MEMORY_MARKS):
        return (
            f"the sandbox ran out of memory (SandboxKernel.memory_limit_mb={memory_limit_mb}; raise it to allow more)"
        )
    return describe_exit(code)


def describe_exit(code: int) -> str:
    """How a sandbox process ended, from its exit code, in words."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (likely out of memory)" if -code == signal.SIGKILL else ""
        return f"the sandbox process was killed by {name}{hint}"
    return f"the sandbox process exited with code {code}"


async def drain_output(stream: asyncio.StreamReader | None, tail: MutableSequence[str], log: logging.Logger) -> None:
    """Drain Deno's stdout or stderr (guest code can write there): log it and keep its last lines, never parse it.

    Read in chunks, not lines, so that no line length can stop the draining (a full pipe would block the sandbox).
    """
    if stream is None:
        return
    partial = b""
    while chunk := await stream.read(1 << 16):
        lines = (partial + chunk).split(b"\n")
        partial = lines.pop()[-4096:]
        for line in lines:
            text = line[:4096].decode(errors="replace").rstrip()
            tail.append(text)
            log.debug("sandbox: %s", guest_text(text, 4096))  # the guest's words: one line, nothing hidden


class OneConnection:
    """The private socket (mode 0600) that accepts the sandbox's one connection; any later one is closed.

    Used as `async with`: on the way out the listening socket is closed and its file removed. `listener`: the
    socket already bound and listening (by spawn.spawn(), before the sandbox was started), else it is made here.
    """

    def __init__(self, socket: Path, listener: sockets.socket | None = None) -> None:
        self.socket = socket
        self._listener = listener
        self.accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )
        self._server: asyncio.Server | None = None

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.accepted.done():
            writer.close()
        else:
            self.accepted.set_result((reader, writer))

    async def __aenter__(self) -> OneConnection:
        if self._listener is not None:
            self._server = await asyncio.start_unix_server(
                self._on_connect, sock=self._listener, limit=SOCKET_READ_LIMIT
            )
        else:
            self._server = await asyncio.start_unix_server(
                self._on_connect, path=str(self.socket), limit=SOCKET_READ_LIMIT
            )
            os.chmod(self.socket, 0o600)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
        self.socket.unlink(missing_ok=True)
        if not self.accepted.done():
            self.accepted.cancel()
