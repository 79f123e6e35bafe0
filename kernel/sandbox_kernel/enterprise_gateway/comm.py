"""EG's comm port: the launcher's TCP listener for Enterprise Gateway's signal and shutdown requests.

EG (RemoteProcessProxy.send_signal, shutdown_listener) opens one connection per request, writes one JSON object
and closes it: `{"signum": N}` with N = 0 (a liveness poll), SIGINT (interrupt), SIGTERM or SIGKILL (stop), or
`{"shutdown": 1}`. Anyone who can reach the port can send these (EG's protocol has no authentication), so
whatever arrives is untrusted: at most MAX_REQUEST_BYTES within READ_SECONDS, strict JSON with exactly one of
those keys and values, at most MAX_CONNECTIONS at once; anything else is logged and ignored.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import signal
import socket
from collections.abc import Callable

MAX_REQUEST_BYTES = 1024  # EG's requests are ~15 bytes
READ_SECONDS = 2.0  # EG writes its request as soon as it is connected
MAX_CONNECTIONS = 32  # beyond this, a new connection is closed unread

log = logging.getLogger(__name__)


class Request(enum.Enum):
    """What EG asks of the launcher."""

    POLL = "poll"  # signum 0: is the launcher there? (answered by accepting the connection)
    INTERRUPT = "interrupt"  # SIGINT: the kernel's interrupt
    STOP = "stop"  # SIGTERM or {"shutdown": 1}: stop the kernel cleanly, then exit
    KILL = "kill"  # SIGKILL: stop the kernel now, then exit


SIGNALS = {
    0: Request.POLL,
    signal.SIGINT: Request.INTERRUPT,
    signal.SIGTERM: Request.STOP,
    signal.SIGKILL: Request.KILL,
}


class BadRequest(ValueError):
    """Bytes on the comm port that are not one of EG's requests."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise BadRequest(f"a key appears twice: {keys}")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise BadRequest(f"{name} is not JSON")


def parse_request(data: bytes) -> Request:
    """One request from its bytes, or BadRequest saying why not."""
    if len(data) > MAX_REQUEST_BYTES:
        raise BadRequest(f"more than {MAX_REQUEST_BYTES} bytes")
    try:
        value = json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except BadRequest:
        raise
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, nesting too deep
        raise BadRequest(f"not a JSON object: {type(exc).__name__}") from None
    if not isinstance(value, dict) or len(value) != 1:
        raise BadRequest("not a JSON object with exactly one key")
    ((key, item),) = value.items()
    if key == "shutdown" and type(item) is int and item == 1:
        return Request.STOP
    if key == "signum" and type(item) is int and item in SIGNALS:
        return SIGNALS[item]
    raise BadRequest(f"not one of EG's requests (signum {sorted(SIGNALS)} or shutdown 1): {key!r}")


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """The bytes until the sender closes its side, or BadRequest past MAX_REQUEST_BYTES."""
    data = b""
    while chunk := await reader.read(MAX_REQUEST_BYTES + 1 - len(data)):
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise BadRequest(f"more than {MAX_REQUEST_BYTES} bytes")
    return data


class CommListener:
    """Serves EG's requests on a bound socket, calling `on_request` for each good one."""

    def __init__(self, sock: socket.socket, on_request: Callable[[Request], None]) -> None:
        self._sock = sock
        self._on_request = on_request
        self._open = 0
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The comm port: the TCP port of the bound socket, which EG is told."""
        port: int = self._sock.getsockname()[1]
        return port

    async def start(self) -> None:
        """Start serving on the bound socket (each connection in a task of its own, bounded by MAX_CONNECTIONS)."""
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=MAX_REQUEST_BYTES + 1)

    async def close(self) -> None:
        """Stop listening: EG's next request is refused, which tells it the kernel is gone."""
        if self._server is not None:
            self._server.close()
            self._server = None
        else:
            self._sock.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        self._open += 1
        try:
            if self._open > MAX_CONNECTIONS:
                log.warning("comm port: closed a connection from %s unread: %d are open", peer, self._open - 1)
                return
            try:
                data = await asyncio.wait_for(_read_request(reader), READ_SECONDS)
                request = parse_request(data)
            except asyncio.TimeoutError:
                log.warning("comm port: ignored a connection from %s: no request within %ss", peer, READ_SECONDS)
                return
            except (BadRequest, OSError) as exc:
                log.warning("comm port: ignored a request from %s: %s", peer, exc)
                return
            if request is not Request.POLL:
                log.info("comm port: %s requested by %s", request.value, peer)
            self._on_request(request)
        finally:
            self._open -= 1
            writer.close()
