"""`sandbox-kernel mcp --gateway-url`, driven by the MCP SDK's own client: its sandbox is a kernel on a real
Jupyter Kernel Gateway or a real Enterprise Gateway (127.0.0.1, auth token from the environment; for EG its
kernelspec's name with --kernel-name and KERNEL_USERNAME with --gateway-env), with the gateway machine's
settings."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import pytest

from eg_server import KERNEL_USERNAME, EnterpriseGateway, enterprise_gateway, installed
from kernel_gateway import KernelGateway, kernel_gateway
from sandbox_kernel.client.gateway_rest import TOKEN_ENV
from test_mcp import Client, server_command, stdio


@pytest.fixture(scope="module", params=["kernel-gateway", "enterprise-gateway"])
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGateway]:
    folder = tmp_path_factory.mktemp(f"gateway-mcp-{request.param}")
    (folder / "data").mkdir()
    config = (
        "c.SandboxKernel.cell_timeout = 5\n"
        f"c.SandboxKernel.mounts = ['{folder / 'data'}:/data:rw']\n"
        "c.SandboxKernel.skills = ['KeyValueSkill']\n"
        "c.SandboxKernel.spare_sandbox = False\n"
    )
    if request.param == "kernel-gateway":
        with kernel_gateway(folder, config) as running:
            yield running
    else:
        with enterprise_gateway(folder, installed(), config) as eg:
            yield eg


def gateway_options(gateway: KernelGateway) -> list[str]:
    """The server's options for `gateway`'s kernels: its URL, and for EG its kernelspec and KERNEL_USERNAME."""
    if isinstance(gateway, EnterpriseGateway):
        eg = ["--kernel-name", gateway.kernel_name, "--gateway-env", f"KERNEL_USERNAME={KERNEL_USERNAME}"]
        return ["--gateway-url", gateway.url, *eg]
    return ["--gateway-url", gateway.url]


@pytest.fixture(scope="module")
def mcp(gateway: KernelGateway) -> Iterator[Client]:
    env = {**os.environ, TOKEN_ENV: gateway.token}  # never on the command line
    client = stdio(*gateway_options(gateway), env=env)
    yield client
    client.close()


def test_the_tools_run_on_a_kernel_of_the_gateway(mcp: Client, gateway: KernelGateway) -> None:
    assert mcp.text("run_python", code="kept = 41\nimport sys\nprint(sys.platform)") == "emscripten"
    assert mcp.text("run_python", code="kept + 1") == "Out: 42"
    [kernel] = gateway.request("GET", "/api/kernels")  # the server's one sandbox
    assert kernel["name"] == gateway.kernel_name
    assert "KeyValueSkill: " in mcp.text("list_skills")  # the gateway's configuration


def test_an_error_is_a_tool_error(mcp: Client) -> None:
    assert re.match(r"\[error\] ValueError: bad value\n", mcp.error("run_python", code="raise ValueError('bad value')"))


def test_the_gateways_cell_timeout_stops_a_runaway_cell(mcp: Client) -> None:
    result = mcp.call("run_python", code="while True:\n    pass")
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["timed_out"] is True


def test_input_gets_end_of_input(mcp: Client) -> None:
    assert mcp.error("run_python", code="input('name? ')").startswith("[error] EOFError")


def test_checkpoint_and_restore_through_the_gateway(mcp: Client) -> None:
    mcp.text("run_python", code="saved = 'first'\nwith open('/tmp/note.txt', 'w') as f:\n    f.write('kept')")
    assert mcp.text("checkpoint", name="one").startswith("checkpoint 'one': ")
    mcp.text("run_python", code="saved = 'second'\nimport os\nos.remove('/tmp/note.txt')")
    assert mcp.text("restore", name="one") == "Restored checkpoint 'one': what ran since is gone."
    assert mcp.text("run_python", code="saved, open('/tmp/note.txt').read()") == "Out: ('first', 'kept')"


def test_files_move_within_the_gateway_machines_mounts(mcp: Client, gateway: KernelGateway) -> None:
    assert mcp.text("upload_file", path="/data/notes.csv", content="héllo\n") == "Wrote 7 bytes to /data/notes.csv."
    assert (gateway.folder / "data" / "notes.csv").read_bytes() == "héllo\n".encode()
    assert mcp.text("download_file", path="/data/notes.csv") == "héllo\n"
    assert "is not a file path inside a mount" in mcp.error("download_file", path="/etc/passwd")


def test_the_token_comes_from_a_named_variable_and_a_wrong_one_is_named_by_status(gateway: KernelGateway) -> None:
    env = {**os.environ, "MY_GATEWAY_TOKEN": "not-" + gateway.token}
    env.pop(TOKEN_ENV, None)
    client = stdio(*gateway_options(gateway), "--gateway-token-env", "MY_GATEWAY_TOKEN", env=env)
    try:
        text = client.error("run_python", code="1")
    finally:
        client.close()
    assert f"the gateway at {gateway.url} refused POST /api/kernels: HTTP 401 Unauthorized" in text
    assert gateway.token not in text


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (
            ["--SandboxKernel.cell_timeout=3"],
            "--SandboxKernel.cell_timeout=...: kernel settings cannot be given with --gateway-url",
        ),
        (["--gateway-token-env", "NO_SUCH_VARIABLE"], "--gateway-token-env NO_SUCH_VARIABLE: the environment has no"),
        (["--gateway-env", "KERNEL_USERNAME"], "--gateway-env 'KERNEL_USERNAME': give NAME=VALUE"),
    ],
)
def test_options_a_gateway_cannot_use_stop_the_server(arguments: list[str], said: str) -> None:
    done = subprocess.run(
        server_command("--gateway-url", "http://127.0.0.1:9", *arguments), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr.startswith(f"sandbox-kernel mcp: {said}"), done.stderr
