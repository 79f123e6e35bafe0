"""podman's Docker-compatible API for the tests (`podman system service`), as EG's DockerProcessProxy reaches a
Docker engine: a socket of its own in a test's folder, the service stopped at the end."""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

READY_SECONDS = 30


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=5)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(self.path))


def ping(path: Path) -> bool:
    """Whether the API on `path` answers Docker's /_ping with OK."""
    connection = _UnixConnection(path)
    try:
        connection.request("GET", "/_ping")
        return connection.getresponse().read() == b"OK"
    except OSError:
        return False
    finally:
        connection.close()


@contextmanager
def podman_api(folder: Path) -> Iterator[str]:
    """The service on `folder`/podman.sock; yields DOCKER_HOST for it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "podman.sock"
    with open(folder / "podman-service.log", "wb") as log:
        proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{path}"],
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not ping(path):  # the service makes its socket when it is ready; nothing to wait on but the socket
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"podman system service did not answer: {(folder / 'podman-service.log').read_text()[-2000:]}"
                )
            time.sleep(0.1)
        yield f"unix://{path}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
