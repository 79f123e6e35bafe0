"""A real Jupyter Enterprise Gateway 3.3.0 on 127.0.0.1 for the tests, as bench/kernel_gateway.py is a Kernel
Gateway: its own port, auth token (`--EnterpriseGatewayApp.auth_token`), `list_kernels` on, and its own Jupyter
config folder, whose sandbox_kernel_config.py is what its kernels run with.

EG needs an older jupyter_client and jupyter_server than this kernel, so it is installed once into a virtual
environment of its own in a cache folder (SANDBOX_KERNEL_TEST_CACHE, else ~/.cache/sandbox-kernel-tests) and
reused; its sdist (hash-checked) gives the files the tests read from it (launch_kubernetes.py, the Helm chart).
Tests that need it are skipped only when it cannot be installed (no network).

Its one kernelspec is this kernel through `sandbox-kernel launch-eg`, by EG's DistributedProcessProxy with
remote_hosts = 127.0.0.1: EG starts the launcher on this machine without SSH (`ip_is_local`) and then speaks the
whole remote protocol (its response address and public key, the sealed connection info, interrupts and stops over
the launcher's comm port), as KubernetesProcessProxy does with a kernel's pod.
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ssh_hosts
from kernel_gateway import KernelGateway, free_port, running
from sandbox_kernel.enterprise_gateway import kernelspecs

EG_VERSION = "3.3.0"
EG_SDIST = f"jupyter_enterprise_gateway-{EG_VERSION}.tar.gz"
EG_SDIST_SHA256 = "58d61fef0f30d8010553bf3755c7d205c072383849c416916b37d3ef940725b7"
SDIST_FILES = {  # what the tests read from EG's sdist (the wheel has neither)
    "launch_kubernetes.py": "etc/kernel-launchers/kubernetes/scripts/launch_kubernetes.py",
    "values.yaml": "etc/kubernetes/helm/enterprise-gateway/values.yaml",
    "deployment.yaml": "etc/kubernetes/helm/enterprise-gateway/templates/deployment.yaml",
}
CACHE = Path(os.environ.get("SANDBOX_KERNEL_TEST_CACHE") or Path.home() / ".cache" / "sandbox-kernel-tests")
PORT_RANGE = (42000, 43999)  # EG's kernelspec port range for the tests' kernels (EG wants >= 1000 ports)
START_SECONDS = 180  # a kernel start through EG on a loaded machine
COMMAND = str(
    Path(sys.executable).with_name("sandbox-kernel")
)  # this venv's `sandbox-kernel`, the kernelspec's argv[0]
KERNEL_USERNAME = "sandbox-test"  # EG refuses its own user when that is root, as it may be here
NETWORK_TROUBLE = (
    "No matching distribution",
    "Could not find a version",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
    "Connection refused",
    "timed out",
)


@dataclass(frozen=True)
class EGInstall:
    python: Path  # EG's virtual environment's python
    sdist: Path  # the folder with SDIST_FILES


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _build(folder: Path) -> None:
    """EG in its own venv, and the files of its sdist; pytest.skip when pip cannot reach an index."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    done = _run([sys.executable, "-m", "venv", str(folder / "venv")], 300)
    assert done.returncode == 0, done.stderr
    python = folder / "venv" / "bin" / "python"
    steps = [
        [str(python), "-m", "pip", "install", "-q", f"jupyter_enterprise_gateway=={EG_VERSION}"],
        [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(folder / "dl"),
         f"jupyter_enterprise_gateway=={EG_VERSION}"],
    ]  # fmt: skip
    for argv in steps:
        done = _run(argv, 1200)
        if done.returncode != 0:
            output = done.stdout + done.stderr
            if any(sign in output for sign in NETWORK_TROUBLE):
                pytest.skip(f"Enterprise Gateway {EG_VERSION} cannot be installed here: {output.strip()[-500:]}")
            raise AssertionError(f"{' '.join(argv)} failed:\n{output[-3000:]}")
    sdist = folder / "dl" / EG_SDIST
    assert hashlib.sha256(sdist.read_bytes()).hexdigest() == EG_SDIST_SHA256, f"{sdist} is not EG {EG_VERSION}'s"
    with tarfile.open(sdist) as tar:
        for name, member in SDIST_FILES.items():
            source = tar.extractfile(f"jupyter_enterprise_gateway-{EG_VERSION}/{member}")
            assert source is not None, member
            (folder / "sdist").mkdir(exist_ok=True)
            (folder / "sdist" / name).write_bytes(source.read())
    (folder / "complete").write_text(EG_VERSION)


