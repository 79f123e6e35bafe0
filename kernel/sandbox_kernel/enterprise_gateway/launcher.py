"""`sandbox-kernel launch-eg`: this kernel for Jupyter Enterprise Gateway's remote process proxies.

What EG's own launchers do, for this kernel: pick the kernel's ports from EG's port range, start the kernel
(jupyter_client's AsyncKernelManager, with this package's kernelspec) on a connection file in a private folder,
send the connection info, sealed with EG's public key, to EG's response address together with a comm port, then
take EG's requests on that port (comm.py) until the kernel exits; the launcher exits with it. SIGTERM and SIGHUP
stop the kernel cleanly, SIGINT interrupts it, as the comm port's requests do. The kernel's parent is the launcher
(JPY_PARENT_PID), so a launcher that is killed takes the kernel with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets.config import Config

from sandbox_kernel import paths
from sandbox_kernel.enterprise_gateway import arguments, ports
from sandbox_kernel.enterprise_gateway.comm import CommListener, Request
from sandbox_kernel.enterprise_gateway.payload import seal
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME, kernel_json
from sandbox_kernel.provisioner.pooled import NO_POOL

STOP_SECONDS = 10.0  # a clean stop: shutdown_request, SIGTERM at half of it, SIGKILL at its end (jupyter_client)
GRACE_SECONDS = 2.0  # EG sends the kernel its shutdown_request before it asks the launcher to stop: time to end
SEND_SECONDS = 30.0  # to reach EG's response address and send the connection info
WATCH_SECONDS = 0.2  # how often the kernel process is looked at while nothing is asked
JUPYTER_CHANNELS = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")

log = logging.getLogger("sandbox_kernel.launch_eg")


class ThisKernelSpec(KernelSpecManager):
    """Only this package's kernelspec, for the launcher's own Python: the launcher runs no other kernel."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(resource_dir=str(paths.kernelspec_dir()), **kernel_json())


async def send_connection_info(host: str, port: int, data: bytes) -> None:
    """EG's response socket reads until the sender closes: connect, write, close."""
    _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), SEND_SECONDS)
    try:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), SEND_SECONDS)
    finally:
        writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), SEND_SECONDS)


