"""GatewayKernel: a kernel started on a Jupyter Kernel Gateway or Enterprise Gateway, driven over its REST API
and its websocket (`/api/kernels/<id>/channels`), with `websockets` (asyncio) and `httpx`.

One task reads the websocket and sorts messages into a queue per channel; one task writes, in order. The kernel
is lost (and waiting calls end with KernelDied) when the gateway reports it restarting or dead on IOPub (its
process died: the gateway restarts it, without the state), when the websocket closes, or when the gateway no
longer has it (looked up at most every POLL_SECONDS while a call waits).

The gateway is not trusted: a frame larger than MAX_MESSAGE_BYTES closes the connection; a message that is not a
Jupyter message is dropped; each channel holds at most MAX_UNREAD_BYTES of messages nobody has read yet (IOPub
then drops its oldest, as Jupyter's own IOPub does past its high-water mark; shell and stdin, whose messages are
answers, end the connection with an error that says so). The token is sent in the handshake's headers, which
`websockets` logs at DEBUG: its logger here never logs at DEBUG.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from queue import Empty
from typing import Any

import websockets
from jupyter_client.session import Session
from websockets.asyncio.client import ClientConnection

from sandbox_kernel.client import gateway_frames
from sandbox_kernel.client.connection import Channel, KernelDied
from sandbox_kernel.client.gateway_rest import GatewayError, GatewayRest

# The largest frame taken from the gateway: above a cell's output budget (max_output_bytes, 10 MiB by default) and a
# checkpoint part (~2.8 MB of base64).
MAX_MESSAGE_BYTES = 64 << 20
MAX_UNREAD_BYTES = 128 << 20  # of one channel's messages received and not read yet
POLL_SECONDS = 2.0  # how often a waiting call asks the gateway whether it still has the kernel
CLOSE_SECONDS = 10.0  # for the websocket's closing handshake
SESSION_USER = "sandbox-kernel"  # the username in the headers of what the client sends
_LOST_STATES = {
    "restarting": "reports that kernel {id} restarted: its process died, and the sandbox's state is gone",
    "dead": "reports kernel {id} dead: its process died and could not be restarted",
}
log = logging.getLogger(__name__)


class NoDebugLogger(logging.LoggerAdapter):  # type: ignore[type-arg]  # generic only in typeshed
    """A logger that never logs at DEBUG, whatever the application's logging says: what `websockets` logs there
    includes every header of the handshake, the gateway's token among them."""

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


WEBSOCKET_LOG = NoDebugLogger(logging.getLogger(f"{__name__}.websocket"), {})