def installed() -> EGInstall:
    """EG's venv, built once per cache folder (a lock keeps concurrent test runs from building it twice)."""
    folder = CACHE / f"enterprise-gateway-{EG_VERSION}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"enterprise-gateway-{EG_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((folder / "sdist" / name).exists() for name in SDIST_FILES) or not (folder / "complete").exists():
            _build(folder)
    return EGInstall(folder / "venv" / "bin" / "python", folder / "sdist")


@dataclass
class EnterpriseGateway(KernelGateway):
    """A running EG (its log is the folder's gateway.log too); its launchers' logs are in `kernel_logs`."""

    kernel_logs: Path  # EG_KERNEL_LOG_DIR: each launcher's stdout and stderr, kernel-<id>.log
    kernel_name = kernelspecs.DISTRIBUTED_NAME
    request_seconds = float(START_SECONDS)  # a kernel's start or restart answers once the launcher reported

    def client_options(self) -> dict[str, Any]:
        """Pointing Sandbox/AsyncSandbox at EG takes its kernelspec's name and a KERNEL_USERNAME EG accepts."""
        return {
            **super().client_options(),
            "kernel_name": self.kernel_name,
            "gateway_env": {"KERNEL_USERNAME": KERNEL_USERNAME},
        }

    def start_kernel(self) -> str:
        """A kernel started over EG's REST API; its id."""
        body = {"name": self.kernel_name, "env": {"KERNEL_USERNAME": KERNEL_USERNAME}}
        return str(self.request("POST", "/api/kernels", body)["id"])

    def launcher_pids(self, kernel_id: str) -> list[int]:
        """The running `sandbox-kernel launch-eg` of one of its kernels (a list, to show there is one)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    words = (entry / "cmdline").read_bytes().split(b"\0")
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if b"launch-eg" in words and kernel_id.encode() in words and state != "Z":
                    pids.append(int(entry.name))
        return pids

    def kernel_log(self, kernel_id: str) -> str:
        path = self.kernel_logs / f"kernel-{kernel_id}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def story(self, kernel_id: str) -> str:
        """What to show when a test fails: the launcher's log and the end of EG's."""
        return f"\n--- launcher log:\n{self.kernel_log(kernel_id)[-4000:]}\n--- EG log:\n{self.log()[-4000:]}"


def gate_options(log_folder: Path) -> str:
    """EG's key's authorized_keys options on SSH hosts made here (tests/ssh_hosts.py): its forced command is the
    gate (this venv's `sandbox-kernel eg-ssh`, with this user's home), and nothing else is allowed."""
    home = os.path.expanduser("~")  # the kernels' home on every host: the same files, its Pyodide cache, its key
    return f'command="/usr/bin/env HOME={home} {COMMAND} eg-ssh --log-folder {log_folder}",restrict'


@contextmanager
def ssh_gateway(folder: Path, eg: EGInstall, hosts: ssh_hosts.Hosts) -> Iterator[EnterpriseGateway]:
    """EG whose kernelspec starts kernels on `hosts` over SSH as root, with their key (paramiko reads HOME/.ssh)."""
    env = {"HOME": str(hosts.client_home), "EG_REMOTE_USER": "root"}
    addresses = [host.address for host in hosts.hosts]
    with enterprise_gateway(folder, eg, env=env, remote_hosts=addresses, response_ip=hosts.bridge_address) as gateway:
        yield gateway


@contextmanager
def enterprise_gateway(
    folder: Path, eg: EGInstall, kernel_config: str = "", env: dict[str, str] | None = None,
    remote_hosts: list[str] | None = None, response_ip: str = "127.0.0.1",
    write_kernelspec: Callable[[Path], str] | None = None,
) -> Iterator[EnterpriseGateway]:  # fmt: skip
    """EG started in `folder` whose kernels read `kernel_config` as their sandbox_kernel_config.py and get `env`
    (through EG_INHERITED_ENVS, as an operator passes variables on); stopped at the end. With `remote_hosts`, its
    kernelspec starts kernels there over SSH (tests/ssh_hosts.py), and EG listens for them on `response_ip`.
    `write_kernelspec` writes another kernelspec into the kernels folder it is given instead, and names it."""
    config = folder / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "sandbox_kernel_config.py").write_text(kernel_config)
    # EG refuses root by default; its own user too here, so that a client without KERNEL_USERNAME is refused
    # whoever runs the tests (clients name one: client_options, start_kernel)
    refused = sorted({"root", getpass.getuser()})
    (config / "jupyter_enterprise_gateway_config.py").write_text(
        f"c.EnterpriseGatewayApp.unauthorized_users = set({refused!r})\n"
    )
    kernels = folder / "jupyter" / "kernels"
    kernels.mkdir(parents=True)
    if write_kernelspec is not None:
        kernel_name = write_kernelspec(kernels)
    else:
        kernel_name = kernelspecs.DISTRIBUTED_NAME
        (kernels / kernel_name).mkdir()
        kernel_json = kernelspecs.distributed_kernel_json(
            COMMAND, remote_hosts or ["127.0.0.1"], port_range="{}..{}".format(*PORT_RANGE),
            ip=None if remote_hosts else "127.0.0.1",
        )  # fmt: skip
        (kernels / kernel_name / "kernel.json").write_text(json.dumps(kernel_json, indent=2))
    (folder / "logs").mkdir()
    extra = env or {}
    # A kernel started with an "env" in its request (as EG's clients must, for KERNEL_USERNAME) gets only EG's
    # inherited variables, the kernelspec's env and the request's KERNEL_* ones.
    inherited = [
        "PATH", "HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", *extra,
        *(k for k in os.environ if k.startswith(("COV", "SANDBOX_KERNEL_", "XDG_"))),
    ]  # fmt: skip
    full_env = {
        **os.environ,
        **extra,
        "JUPYTER_PATH": str(folder / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(folder / "runtime"),
        "EG_RESPONSE_IP": response_ip,  # else EG binds its response port on this machine's public address
        "EG_RESPONSE_PORT": str(free_port()),
        "EG_KERNEL_LOG_DIR": str(folder / "logs"),
        "EG_INHERITED_ENVS": ",".join(inherited),
        "EG_KERNEL_LAUNCH_TIMEOUT": str(START_SECONDS),
    }
    port, token = free_port(), secrets.token_hex(16)
    with open(folder / "gateway.log", "wb") as log:
        proc = subprocess.Popen(
            [
                str(eg.python), "-m", "enterprise_gateway", "--EnterpriseGatewayApp.ip=127.0.0.1",
                f"--EnterpriseGatewayApp.port={port}", "--EnterpriseGatewayApp.port_retries=0",
                f"--EnterpriseGatewayApp.auth_token={token}", "--EnterpriseGatewayApp.list_kernels=True",
                "--log-level=DEBUG",
            ],
            cwd=folder, env=full_env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    gateway = EnterpriseGateway(proc, port, token, folder, folder / "logs")
    gateway.kernel_name = kernel_name
    with running(gateway, "Enterprise Gateway", stop_seconds=60, start_seconds=90) as started:
        yield started
