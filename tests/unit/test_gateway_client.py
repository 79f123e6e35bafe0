"""The agent API's gateway client without a gateway: websocket frames, URLs and their errors, the options a remote
kernel cannot take (agent API and `sandbox-kernel mcp`), how a lost kernel is noticed, and the settings kernel_info
reports. (tests/test_gateway_agent.py drives a real Kernel Gateway and a real Enterprise Gateway.)"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from queue import Empty
from typing import Any

import httpx
import pytest

from sandbox_kernel.client import gateway_frames
from sandbox_kernel.client.agent import AsyncSandbox, SandboxSettingsError
from sandbox_kernel.client.gateway_kernel import GatewayKernel, Inbox
from sandbox_kernel.client.gateway_rest import TOKEN_ENV, Answer, GatewayRest, checked_env, checked_url, shown
from sandbox_kernel.client.mcp import UsageError, sandbox_options
from sandbox_kernel.client.sync_sandbox import Sandbox
from sandbox_kernel.jupyter.settings import HOST_DETAILS, reported
from sandbox_kernel.jupyter.settings_check import own_settings

URL = "http://127.0.0.1:8888"


def message(msg_type: str, content: dict[str, Any], channel: str = "iopub", parent: str = "") -> dict[str, Any]:
    return {
        "header": {"msg_id": "m1", "msg_type": msg_type},
        "parent_header": {"msg_id": parent} if parent else {},
        "metadata": {},
        "content": content,
        "channel": channel,
    }


def binary_frame(msg: dict[str, Any], buffers: list[bytes]) -> bytes:
    """As Jupyter Server serialises a message with buffers (serialize_binary_message)."""
    parts = [json.dumps(msg).encode(), *buffers]
    offsets = [4 * (len(parts) + 1)]
    for part in parts[:-1]:
        offsets.append(offsets[-1] + len(part))
    return struct.pack(f"!{len(parts) + 1}I", len(parts), *offsets) + b"".join(parts)


def test_text_and_binary_frames_become_messages() -> None:
    msg = gateway_frames.decode(json.dumps(message("stream", {"name": "stdout", "text": "hi"}, parent="p")))
    assert msg is not None and (msg["channel"], msg["msg_type"], msg["parent_header"]) == (
        "iopub",
        "stream",
        {"msg_id": "p"},
    )
    assert msg["buffers"] == []
    with_buffers = gateway_frames.decode(binary_frame(message("comm_msg", {"data": {}}), [b"\x00\x01", b"xyz"]))
    assert with_buffers is not None and with_buffers["buffers"] == [b"\x00\x01", b"xyz"]
    sent = json.loads(gateway_frames.encode({"header": {}, "content": {"code": "1"}}, "shell"))
    assert sent["channel"] == "shell" and sent["content"] == {"code": "1"}


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "[1, 2]",
        json.dumps({"header": "x", "content": {}}),
        json.dumps({"header": {}, "content": []}),
        b"\x00\x00\x00\x09" + b"\x00" * 8,  # more parts than the frame has room for
        struct.pack("!3I", 2, 12, 99) + b"{}",  # an offset past its end
        struct.pack("!2I", 1, 8) + b"\xff\xfe",  # JSON that is not UTF-8
    ],
)
def test_frames_that_are_not_jupyter_messages_are_dropped(frame: str | bytes) -> None:
    assert gateway_frames.decode(frame) is None


def test_urls_are_checked_and_shown_without_credentials() -> None:
    assert checked_url("https://gw.example/jupyter/") == "https://gw.example/jupyter"
    assert shown("https://user:secret@gw.example:8443/base") == "https://gw.example:8443/base"
    for bad in ("ftp://gw.example", "gw.example:8888", "http://"):
        with pytest.raises(ValueError, match="is not an http:// or https:// URL of a gateway"):
            checked_url(bad)
    with pytest.raises(ValueError, match=r"has a query or fragment; .* gateway_token") as caught:
        checked_url("http://gw.example/?token=secret")
    assert "secret" not in str(caught.value)
    rest = GatewayRest("https://gw.example/base/", "t")
    assert rest.websocket_url("k 1", "s") == "wss://gw.example/base/api/kernels/k%201/channels?session_id=s"
    asyncio.run(rest.aclose())


def test_a_refusal_names_the_status_and_what_to_check_never_the_token() -> None:
    rest = GatewayRest("http://user:pw@gw.example:8888", "sekrit-token")
    answer = Answer(401, "Unauthorized", json.dumps({"reason": "Unauthorized", "message": ""}).encode())
    said = rest._refusal("POST", "/api/kernels", answer)
    assert said == (
        "the gateway at http://gw.example:8888 refused POST /api/kernels: HTTP 401 Unauthorized; gateway_token "
        f"(or ${TOKEN_ENV}) is missing or is not the gateway's auth token"
    )
    answer = Answer(404, "Not Found", b'{"message": "Kernel does not exist: abc"}')
    assert "HTTP 404 Not Found (Kernel does not exist: abc)" in rest._refusal("GET", "/api/kernels/abc", answer)
    asyncio.run(rest.aclose())


def test_enterprise_gateways_refusal_of_a_user_says_how_to_give_kernel_username() -> None:
    rest = GatewayRest(URL, "t")
    said = (
        "User 'root' is not authorized to start kernel 'Python 3 (Pyodide sandbox)'. Ensure KERNEL_USERNAME is set "
        "to an appropriate value and retry the request."
    )
    answer = Answer(403, said, json.dumps({"reason": said, "message": ""}).encode())
    assert rest._refusal("POST", "/api/kernels", answer) == (
        f"the gateway at {URL} refused POST /api/kernels: HTTP 403 {said}; Enterprise Gateway starts kernels only "
        "for a KERNEL_USERNAME it authorizes (by default its own user, unless that is root): give one with "
        "gateway_env={'KERNEL_USERNAME': NAME} (sandbox-kernel mcp: --gateway-env KERNEL_USERNAME=NAME)"
    )
    other = Answer(403, "Forbidden", b'{"reason": "Forbidden", "message": "Resource Limit"}')
    assert rest._refusal("POST", "/api/kernels", other).endswith("HTTP 403 Forbidden (Resource Limit)")
    asyncio.run(rest.aclose())


def started_with(env: dict[str, str] | None) -> Any:
    """The body of the start request GatewayRest.start_kernel sends (to a fake gateway)."""
    sent: list[Any] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(201, json={"id": "k1", "name": "pyodide-sandbox"})

    async def main() -> str:
        rest = GatewayRest(URL, "t")
        rest._http = httpx.AsyncClient(transport=httpx.MockTransport(gateway))
        try:
            return await rest.start_kernel("pyodide-sandbox", 5, env)
        finally:
            await rest.aclose()

    assert asyncio.run(main()) == "k1"
    return sent[0]


def test_gateway_env_goes_in_the_start_request_and_no_env_without_it() -> None:
    """A start request with "env" gives the kernel only the gateway's chosen variables (Kernel Gateway: PATH and
    its whitelist; EG: its inherited ones) and those: without gateway_env, none is sent."""
    assert started_with(None) == {"name": "pyodide-sandbox"}
    assert started_with({}) == {"name": "pyodide-sandbox"}
    assert started_with({"KERNEL_USERNAME": "alice"}) == {
        "name": "pyodide-sandbox",
        "env": {"KERNEL_USERNAME": "alice"},
    }


def test_gateway_env_is_names_and_str_values() -> None:
    assert checked_env({"KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": ""}) == {
        "KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": ""
    }  # fmt: skip
    with pytest.raises(TypeError, match="gateway_env must be a dict"):
        checked_env([("KERNEL_USERNAME", "alice")])
    with pytest.raises(TypeError, match=r"gateway_env\['KERNEL_UID'\] must be a str .* not 1000"):
        checked_env({"KERNEL_UID": 1000})
    for name in ("", "A=B", "A\0B", 5):
        with pytest.raises(ValueError, match="is not an environment variable's name"):
            checked_env({name: "x"})
    with pytest.raises(ValueError, match="has a NUL character"):
        checked_env({"KERNEL_USERNAME": "a\0b"})
    with pytest.raises(TypeError, match=r"must be a str"):
        AsyncSandbox(gateway_url=URL, gateway_env={"KERNEL_UID": 1000})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="got gateway_env without gateway_url"):
        Sandbox(gateway_env={"KERNEL_USERNAME": "alice"})
    sandbox = AsyncSandbox(gateway_url=URL, gateway_env={"KERNEL_USERNAME": "alice"}, kernel_name="eg-spec")
    kernel = sandbox._connection()
    assert isinstance(kernel, GatewayKernel) and (kernel.env, kernel.kernel_name) == (
        {"KERNEL_USERNAME": "alice"},
        "eg-spec",
    )
    asyncio.run(kernel.rest.aclose())


def test_kernel_settings_and_local_options_are_refused_with_a_gateway() -> None:
    with pytest.raises(SandboxSettingsError) as caught:
        Sandbox(gateway_url=URL, cell_timeout=5, memory_limit_mb=256, cwd="/tmp", extra_arguments=["--x"])
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "cell_timeout", "memory_limit_mb", "extra_arguments", "cwd"
    ]  # fmt: skip
    assert "the gateway machine's (its sandbox_kernel_config.py" in caught.value.problems[0]
    assert str(caught.value).startswith("Sandbox(gateway_url=...) was given what only a local kernel takes")
    sandbox = AsyncSandbox(gateway_url=URL, gateway_token="t", kernel_stderr=None, startup_timeout=5)
    assert sandbox.kernel is None and sandbox.arguments == []  # nothing for a command line
    with pytest.raises(TypeError, match="gateway_token without gateway_url"):
        AsyncSandbox(gateway_token="t")
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        AsyncSandbox(gateway_url="gw.example:8888")


def test_mcp_takes_a_gateway_and_its_token_from_the_environment_only() -> None:
    environ = {TOKEN_ENV: "t1", "MINE": "t2", "OTHER": "kept"}
    assert sandbox_options([], URL, None, environ) == {"gateway_url": URL, "gateway_token": "t1"}
    assert sandbox_options([], URL, "MINE", environ) == {"gateway_url": URL, "gateway_token": "t2"}
    assert environ == {"OTHER": "kept"}  # taken out: nothing started later inherits them
    assert sandbox_options([], URL, None, {}) == {"gateway_url": URL, "gateway_token": None}
    with pytest.raises(UsageError, match="--gateway-token-env MINE: the environment has no MINE"):
        sandbox_options([], URL, "MINE", {})
    with pytest.raises(UsageError, match=r"--SandboxKernel.cell_timeout=...: kernel settings cannot be given with"):
        sandbox_options(["--SandboxKernel.cell_timeout=3"], URL, None, {})
    with pytest.raises(UsageError, match="--gateway-url 'ftp://x' is not an http"):
        sandbox_options([], "ftp://x", None, {})
    with pytest.raises(UsageError, match="--gateway-token-env applies only with --gateway-url"):
        sandbox_options([], None, "MINE", {})
    assert sandbox_options(["--SandboxKernel.cell_timeout=3"], None, None, {}) == {
        "extra_arguments": [
            "--SandboxKernel.cell_timeout=3",
            '--SandboxKernelApp.setting_sources={"given": {"cell_timeout": "--SandboxKernel.cell_timeout of '
            'sandbox-kernel mcp"}, "names": {}, "other": "--SandboxKernel.{name}", "reported": true}',
        ]
    }


def test_mcp_takes_an_enterprise_gateways_kernel_name_and_start_env() -> None:
    words = ["KERNEL_USERNAME=alice", "KERNEL_NAMESPACE=team=a", "EMPTY="]
    assert sandbox_options([], URL, None, {}, "pyodide-sandbox_kubernetes", words) == {
        "gateway_url": URL,
        "gateway_token": None,
        "kernel_name": "pyodide-sandbox_kubernetes",
        "gateway_env": {"KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": "team=a", "EMPTY": ""},
    }
    with pytest.raises(UsageError, match=r"--gateway-env 'KERNEL_USERNAME': give NAME=VALUE"):
        sandbox_options([], URL, None, {}, None, ["KERNEL_USERNAME"])
    with pytest.raises(UsageError, match=r"--gateway-env: '' is not an environment variable's name"):
        sandbox_options([], URL, None, {}, None, ["=alice"])
    with pytest.raises(UsageError, match=r"--kernel-name applies only with --gateway-url"):
        sandbox_options([], None, None, {}, "x", None)
    with pytest.raises(UsageError, match=r"--gateway-env applies only with --gateway-url"):
        sandbox_options([], None, None, {}, None, ["KERNEL_USERNAME=alice"])


class FakeSocket:
    """The frames a gateway sent, then its close (or nothing more, while `open`)."""

    def __init__(self, frames: list[str], open: bool) -> None:
        self.frames, self.open = frames, open
        self.close_code, self.close_reason = 1011, "server going away"
        self.drained = asyncio.Event()  # every frame was taken (and handled: the reader asks for the next)
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    def __aiter__(self) -> FakeSocket:
        return self

    async def __anext__(self) -> str:
        if self.frames:
            return self.frames.pop(0)
        self.drained.set()
        if self.open:
            await asyncio.Event().wait()
        raise StopAsyncIteration


def lost_after(frames: list[str], restarting: bool = False, open: bool = False) -> str | None:
    """What gone() says once a kernel's reader has taken `frames` (REST not asked: looked up just now)."""

    async def main() -> str | None:
        kernel = GatewayKernel(URL, None, "pyodide-sandbox")
        kernel.kernel_id, kernel._restarting, kernel._polled = "k1", restarting, time.monotonic()
        kernel._queues = {channel: Inbox(channel) for channel in ("shell", "iopub", "stdin")}
        ws = FakeSocket(list(frames), open)
        kernel._ws = ws  # type: ignore[assignment]
        reader = asyncio.ensure_future(kernel._read(ws))  # type: ignore[arg-type]
        await asyncio.wait_for(ws.drained.wait(), 5)
        await asyncio.wait({reader}, timeout=0 if open else 5)
        died = await kernel.gone()
        reader.cancel()
        await kernel.rest.aclose()
        return None if died is None else str(died)

    return asyncio.run(main())