class Inbox:
    """The messages of one channel that arrived and were not read yet, at most `limit` bytes of their frames."""

    def __init__(self, channel: str, limit: int = MAX_UNREAD_BYTES) -> None:
        self.channel = channel
        self.limit = limit
        self.unread = 0  # bytes
        self.dropped = 0  # messages dropped to stay within the limit (IOPub only)
        self._items: deque[tuple[dict[str, Any], int]] = deque()
        self._arrived = asyncio.Event()

    def put(self, msg: dict[str, Any], size: int) -> bool:
        """Keep `msg` (its frame had `size` bytes); False when it does not fit and the channel is not IOPub."""
        while self._items and self.unread + size > self.limit and self.channel == "iopub":
            _, old = self._items.popleft()
            self.unread -= old
            self.dropped += 1
        if self.unread + size > self.limit:
            return False
        self._items.append((msg, size))
        self.unread += size
        self._arrived.set()
        return True

    def get_nowait(self) -> dict[str, Any]:
        """The oldest message; Empty when there is none."""
        if not self._items:
            self._arrived.clear()
            raise Empty
        msg, size = self._items.popleft()
        self.unread -= size
        return msg

    async def get(self, timeout: float) -> dict[str, Any]:
        """The oldest message, waiting at most `timeout` seconds for one; Empty after that."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Empty):
                return self.get_nowait()
            left = deadline - time.monotonic()
            if left <= 0:
                raise Empty
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)


class GatewayKernel:
    """One kernel on a gateway (see the module's docstring)."""

    shares_files = False

    def __init__(self, url: str, token: str | None, kernel_name: str, env: dict[str, str] | None = None) -> None:
        self.rest = GatewayRest(url, token)  # ValueError for a URL that cannot be a gateway's
        self.kernel_name = kernel_name
        self.env = env  # sent with every start: e.g. Enterprise Gateway's KERNEL_USERNAME
        self.kernel_id: str | None = None
        self.session = Session(username=SESSION_USER)  # the gateway signs what it passes on with the kernel's key
        self._queues: dict[str, Inbox] = {}
        self._outgoing: asyncio.Queue[str] = asyncio.Queue()
        self._ws: ClientConnection | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._lost: str | None = None  # why the kernel can no longer answer
        self._restarting = False  # a restart of ours is under way: the gateway's 'restarting' is expected
        self._polled = 0.0

    def __repr__(self) -> str:
        return f"<GatewayKernel {self.kernel_id} at {self.rest.shown}>"

    async def start(self, timeout: float) -> None:
        self.kernel_id = await self.rest.start_kernel(self.kernel_name, timeout, self.env)
        await self._connect(timeout)
        await self._wait_for_ready(timeout)

    async def _connect(self, timeout: float) -> None:
        """Open the kernel's websocket and start its reader and writer."""
        await self._disconnect()
        assert self.kernel_id is not None
        # A session of its own: the gateway replays to a session that comes back what it buffered meanwhile
        self.session = Session(username=SESSION_USER)
        url = self.rest.websocket_url(self.kernel_id, self.session.session)
        where = f"the websocket of kernel {self.kernel_id} at the gateway at {self.rest.shown}"
        try:
            ws = await websockets.connect(
                url, additional_headers=self.rest.headers, max_size=MAX_MESSAGE_BYTES, open_timeout=timeout,
                close_timeout=CLOSE_SECONDS, logger=WEBSOCKET_LOG,
            )  # fmt: skip
        except websockets.InvalidStatus as exc:
            status = exc.response.status_code
            raise GatewayError(f"the gateway refused {where}: HTTP {status}", self.rest.shown, status) from None
        except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as exc:
            raise GatewayError(f"cannot open {where}: {exc or type(exc).__name__}", self.rest.shown) from None
        self._ws, self._lost = ws, None
        self._queues = {channel: Inbox(channel) for channel in ("shell", "iopub", "stdin")}
        self._outgoing = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._read(ws)), asyncio.ensure_future(self._write(ws))]

    async def _read(self, ws: ClientConnection) -> None:
        """Sort the gateway's messages by channel; note a kernel the gateway reports lost, or a closed socket."""
        try:
            async for frame in ws:
                if not self._take(frame):
                    await ws.close()
                    break
        except websockets.ConnectionClosed:
            pass
        except Exception as exc:  # anything else a gateway's messages cause ends the connection, with the reason
            self._lost = (
                f"the gateway at {self.rest.shown} sent kernel {self.kernel_id}'s client something it could not "
                f"handle ({type(exc).__name__}: {exc!s:.200})"
            )
            log.warning("%s", self._lost)
            await ws.close()
        finally:
            if self._ws is ws and self._lost is None:
                why = f"code {ws.close_code}" + (f": {ws.close_reason}" if ws.close_reason else "")
                self._lost = (
                    f"the gateway at {self.rest.shown} closed the connection to kernel {self.kernel_id} ({why})"
                )

    def _take(self, frame: str | bytes) -> bool:
        """One frame from the gateway into its channel's inbox (dropped, with a warning, if it is not a message);
        False when the connection must end: more unread answers than an inbox holds."""
        msg = gateway_frames.decode(frame)
        if msg is None:
            log.warning("a frame from the gateway at %s that is not a Jupyter message: dropped", self.rest.shown)
            return True
        channel = msg.pop("channel", None)
        state = msg["content"].get("execution_state") if msg["msg_type"] == "status" else None
        if channel == "iopub" and isinstance(state, str) and state in _LOST_STATES and not self._restarting:
            self._lost = f"the gateway at {self.rest.shown} " + _LOST_STATES[state].format(id=self.kernel_id)
        inbox = self._queues.get(channel) if isinstance(channel, str) else None
        if inbox is None:
            return True
        dropped = inbox.dropped
        if not inbox.put(msg, len(frame)):
            self._lost = (
                f"the gateway at {self.rest.shown} sent more than {inbox.limit >> 20} MiB of messages on the "
                f"{channel} channel of kernel {self.kernel_id} that were not read yet (a gateway that floods its "
                "clients, or replies to requests nobody waits for); the connection was closed"
            )
            log.warning("%s", self._lost)
            return False
        if inbox.dropped and not dropped:
            log.warning(
                "the gateway at %s sent more than %d MiB of IOPub messages of kernel %s that were not read: the "
                "oldest are dropped",
                self.rest.shown,
                inbox.limit >> 20,
                self.kernel_id,
            )
        return True

    async def _write(self, ws: ClientConnection) -> None:
        """Send queued messages in order; a failed send closes the connection (the reader then notes it)."""
        try:
            while True:
                await ws.send(await self._outgoing.get())
        except websockets.ConnectionClosed:
            pass

    async def _wait_for_ready(self, timeout: float) -> None:
        """Until the kernel answers a kernel_info_request (at most `timeout` s); KernelDied if it is lost first."""
        deadline = time.monotonic() + timeout
        msg_id = self.send("shell", "kernel_info_request", {})
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"kernel {self.kernel_id} at the gateway at {self.rest.shown} did not answer within {timeout:g}s"
                )
            try:
                reply = await self.receive("shell", min(1.0, left))
            except Empty:
                lost = await self.gone()
                if lost is not None:
                    raise lost from None
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return

    def send(
        self,
        channel: Channel,
        msg_type: str,
        content: dict[str, Any],
        parent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Queue a message for the kernel on `channel` (the writer sends it in order); its msg_id."""
        msg = self.session.msg(msg_type, content, parent=parent, metadata=metadata)
        self._outgoing.put_nowait(gateway_frames.encode(msg, channel))
        return str(msg["header"]["msg_id"])

    async def receive(self, channel: Channel, timeout: float) -> dict[str, Any]:
        """The next message of `channel`, waiting at most `timeout` s (0: only one already here); Empty if none."""
        return await self._queues[channel].get(timeout)

    async def gone(self) -> KernelDied | None:
        """Why the kernel can no longer answer (as a KernelDied to raise), or None while it can; asks the gateway
        whether it still has the kernel at most every POLL_SECONDS."""
        if self._lost is None and time.monotonic() - self._polled >= POLL_SECONDS:
            self._polled = time.monotonic()
            assert self.kernel_id is not None
            if await self.rest.kernel_exists(self.kernel_id, POLL_SECONDS * 2) is False:
                self._lost = (
                    f"the gateway at {self.rest.shown} no longer has kernel {self.kernel_id} (shut down, or culled)"
                )
        if self._lost is None:
            return None
        return KernelDied(f"{self._lost} (restart() starts a fresh one)")

    async def interrupt(self) -> None:
        """Through the gateway's REST API; KernelDied rather than the gateway's refusal for a kernel it lost."""
        assert self.kernel_id is not None
        try:
            await self.rest.interrupt(self.kernel_id)
        except GatewayError:
            self._polled = 0.0  # look now
            lost = await self.gone()
            if lost is not None:
                raise lost from None
            raise

    async def restart(self, timeout: float) -> None:
        """The gateway restarts the kernel (one it no longer has is started anew), then the websocket is opened
        again: the gateway's end of the old one keeps talking to the old process's ports, and a kernel Enterprise
        Gateway restarts through a remote process proxy (a launcher, a pod) listens on new ones."""
        assert self.kernel_id is not None
        self._restarting = True
        try:
            try:
                await self.rest.restart(self.kernel_id, timeout)
            except GatewayError as exc:  # Kernel Gateway answers 500 for a kernel it no longer has
                if exc.status is None or await self.rest.kernel_exists(self.kernel_id, POLL_SECONDS * 2) is not False:
                    raise
                self.kernel_id = await self.rest.start_kernel(self.kernel_name, timeout, self.env)
            await self._connect(timeout)
            await self._wait_for_ready(timeout)
        finally:
            self._restarting = False

    async def _disconnect(self) -> None:
        """Close the websocket (bounded by its close timeout) and end the reader and writer."""
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def close(self) -> None:
        """Shut the kernel down on the gateway (one it no longer has is no error), close the websocket and the
        REST client."""
        try:
            if self.kernel_id is not None:
                try:
                    await self.rest.shutdown(self.kernel_id)
                except GatewayError as exc:
                    if exc.status != 404:
                        log.warning("%s", exc)
            await self._disconnect()
        finally:
            await self.rest.aclose()
