"""Shared tools of the attack suite: secrets, leak checks, attack cells, a recording listener.

Every attack runs real guest code in a real kernel and then checks two things: the promise
(a refusal with the expected error, or a clean restart that the user is told about) and that
nothing leaked (no secret in any message of the cell, no effect on the host). After each one
the kernel must still answer ``1+1``.

The suite's modules import this file as ``attack_kit`` and the project's fixtures and helpers
from the parent ``tests/conftest.py`` (``from conftest import ...``), which pytest has already
loaded as the module ``conftest`` when it collects ``tests/security``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from conftest import START_TIMEOUT, Run, execute
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

# ---- secrets and leak checks -----------------------------------------------------------


def token(label: str) -> str:
    """A random secret that cannot appear in any output by chance."""
    return f"SBK-{label}-{secrets.token_hex(16)}"


def dump(run: Run) -> str:
    """Everything the frontend received for one cell (reply and IOPub), as one string."""
    return json.dumps(
        {"reply": run.reply["content"], "outputs": [m["content"] for m in run.outputs]}, default=str, ensure_ascii=False
    )


def assert_no_leak(run: Run, *needles: str) -> None:
    """None of `needles` appears in any message the cell produced."""
    text = dump(run)
    for needle in needles:
        assert needle, "empty needle"
        assert needle not in text, f"LEAK: {needle[:24]}... reached the frontend:\n{text[:3000]}"


def result(run: Run) -> str:
    """The text/plain execute_result of a successful cell."""
    assert run.content["status"] == "ok", run.content
    results = run.of_type("execute_result")
    assert results, f"no execute_result: {dump(run)[:2000]}"
    return results[0]["data"]["text/plain"]


def assert_alive(kc: BlockingKernelClient, timeout: float = 120) -> None:
    """The kernel still answers `1+1` (after a restart, if there was one)."""
    run = execute(kc, "1+1", timeout=timeout)
    assert result(run) == "2", dump(run)[:2000]


def error(run: Run) -> tuple[str, str]:
    assert run.content["status"] == "error", f"the attack was not refused: {dump(run)[:2000]}"
    return run.content["ename"], run.content["evalue"]


def assert_refused(run: Run, enames: Iterable[str], *fragments: str) -> None:
    """The cell failed with one of `enames`, and its message contains every fragment."""
    ename, evalue = error(run)
    enames = tuple(enames)
    assert ename in enames, f"expected {enames}, got {ename}: {evalue[:1000]}"
    for fragment in fragments:
        assert fragment in evalue, f"{fragment!r} not in {ename}: {evalue[:1000]}"


def attack(kc: BlockingKernelClient, code: str, *needles: str, timeout: float = 60) -> Run:
    """Run an attack cell; assert that no needle leaked and that the kernel survived."""
    run = execute(kc, code, timeout=timeout)
    assert_no_leak(run, *needles)
    assert_alive(kc)
    return run


# Refusals by Deno's permissions reach Python as JsException("NotCapable: Requires ... access").
DENIED = ("JsException",)


def assert_denied(run: Run, access: str = "") -> None:
    """Refused by Deno's permission system (`access`: 'read', 'write', 'net', 'env', 'run', ...)."""
    ename, evalue = error(run)
    assert ename in DENIED, f"expected a Deno refusal, got {ename}: {evalue[:1000]}"
    assert "NotCapable" in evalue or "Requires" in evalue or "escalate" in evalue, evalue[:1000]
    if access:
        assert f"{access} access" in evalue or f"--allow-{access}" in evalue, evalue[:1000]


# ---- guest code builders ----------------------------------------------------------------


def os_layers(kc: BlockingKernelClient) -> dict[str, Any]:
    """The OS layers confining the kernel's sandbox, as its kernel_info reports them."""
    return kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["os_sandbox"].get("layers", {})


def private_root(kc: BlockingKernelClient) -> bool:
    """Whether the sandbox sees only its private root (the namespaces layer): host files are absent there."""
    return "private root" in os_layers(kc).get("namespaces", [])


def js_cell(body: str) -> str:
    """A cell that runs `body` as the body of an async JS function in the worker and returns its result."""
    return f"import pyodide.code\nawait pyodide.code.run_js({f'(async () => {{ {body} }})()'!r})"


