"""The kernel behind Jupyter Kernel Gateway: started over REST, driven over its websocket."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import websocket

GATEWAY = str(Path(sys.executable).parent / "jupyter")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[tuple[str, str]]:
    port, token = free_port(), secrets.token_hex(16)
    proc = subprocess.Popen(
        [
            GATEWAY, "kernelgateway", "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={port}",
            f"--KernelGatewayApp.auth_token={token}", "--KernelGatewayApp.port_retries=0",
        ],
        cwd=tmp_path_factory.mktemp("gateway"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    base = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request(base, token, "GET", "/api")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"kernel gateway did not start: {proc.stderr.read() if proc.stderr else ''}"
                    ) from None
                time.sleep(0.3)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def request(base: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{base}{path}", data=data, method=method)
    req.add_header("Authorization", f"token {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:
        text = resp.read().decode()
    return json.loads(text) if text else {}


def execute_over_websocket(base: str, token: str, kernel_id: str, code: str) -> tuple[dict, list[dict]]:
    ws = websocket.create_connection(
        f"ws://{base}/api/kernels/{kernel_id}/channels", header=[f"Authorization: token {token}"], timeout=120
    )
    try:
        msg_id = uuid.uuid4().hex
        ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "test",
                        "session": uuid.uuid4().hex,
                        "version": "5.3",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {
                        "code": code,
                        "silent": False,
                        "store_history": True,
                        "user_expressions": {},
                        "allow_stdin": False,
                    },
                    "channel": "shell",
                }
            )
        )
        outputs, reply = [], None
        while reply is None or not any(
            m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in outputs
        ):
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "execute_reply":
                reply = msg["content"]
            else:
                outputs.append(msg)
        return reply, outputs
    finally:
        ws.close()


def test_kernel_runs_behind_the_gateway(gateway):
    base, token = gateway
    specs = request(base, token, "GET", "/api/kernelspecs")
    assert "pyodide-sandbox" in specs["kernelspecs"]
    kernel = request(base, token, "POST", "/api/kernels", {"name": "pyodide-sandbox"})
    try:
        reply, outputs = execute_over_websocket(
            base, token, kernel["id"], "import sys\nprint('hello through the gateway', sys.platform)\n6 * 7"
        )
        assert reply["status"] == "ok"
        streams = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
        assert streams == "hello through the gateway emscripten\n"
        (result,) = [m for m in outputs if m["msg_type"] == "execute_result"]
        assert result["content"]["data"]["text/plain"] == "42"
        reply, _ = execute_over_websocket(
            base, token, kernel["id"], "import js; js.Deno.readTextFileSync('/etc/passwd')"
        )
        assert reply["status"] == "error" and "NotCapable" in reply["evalue"]
    finally:
        request(base, token, "DELETE", f"/api/kernels/{kernel['id']}")
