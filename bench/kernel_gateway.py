"""A real Jupyter Kernel Gateway on 127.0.0.1, for the tests and bench/load.py: its own port, auth token, `list_kernels` on (`--JupyterWebsocketPersonality.list_kernels=True`: KernelGatewayApp has no such option), and its
own Jupyter config folder, whose sandbox_kernel_config.py is what the gateway's kernels run with; IOPub not
rate-limited (as docs/gateway.md sets it up)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

JUPYTER = str(Path(sys.executable).parent / "jupyter")
START_SECONDS = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class KernelGateway:
    """A running gateway: its process, address and token."""

    proc: subprocess.Popen[bytes]
    port: int
    token: str
    folder: Path  # its working folder: config/, the log gateway.log
    kernel_name = "pyodide-sandbox"  # the kernelspec its clients ask for
    request_seconds = 60.0  # for one REST request of the tests'

    @property
    def base(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.base}"

    def client_options(self) -> dict[str, Any]:
        """The keywords that point Sandbox/AsyncSandbox at this gateway."""
        return {"gateway_url": self.url, "gateway_token": self.token}

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
        """The JSON answer of a REST request (urllib.error.HTTPError for an error status)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Authorization", f"token {self.token if token is None else token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=self.request_seconds) as resp:
            text = resp.read().decode()
        return json.loads(text) if text else {}

    def kernel_pids(self, kernel_id: str) -> list[int]:
        """The processes of one of its kernels (their command line names the kernel's connection file)."""
        mark = f"kernel-{kernel_id}.json".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if mark in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def log(self) -> str:
        return (self.folder / "gateway.log").read_text(errors="replace")


@contextmanager
def kernel_gateway(folder: Path, kernel_config: str = "", env: dict[str, str] | None = None) -> Iterator[KernelGateway]:
    """A gateway started in `folder` whose kernels read `kernel_config` as their sandbox_kernel_config.py; stopped
    at the end."""
    config = folder / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "sandbox_kernel_config.py").write_text(kernel_config)
    port, token = free_port(), secrets.token_hex(16)
    with open(folder / "gateway.log", "wb") as log:
        proc = subprocess.Popen(
            [
                JUPYTER, "kernelgateway", "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={port}",
                f"--KernelGatewayApp.auth_token={token}", "--KernelGatewayApp.port_retries=0",
                "--JupyterWebsocketPersonality.list_kernels=True", "--ZMQChannelsWebsocketConnection.limit_rate=False",
            ],
            cwd=folder,
            env={**os.environ, "JUPYTER_CONFIG_DIR": str(config), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )  # fmt: skip
    with running(KernelGateway(proc, port, token, folder), "the kernel gateway", stop_seconds=20) as gateway:
        yield gateway


G = TypeVar("G", bound=KernelGateway)


@contextmanager
def running(gateway: G, what: str, stop_seconds: float, start_seconds: float = START_SECONDS) -> Iterator[G]:
    """`gateway` once it answers (within `start_seconds`); terminated at the end (killed after `stop_seconds`)."""
    try:
        deadline = time.monotonic() + start_seconds
        while True:
            try:
                gateway.request("GET", "/api")
                break
            except (OSError, urllib.error.URLError):
                if gateway.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start:\n{gateway.log()[-5000:]}") from None
                time.sleep(0.3)
        yield gateway
    finally:
        gateway.proc.terminate()
        try:
            gateway.proc.wait(timeout=stop_seconds)
        except subprocess.TimeoutExpired:
            gateway.proc.kill()
            gateway.proc.wait(timeout=10)