def q(value: Any) -> str:
    """A JS (and Python) literal for `value`."""
    return json.dumps(str(value) if isinstance(value, Path) else value)


# Plain-Python attacks, shared with the meta-tests that run them in ipykernel's `python3` kernel
# (where they must succeed: proof that the sandbox tests would catch a missing sandbox).
def py_read_file(path: Path | str) -> str:
    return f"open({q(path)}).read()"


def py_env(name: str) -> str:
    return f"import os\nstr(os.environ.get({q(name)}))"


def py_subprocess_touch(marker: Path) -> str:
    return f"import subprocess\nsubprocess.run(['/bin/sh', '-c', 'touch ' + {q(marker)}])"


def py_write_file(path: Path) -> str:
    return f"open({q(path)}, 'w').write('pwned')"


def py_socket_get(port: int) -> str:
    return (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
        "s.recv(100)"
    )


def py_urlopen(port: int) -> str:
    return f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=5).read()"


# ---- host-side checks -------------------------------------------------------------------


def fingerprint(path: Path) -> tuple[str, int, int, float] | None:
    """sha256, size, mode and mtime of a host file (None if it is gone)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_size, st.st_mode, st.st_mtime


def tree(path: Path) -> dict[str, tuple[str, int, int, float] | str | None]:
    """Fingerprints of everything below `path` (symlinks by target, not followed)."""
    found: dict[str, tuple[str, int, int, float] | str | None] = {}
    for entry in sorted(path.rglob("*")):
        rel = str(entry.relative_to(path))
        if entry.is_symlink():
            found[rel] = "-> " + os.readlink(entry)
        elif entry.is_file():
            found[rel] = fingerprint(entry)
        else:
            found[rel] = "dir"
    return found


def process_environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


class UdpListener:
    """A UDP socket on 127.0.0.1 that records datagrams."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def received(self) -> list[bytes]:
        """The datagrams received so far: on loopback a datagram is delivered as it is sent, long before the
        cell that sent it replies, so none is still on its way when a test asks (no waiting)."""
        got = []
        while True:
            try:
                got.append(self.sock.recv(4096))
            except BlockingIOError:
                return got

    def close(self) -> None:
        self.sock.close()


def loopback_hostname() -> str | None:
    """A host name other than 'localhost' that resolves to a loopback address here, if any."""
    candidates = [socket.gethostname(), "localhost.localdomain", "ip6-localhost"]
    for name in candidates:
        if not name or name == "localhost":
            continue
        try:
            infos = socket.getaddrinfo(name, None, socket.AF_INET)
        except OSError:
            continue
        if infos and all(info[4][0].startswith("127.") for info in infos):
            return name
    return None


def start_refused(arguments: list[str], tmp: Path, wait: float = 20) -> str | None:
    """Start the kernel process with `arguments`: its stderr if it refuses to start, None if it runs.

    A kernel that accepts the settings keeps running (waiting for a client); it is stopped after `wait`.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox_kernel", "-f", str(tmp / f"kernel-{secrets.token_hex(4)}.json"), *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    return err if proc.returncode != 0 else None


def start_or_refusal(
    arguments: list[str], tmp: Path, env: dict[str, str] | None = None
) -> tuple[KernelManager, BlockingKernelClient] | str:
    """A running sandbox kernel with these settings, or the message with which it refused them."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(extra_arguments=arguments, **({"env": {**os.environ, **env}} if env else {}))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
    except RuntimeError:
        kc.stop_channels()
        km.cleanup_resources()
        message = start_refused(arguments, tmp)
        assert message is not None, "the kernel died at start, yet runs when started directly"
        return message
    # Settings it cannot use: the kernel stays up (so that frontends show why) but starts no sandbox.
    problem = kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["settings_error"]
    if problem:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        return problem
    return km, kc


# ---- ipykernel's own kernel, for the meta-tests ------------------------------------------


def start_python3(env: dict[str, str] | None = None) -> tuple[KernelManager, BlockingKernelClient]:
    """ipykernel's `python3` kernel: no sandbox at all."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(**({"env": {**os.environ, **env}} if env else {}))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=START_TIMEOUT)
    return km, kc
