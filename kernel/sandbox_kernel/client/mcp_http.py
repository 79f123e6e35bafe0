"""`sandbox-kernel mcp --http`: streamable HTTP on 127.0.0.1 behind a bearer token (generated and printed once, or
given in a 0600 file or SANDBOX_KERNEL_MCP_TOKEN); any request without it gets 401 and an empty body."""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
import socket
import stat
import sys
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

HOST = "127.0.0.1"  # the only address --http listens on
TOKEN_ENV = "SANDBOX_KERNEL_MCP_TOKEN"  # a --http token given through the environment
TOKEN_FORM = re.compile(r"[A-Za-z0-9._~+/-]{32,512}=*")  # RFC 6750's b64token, too long to guess
TOKEN_RULE = (
    "32 to 512 characters of letters, digits and -._~+/ (make one with "
    "python -c 'import secrets; print(secrets.token_urlsafe(32))')"
)


class TokenError(ValueError):
    """A --http token that cannot be used; the message says what was wrong and what is allowed."""


@dataclass(frozen=True)
class Credential:
    """The bearer token every --http request must carry."""

    token: str = field(repr=False)
    source: str | None  # where it was given (--token-file PATH, the environment variable); None: made here

    @property
    def shown(self) -> str:
        """The token as printed at start: a generated one in full (as Jupyter does), a given one by its source."""
        return self.token if self.source is None else f"<the token in {self.source}>"


def credential(token_file: str | None, environ: MutableMapping[str, str]) -> Credential:
    """The token from --token-file, else from SANDBOX_KERNEL_MCP_TOKEN (taken out of `environ`: the kernel does
    not inherit it), else a new random one; TokenError for an unusable token or one given both ways."""
    given = environ.pop(TOKEN_ENV, None)
    if token_file is not None and given is not None:
        raise TokenError(f"the token is given twice: use --token-file or {TOKEN_ENV}, not both")
    if token_file is not None:
        source = f"--token-file {token_file}"
        return Credential(checked_token(read_token_file(token_file), source), source)
    if given is not None:
        return Credential(checked_token(given, TOKEN_ENV), TOKEN_ENV)
    return Credential(secrets.token_urlsafe(32), None)


def read_token_file(path: str) -> str:
    """The token in `path`: a regular file of this user's that no one else may read or write; else TokenError."""
    where = f"--token-file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)  # a FIFO must not block
    except OSError as exc:
        raise TokenError(f"{where}: cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)  # of the file opened, not of what the path names by now
        if not stat.S_ISREG(info.st_mode):
            raise TokenError(f"{where}: not a regular file")
        if info.st_uid != os.geteuid():
            raise TokenError(f"{where}: owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})")
        if info.st_mode & 0o077:
            raise TokenError(
                f"{where}: mode {stat.S_IMODE(info.st_mode):04o} lets group or others read or change the token; "
                f"only its owner may (chmod 600 {path})"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenError(f"{where}: the token must be {TOKEN_RULE}") from None


def checked_token(token: str, where: str) -> str:
    """`token` if it has TOKEN_FORM; else a TokenError naming `where` it came from (never the token)."""
    if not TOKEN_FORM.fullmatch(token):
        raise TokenError(f"{where}: the token must be {TOKEN_RULE}; this one has {len(token)} characters")
    return token


class BearerGate:
    """ASGI middleware in front of the whole app: every HTTP request, whatever its path, needs the header
    `Authorization: Bearer <token>` (compared in constant time); any other gets 401, `WWW-Authenticate: Bearer`
    and an empty body, before the MCP app sees it."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self.authorised(scope.get("headers", ())):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            headers = [(b"www-authenticate", b"Bearer"), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation

    def authorised(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        """Whether the request has exactly one Authorization header, and it is this bearer token."""
        values = [value for name, value in headers if name.lower() == b"authorization"]
        if len(values) != 1:
            return False
        scheme, _, token = values[0].partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token, self._token)


async def serve_http(server: MCPServer[None], port: int, given: Credential) -> None:
    """Streamable HTTP at http://127.0.0.1:port/mcp for requests bearing `given`'s token (port 0: any free port);
    the URL and the header to send are printed once to stderr."""
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, port))
    listener.listen(socket.SOMAXCONN)  # before the URL is printed: a client may connect at once
    app = server.streamable_http_app(host=HOST)  # also refuses other Host/Origin headers (DNS rebinding)
    url = f"http://{HOST}:{listener.getsockname()[1]}/mcp"
    header = f"Bearer {given.shown}"
    config = json.dumps({"type": "http", "url": url, "headers": {"Authorization": header}})
    print(
        f"sandbox-kernel mcp: serving streamable HTTP at {url}\n"
        f"sandbox-kernel mcp: every request needs the header  Authorization: {header}\n"
        f"sandbox-kernel mcp: for a client's configuration: {config}",
        file=sys.stderr,
        flush=True,
    )
    gated = BearerGate(app, given.token)
    await uvicorn.Server(uvicorn.Config(gated, log_level="warning", server_header=False)).serve(sockets=[listener])