class Launcher:
    """One kernel for EG, from its start to its end."""

    def __init__(self, args: arguments.LaunchArguments) -> None:
        self.args = args
        self.stop_requested = asyncio.Event()
        self.kill = False
        self.km: AsyncKernelManager | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.told_eg = False  # the connection info reached EG's response address

    def on_request(self, request: Request) -> None:
        """A request from EG's comm port or a signal to the launcher."""
        if request is Request.INTERRUPT:
            task = asyncio.ensure_future(self._interrupt())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif request in (Request.STOP, Request.KILL):
            self.kill = self.kill or request is Request.KILL
            self.stop_requested.set()

    async def _interrupt(self) -> None:
        if self.km is not None and self.km.has_kernel:
            try:
                await self.km.interrupt_kernel()
            except (OSError, RuntimeError) as exc:  # the kernel ended meanwhile
                log.warning("could not interrupt the kernel: %s", exc)

    async def run(self) -> int:
        """Start the kernel, tell EG, serve EG until the kernel ends; the launcher's exit status."""
        loop = asyncio.get_running_loop()
        for signum, request in ((signal.SIGTERM, Request.STOP), (signal.SIGHUP, Request.STOP)):
            loop.add_signal_handler(signum, self.on_request, request)
        loop.add_signal_handler(signal.SIGINT, self.on_request, Request.INTERRUPT)
        folder = Path(tempfile.mkdtemp(prefix="sandbox-kernel-eg-"))  # 0700: the connection file holds the key
        try:
            return await self._run(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def _run(self, folder: Path) -> int:
        args = self.args
        if warning := arguments.exposure(args.ip):
            log.warning("%s", warning)
        km = self.km = AsyncKernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=ThisKernelSpec(),
            connection_file=str(folder / f"kernel-{args.kernel_id}.json"),
            ip=args.ip,
            cache_ports=False,  # the ports come from EG's range, not jupyter_client's cache
            transport_encryption="disabled",  # EG's jupyter_client cannot speak CurveZMQ
            shutdown_wait_time=STOP_SECONDS,
            config=Config(NO_POOL),  # one kernel per launcher process: nothing to take a waiting one
        )
        chosen = ports.free_ports(len(JUPYTER_CHANNELS), args.port_range, args.ip)
        for channel, port in zip(JUPYTER_CHANNELS, chosen, strict=True):
            setattr(km, channel, port)
        listener = CommListener(ports.bind(args.port_range, args.ip, frozenset(chosen)), self.on_request)
        env = {name: value for name, value in os.environ.items() if name != "JPY_PARENT_PID"}
        try:
            await km.start_kernel(extra_arguments=list(args.kernel_settings), env=env)
            await listener.start()
            log.info(
                "kernel %s started (pid %s) on %s, ports %s, comm port %d",
                args.kernel_id,
                km.provisioner.pid if isinstance(km.provisioner, LocalProvisioner) else "?",
                args.ip,
                " ".join(f"{c.removesuffix('_port')}={p}" for c, p in zip(JUPYTER_CHANNELS, chosen, strict=True)),
                listener.port,
            )
            if not await self._tell_eg(km, listener.port):
                return 1
            return await self._supervise(km)
        finally:
            await listener.close()
            if km.has_kernel:  # EG was not told, or an error: never leave the kernel behind
                await km.shutdown_kernel(now=True)

    async def _tell_eg(self, km: AsyncKernelManager, comm_port: int) -> bool:
        """Send EG the kernel's connection info with the launcher's pid and group, the comm port and the kernel id."""
        args = self.args
        info: dict[str, object] = dict(km.get_connection_info())
        info["key"] = km.session.key.decode()  # bytes in jupyter_client's dict, text in the file the kernel reads
        info.update(pid=os.getpid(), pgid=os.getpgid(0), comm_port=comm_port, kernel_id=args.kernel_id)
        where = f"{args.response_host}:{args.response_port}"
        try:
            await send_connection_info(args.response_host, args.response_port, seal(info, args.public_key))
        except (OSError, asyncio.TimeoutError) as exc:
            log.error("could not send the connection info to EG's response address %s: %s", where, exc or "timeout")
            return False
        log.info("connection info sent to %s", where)
        self.told_eg = True
        return True

    @staticmethod
    async def _ends_within(km: AsyncKernelManager, seconds: float) -> bool:
        deadline = asyncio.get_running_loop().time() + seconds
        while await km.is_alive():
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(WATCH_SECONDS)
        return True

    async def _supervise(self, km: AsyncKernelManager) -> int:
        """Until the kernel ends: by itself (EG's shutdown_request, a crash) or because EG asked the launcher."""
        while await km.is_alive():
            if self.stop_requested.is_set():
                if not self.kill and await self._ends_within(km, GRACE_SECONDS):
                    break
                log.info("stopping the kernel%s", " now" if self.kill else "")
                await km.shutdown_kernel(now=self.kill)
                return 0
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop_requested.wait(), WATCH_SECONDS)
        status = await km.provisioner.poll() if km.provisioner is not None else None
        log.info("the kernel exited (status %s)", status)
        await km.cleanup_resources()
        return 0 if not status else (128 - status if status < 0 else status)


def failure_report(args: arguments.LaunchArguments, reason: str) -> bytes:
    """A sealed answer that makes EG end the start at once and show `reason`: EG 3.x reads `comm_port` with int(),
    and answers the start with HTTP 500 naming what int() could not read (its first 200 characters)."""
    text = f"launch-eg could not start the kernel: {reason}"
    info = {"kernel_id": args.kernel_id, "pid": os.getpid(), "pgid": os.getpgid(0), "comm_port": text[:190]}
    return seal(info, args.public_key)


def report_failure(args: arguments.LaunchArguments, reason: str) -> None:
    """Tell EG why the kernel will not start, so that its client hears within seconds, not at its launch timeout."""
    try:
        asyncio.run(send_connection_info(args.response_host, args.response_port, failure_report(args, reason)))
    except (OSError, asyncio.TimeoutError) as exc:
        log.error("could not tell EG's response address why: %s", exc or "timeout")


def main(words: list[str]) -> int:
    """The launcher's command line: checked, then run until the kernel ends."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="[%(levelname)1.1s %(asctime)s launch-eg] %(message)s"
    )
    try:
        args = arguments.parse(words)
    except arguments.LaunchArgumentError as exc:
        print(f"{arguments.PROG}: error: {exc}", file=sys.stderr)
        return 2
    launcher = Launcher(args)
    try:
        return asyncio.run(launcher.run())
    except ports.NoFreePort as exc:
        log.error("%s", exc)
        reason = str(exc)
    except Exception as exc:  # the kernel could not be started: one line in EG's kernel log, not a traceback
        log.error(
            "could not start the kernel: %s: %s (`sandbox-kernel doctor` in this environment checks its kernelspec, "
            "Deno and the cache)",
            type(exc).__name__,
            exc,
        )
        reason = f"{type(exc).__name__}: {exc}"
    if not launcher.told_eg:
        report_failure(args, reason)
    return 1