def test_a_kernel_reported_restarting_or_dead_or_a_closed_socket_is_lost() -> None:
    restarting = json.dumps(message("status", {"execution_state": "restarting"}))
    dead = json.dumps(message("status", {"execution_state": "dead"}))
    busy = json.dumps(message("status", {"execution_state": "busy"}))
    assert lost_after([busy, restarting]) == (
        f"the gateway at {URL} reports that kernel k1 restarted: its process died, and the sandbox's state is gone "
        "(restart() starts a fresh one)"
    )
    assert "reports kernel k1 dead" in (lost_after([dead]) or "")
    assert lost_after([busy]) == (
        f"the gateway at {URL} closed the connection to kernel k1 (code 1011: server going away) "
        "(restart() starts a fresh one)"
    )
    assert lost_after([restarting], restarting=True, open=True) is None  # expected during restart()
    assert lost_after([busy], open=True) is None


def test_kernel_info_reports_every_setting_and_host_details_only_as_set() -> None:
    from sandbox_kernel.jupyter.kernel import SandboxKernel

    probe = SandboxKernel.__new__(SandboxKernel)
    from traitlets.config import Config, Configurable

    Configurable.__init__(
        probe, config=Config({"SandboxKernel": {"cell_timeout": 30.0, "mounts": ["/srv/secret-place:/data"]}})
    )
    found = reported(probe)
    assert set(found) == own_settings(SandboxKernel) and HOST_DETAILS <= set(found)
    assert found["cell_timeout"] == 30.0 and found["mounts"] is True and found["wheelhouse"] is False
    assert "/srv/secret-place" not in json.dumps(found)


