"""The kernel behind Jupyter Kernel Gateway: started over REST, driven over its websocket."""

from __future__ import annotations

import json
import urllib.error
import uuid
from collections.abc import Iterator

import pytest
import websocket

from kernel_gateway import KernelGateway, kernel_gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGateway]:
    with kernel_gateway(tmp_path_factory.mktemp("gateway")) as running:
        yield running


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


def test_kernel_runs_behind_the_gateway(gateway: KernelGateway) -> None:
    base, token = gateway.base, gateway.token
    specs = gateway.request("GET", "/api/kernelspecs")
    assert "pyodide-sandbox" in specs["kernelspecs"]
    kernel = gateway.request("POST", "/api/kernels", {"name": "pyodide-sandbox"})
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
        gateway.request("DELETE", f"/api/kernels/{kernel['id']}")


def test_kernels_are_listed_with_the_token_and_refused_without_it(gateway: KernelGateway) -> None:
    """With --KernelGatewayApp.list_kernels=True (JupyterLab polls GET /api/kernels), the kernels are listed to
    requests bearing the gateway's auth token; a request without it gets 401, and so does one with another."""
    kernel = gateway.request("POST", "/api/kernels", {"name": "pyodide-sandbox"})
    try:
        listed = gateway.request("GET", "/api/kernels")
        assert [(k["id"], k["name"]) for k in listed] == [(kernel["id"], "pyodide-sandbox")]
        for token in ("", "not-" + gateway.token):
            with pytest.raises(urllib.error.HTTPError) as refused:
                gateway.request("GET", "/api/kernels", token=token)
            assert refused.value.code == 401
    finally:
        gateway.request("DELETE", f"/api/kernels/{kernel['id']}")
    assert gateway.request("GET", "/api/kernels") == []
