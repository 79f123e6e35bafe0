"""The `sandbox-kernel mcp --http` credential: where the token comes from, which tokens and token files are
refused, and the ASGI gate that lets only requests bearing the token through (a fake app stands for the SDK's)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel.client.mcp import main
from sandbox_kernel.client.mcp_http import TOKEN_ENV, TOKEN_FORM, BearerGate, Credential, TokenError, credential

TOKEN = "k" * 40
RULE = (
    "the token must be 32 to 512 characters of letters, digits and -._~+/ "
    "(make one with python -c 'import secrets; print(secrets.token_urlsafe(32))')"
)


def token_file(folder: Path, content: str | bytes, mode: int = 0o600) -> Path:
    path = folder / "token"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    path.chmod(mode)
    return path


def test_without_a_given_token_a_fresh_random_one_is_made_and_shown_in_full() -> None:
    first, second = credential(None, {}), credential(None, {})
    assert first.source is None and first.shown == first.token
    assert TOKEN_FORM.fullmatch(first.token) and len(first.token) == 43  # secrets.token_urlsafe(32)
    assert first.token != second.token


def test_a_token_in_the_environment_is_used_taken_out_of_it_and_not_shown() -> None:
    environ = {TOKEN_ENV: TOKEN, "OTHER": "kept"}
    given = credential(None, environ)
    assert given == Credential(TOKEN, TOKEN_ENV)
    assert given.shown == f"<the token in {TOKEN_ENV}>"
    assert environ == {"OTHER": "kept"}  # the kernel, started later, does not inherit it


def test_a_private_token_file_is_read_without_its_line_end(tmp_path: Path) -> None:
    path = token_file(tmp_path, f"{TOKEN}\n")
    given = credential(str(path), {})
    assert given == Credential(TOKEN, f"--token-file {path}")
    assert given.shown == f"<the token in --token-file {path}>"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602, 0o620, 0o700 | 0o004])
def test_a_token_file_group_or_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, TOKEN, mode)
    with pytest.raises(TokenError) as refused:
        credential(str(path), {})
    assert str(refused.value) == (
        f"--token-file {path}: mode {stat.S_IMODE(mode):04o} lets group or others read or change the token; "
        f"only its owner may (chmod 600 {path})"
    )


def test_a_token_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)  # opening it to read would wait for a writer
    for path in (fifo, tmp_path):
        with pytest.raises(TokenError) as refused:
            credential(str(path), {})
        assert str(refused.value) == f"--token-file {path}: not a regular file"


def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    path = token_file(tmp_path, TOKEN)
    os.chown(path, 12345, -1)
    with pytest.raises(TokenError) as refused:
        credential(str(path), {})
    assert str(refused.value) == f"--token-file {path}: owned by uid 12345, not by this user (uid 0)"


def test_a_missing_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "none"
    with pytest.raises(TokenError) as refused:
        credential(str(path), {})
    assert str(refused.value) == f"--token-file {path}: cannot be opened (No such file or directory)"


@pytest.mark.parametrize(
    ("content", "length"),
    [("", 0), ("\n", 1), ("short", 5), ("x" * 31, 31), ("x" * 513, 513), (f"{TOKEN} {TOKEN}", 81), ("é" * 40, 40)],
)
def test_tokens_that_are_empty_short_long_or_not_header_safe_are_refused(content: str, length: int) -> None:
    with pytest.raises(TokenError) as refused:
        credential(None, {TOKEN_ENV: content})
    assert str(refused.value) == f"{TOKEN_ENV}: {RULE}; this one has {length} characters"


def test_a_token_file_that_is_not_ascii_is_refused(tmp_path: Path) -> None:
    path = token_file(tmp_path, "é".encode() * 40)
    with pytest.raises(TokenError) as refused:
        credential(str(path), {})
    assert str(refused.value) == f"--token-file {path}: {RULE}"


def test_a_token_given_both_ways_is_refused(tmp_path: Path) -> None:
    path = token_file(tmp_path, TOKEN)
    with pytest.raises(TokenError) as refused:
        credential(str(path), {TOKEN_ENV: TOKEN})
    assert str(refused.value) == f"the token is given twice: use --token-file or {TOKEN_ENV}, not both"


def test_a_token_is_never_in_a_credentials_repr() -> None:
    assert TOKEN not in repr(Credential(TOKEN, TOKEN_ENV))


def test_a_token_file_without_http_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([], None, "/some/token") == 2
    assert capsys.readouterr().err == "sandbox-kernel mcp: --token-file applies only with --http\n"


class FakeApp:
    """Stands for the SDK's app: notes each scope it is given."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(scope)


def through_gate(scope: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the scopes the app saw, the messages the gate sent) for one connection."""
    app, sent = FakeApp(), []

    async def receive() -> dict[str, Any]:
        raise AssertionError("the gate must not read a refused request's body")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(BearerGate(app, TOKEN)(scope, receive, send))
    return app.scopes, sent


def http(*headers: tuple[bytes, bytes], path: str = "/mcp") -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "headers": list(headers)}


REFUSED = [
    {
        "type": "http.response.start",
        "status": 401,
        "headers": [(b"www-authenticate", b"Bearer"), (b"content-length", b"0")],
    },
    {"type": "http.response.body", "body": b""},
]


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer " + b"x" * 40)],  # as long as the token
        [(b"authorization", b"Bearer " + TOKEN[:-1].encode())],
        [(b"authorization", b"Bearer " + TOKEN.encode() + b"k")],
        [(b"authorization", b"Bearer  " + TOKEN.encode())],
        [(b"authorization", b"Basic " + TOKEN.encode())],
        [(b"authorization", TOKEN.encode())],
        [(b"authorization", b"Bearer " + TOKEN.encode()), (b"authorization", b"Bearer " + TOKEN.encode())],
        [(b"authorization", b"Bearer wrong"), (b"authorization", b"Bearer " + TOKEN.encode())],
        [(b"x-token", TOKEN.encode()), (b"cookie", b"token=" + TOKEN.encode())],
    ],
)
def test_the_gate_refuses_requests_without_exactly_the_token(headers: list[tuple[bytes, bytes]]) -> None:
    for path in ("/mcp", "/", "/.well-known/oauth-protected-resource"):
        assert through_gate(http(*headers, path=path)) == ([], REFUSED)


@pytest.mark.parametrize("scheme", [b"Bearer", b"bearer", b"BEARER"])
def test_the_gate_passes_requests_with_the_token_to_the_app(scheme: bytes) -> None:
    scope = http((b"content-type", b"application/json"), (b"authorization", scheme + b" " + TOKEN.encode()))
    assert through_gate(scope) == ([scope], [])


def test_the_gate_passes_the_lifespan_and_closes_websockets_without_the_token() -> None:
    lifespan = {"type": "lifespan"}
    assert through_gate(lifespan) == ([lifespan], [])
    socket = {"type": "websocket", "path": "/mcp", "headers": []}
    assert through_gate(socket) == ([], [{"type": "websocket.close", "code": 1008}])