# --- a hostile or broken gateway -----------------------------------------------------------------------------------


def read_all(frames: list[str | bytes], limit: int | None = None) -> tuple[GatewayKernel, FakeSocket, str | None]:
    """A kernel whose reader took `frames` from an open socket (each inbox holding at most `limit` bytes), the
    socket, and why the kernel was lost (None: it was not) before the reader was stopped."""

    async def main() -> tuple[GatewayKernel, FakeSocket, str | None]:
        kernel = GatewayKernel(URL, None, "pyodide-sandbox")
        kernel.kernel_id, kernel._polled = "k1", time.monotonic()
        kernel._queues = {c: Inbox(c, *([limit] if limit else [])) for c in ("shell", "iopub", "stdin")}
        ws = FakeSocket(list(frames), open=True)  # type: ignore[arg-type]
        kernel._ws = ws  # type: ignore[assignment]
        reader = asyncio.ensure_future(kernel._read(ws))  # type: ignore[arg-type]
        drained = asyncio.ensure_future(ws.drained.wait())
        await asyncio.wait({reader, drained}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        assert reader.done() or drained.done(), "the reader neither took every frame nor ended"
        lost = kernel._lost
        reader.cancel()
        drained.cancel()
        await kernel.rest.aclose()
        return kernel, ws, lost

    return asyncio.run(main())


def unread(kernel: GatewayKernel, channel: str) -> list[dict[str, Any]]:
    found = []
    while True:
        try:
            found.append(kernel._queues[channel].get_nowait())
        except Empty:
            return found


def test_messages_of_the_wrong_types_are_dropped_and_the_reader_goes_on() -> None:
    good = message("stream", {"name": "stdout", "text": "still here"})
    hostile = [
        json.dumps(message("status", {"execution_state": ["dead"]})),  # unhashable: was a TypeError in the reader
        json.dumps(message("status", {"execution_state": {"x": 1}})),
        json.dumps({**good, "header": {"msg_id": "m2", "msg_type": ["stream"]}}),
        json.dumps({**good, "header": {"msg_id": 7, "msg_type": "stream"}}),
        json.dumps({**good, "content": "text"}),
        json.dumps({**good, "channel": ["iopub"]}),
        json.dumps({**good, "channel": "elsewhere"}),
        json.dumps({**good, "parent_header": "p", "metadata": [1]}),
        json.dumps(good),
    ]
    kernel, ws, lost = read_all(hostile)
    assert lost is None and not ws.closed
    got = unread(kernel, "iopub")
    assert [m["msg_type"] for m in got] == ["status", "status", "stream", "stream"], got
    assert got[2]["parent_header"] == {} and got[2]["metadata"] == {}
    assert got[3]["content"]["text"] == "still here"


def test_unread_iopub_past_the_limit_drops_the_oldest_and_unread_answers_end_the_connection(caplog) -> None:
    frames: list[str | bytes] = [
        json.dumps(message("stream", {"name": "stdout", "text": f"{i:04d}" + "x" * 1000})) for i in range(10)
    ]
    kernel, ws, lost = read_all(frames, limit=5000)
    texts = [m["content"]["text"][:4] for m in unread(kernel, "iopub")]
    assert texts and texts == [f"{i:04d}" for i in range(10 - len(texts), 10)] and len(texts) < 10, texts
    assert lost is None and not ws.closed
    assert "MiB of IOPub messages of kernel k1 that were not read: the oldest are dropped" in caplog.text

    replies = [json.dumps(message("execute_reply", {"status": "ok", "pad": "x" * 1000}, "shell")) for _ in range(10)]
    kernel, ws, lost = read_all(list(replies), limit=5000)
    assert ws.closed and lost is not None
    assert lost.startswith(f"the gateway at {URL} sent more than 0 MiB of messages on the shell channel")
    assert len(unread(kernel, "shell")) < 10


def test_rest_answers_are_bounded_and_ids_stay_one_path_segment() -> None:
    from sandbox_kernel.client import gateway_rest

    asked: list[str] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.raw_path.decode())
        if request.url.path == "/api/kernelspecs":
            return httpx.Response(200, content=b"[" + b"0," * (gateway_rest.MAX_BODY_BYTES // 2) + b"0]")
        return httpx.Response(200, json={"id": "k1"})

    async def main() -> None:
        rest = GatewayRest(URL, "t")
        rest._http = httpx.AsyncClient(transport=httpx.MockTransport(gateway))
        try:
            with pytest.raises(gateway_rest.GatewayError) as caught:
                await rest.call("GET", "/api/kernelspecs")
            assert str(caught.value) == (
                f"the gateway at {URL} answered GET /api/kernelspecs with more than {gateway_rest.MAX_BODY_BYTES} "
                "bytes (HTTP 200), far more than a gateway's answer holds: refused"
            )
            assert await rest.kernel_exists("../../api/x?y", 5) is True
            await rest.interrupt("a/b")
        finally:
            await rest.aclose()

    asyncio.run(main())
    assert asked[1:] == ["/api/kernels/..%2F..%2Fapi%2Fx%3Fy", "/api/kernels/a%2Fb/interrupt"]
    rest = GatewayRest(URL, "t")
    assert rest.websocket_url("a/../b", "s&t") == "ws://127.0.0.1:8888/api/kernels/a%2F..%2Fb/channels?session_id=s%26t"
    asyncio.run(rest.aclose())


def test_the_token_never_reaches_a_log_at_debug_during_a_real_websocket_handshake(caplog) -> None:
    """A real websockets server on 127.0.0.1 plays the gateway's channels; every logger is captured at DEBUG. The
    same handshake made with websockets' own logger does log the token (so the capture would see it)."""
    import logging

    import websockets
    from websockets.asyncio.server import serve

    token = "tok-" + "9" * 40
    seen: list[str | None] = []
    gateway_log = "test.the-gateway"  # the server's own log, which shows what it received (the token too)

    async def channels(connection: Any) -> None:
        seen.append(connection.request.headers.get("Authorization"))
        await connection.send(json.dumps(message("status", {"execution_state": "idle"})))
        await connection.wait_closed()

    async def main(plain: bool) -> dict[str, Any]:
        async with serve(channels, "127.0.0.1", 0, logger=logging.getLogger(gateway_log)) as server:
            port = server.sockets[0].getsockname()[1]
            kernel = GatewayKernel(f"http://127.0.0.1:{port}", token, "pyodide-sandbox")
            kernel.kernel_id = "k1"
            try:
                if plain:  # the handshake GatewayKernel makes, with websockets' default logger
                    url = kernel.rest.websocket_url("k1", "s")
                    async with websockets.connect(url, additional_headers=kernel.rest.headers) as ws:
                        return gateway_frames.decode(await ws.recv()) or {}
                await kernel._connect(10)
                return await kernel.receive("iopub", 10)
            finally:
                await kernel._disconnect()
                await kernel.rest.aclose()

    def logged(plain: bool) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            logging.getLogger("websockets").setLevel(logging.DEBUG)
            try:
                assert asyncio.run(main(plain))["msg_type"] == "status"
            finally:
                logging.getLogger("websockets").setLevel(logging.NOTSET)
        return [r.getMessage() for r in caplog.records if r.name != gateway_log and token in r.getMessage()]

    assert logged(plain=True) == [f"> Authorization: token {token}"]
    assert logged(plain=False) == []
    assert seen == [f"token {token}"] * 2, "the token was sent in both handshakes"
