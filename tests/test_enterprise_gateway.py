"""The EG launcher against EG's launch protocol: Jupyter Enterprise Gateway 3.3.0 itself, in its own virtual
environment (its pins cannot share ours), runs this kernel through `sandbox-kernel launch-eg`.

EG's DistributedProcessProxy with remote_hosts = 127.0.0.1 starts the launcher on this machine without SSH
(`ip_is_local`) and then speaks the whole remote protocol: its ResponseManager's public key and response address
on the launcher's command line, the sealed connection info back, interrupts and stops over the comm port. Over
EG's REST API and websocket a kernel is started, runs cells, is interrupted (its state kept), restarted and shut
down, and no launcher, kernel or Deno process is left. The comm port takes garbage without harm. EG's own
decryption opens what the launcher seals, and EG's own launch_kubernetes.py renders the Kubernetes kernelspec's
pod template into a pod whose command is the launcher with EG's values, and whose namespace, image, service account,
user, resources and checkpoint key stay the operator's whatever a client's KERNEL_* variables say.

EG and its sdist's files come from tests/eg_server.py (installed once into a cache folder); the tests are skipped
only when EG cannot be installed (no network).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import websocket
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa
from jupyter_client.blocking.client import BlockingKernelClient

from eg_payload import eg_public_key, new_key, open_payload
from eg_server import (
    COMMAND,
    EG_VERSION,
    PORT_RANGE,
    START_SECONDS,
    EGInstall,
    EnterpriseGateway,
    enterprise_gateway,
    installed,
)
from kernel_gateway import free_port
from sandbox_kernel.checkpoints.file import KEY_ENV as CHECKPOINT_KEY_ENV
from sandbox_kernel.enterprise_gateway import arguments, kernelspecs
from sandbox_kernel.enterprise_gateway.payload import load_public_key, seal

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "enterprise-gateway"
GONE_SECONDS = 60


@pytest.fixture(scope="session")
def eg() -> EGInstall:
    return installed()


@pytest.fixture(scope="module")
def gateway(eg: EGInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnterpriseGateway]:
    """EG on 127.0.0.1 with one kernelspec: this kernel through the launcher, by DistributedProcessProxy."""
    with enterprise_gateway(tmp_path_factory.mktemp("enterprise-gateway"), eg) as running:
        yield running


class Channels:
    """EG's websocket for one kernel: the Jupyter protocol as JSON messages."""

    def __init__(self, gw: EnterpriseGateway, kernel_id: str) -> None:
        self.ws = websocket.create_connection(
            f"ws://{gw.base}/api/kernels/{kernel_id}/channels",
            header=[f"Authorization: token {gw.token}"],
            timeout=START_SECONDS,
        )

    def close(self) -> None:
        self.ws.close()

    def execute(self, code: str, on_stream: Callable[[], object] | None = None) -> tuple[dict[str, Any], str]:
        """The execute_reply's content and the cell's stdout; `on_stream` is called at its first output."""
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "t", "session": "s", "version": "5.3"}
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
        self.ws.send(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}))  # fmt: skip
        reply, idle, stdout = None, False, []
        while reply is None or not idle:
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "execute_reply":
                reply = msg["content"]
            elif msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            elif msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                if on_stream is not None and not stdout:
                    on_stream()
                stdout.append(msg["content"]["text"])
        return reply, "".join(stdout)


@contextlib.contextmanager
def channels(gw: EnterpriseGateway, kernel_id: str) -> Iterator[Channels]:
    ch = Channels(gw, kernel_id)
    try:
        yield ch
    finally:
        ch.close()


def launcher_of(kernel_id: str) -> psutil.Process:
    """The one running `sandbox-kernel launch-eg` process of this kernel."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "launch-eg" in cmdline and kernel_id in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
            found.append(proc)
    assert len(found) == 1, f"launchers of {kernel_id}: {[p.pid for p in found]}"
    return found[0]


def family(launcher: psutil.Process) -> list[psutil.Process]:
    """The launcher, its kernel and the kernel's Deno processes."""
    return [launcher, *launcher.children(recursive=True)]


def assert_gone(procs: list[psutil.Process], why: str) -> None:
    """Every process ended (a zombie not yet reaped by EG counts as ended) within GONE_SECONDS."""
    deadline = time.monotonic() + GONE_SECONDS
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    assert not alive, f"still running {GONE_SECONDS}s after {why}: {[(p.pid, p.name()) for p in alive]}"


def listening_ports(proc: psutil.Process) -> set[int]:
    return {c.laddr.port for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


LOOP = "import time\nx = 1\nprint('looping', flush=True)\nwhile True:\n    x += 1\n    time.sleep(0.01)\n"


def interrupted(gw: EnterpriseGateway, ch: Channels, kernel_id: str) -> dict[str, Any]:
    """Run LOOP and interrupt it through EG once it prints; the reply."""
    reply, out = ch.execute(LOOP, on_stream=lambda: gw.request("POST", f"/api/kernels/{kernel_id}/interrupt"))
    assert out == "looping\n"
    return reply


def test_eg_starts_interrupts_restarts_and_shuts_down_the_kernel_through_the_launcher(gateway: EnterpriseGateway):
    gw = gateway
    kernel_id = gw.start_kernel()
    try:
        launcher = launcher_of(kernel_id)
        kernel = launcher.children()[0]
        with channels(gw, kernel_id) as ch:
            reply, out = ch.execute("import sys\nprint('through EG', sys.platform)")
            assert reply["status"] == "ok" and out == "through EG emscripten\n", gw.story(kernel_id)
            first = family(launcher)  # the sandbox is up once a cell has run
            assert any(p.name().startswith("deno") for p in first), [p.name() for p in first]

            reply = interrupted(gw, ch, kernel_id)
            assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", gw.story(kernel_id)
            reply, out = ch.execute("print(x > 1)")
            assert (reply["status"], out) == ("ok", "True\n"), "the kernel's state is kept across the interrupt"
        assert kernel.is_running() and launcher_of(kernel_id).pid == launcher.pid
        assert "comm port: interrupt requested" in gw.kernel_log(kernel_id)
        (line,) = re.findall(r"ports shell=(\d+) iopub=(\d+) stdin=(\d+) hb=(\d+) control=(\d+), comm port (\d+)",
                             gw.kernel_log(kernel_id))  # fmt: skip
        *channel_ports, comm_port = map(int, line)
        assert all(PORT_RANGE[0] <= p <= PORT_RANGE[1] for p in [*channel_ports, comm_port]), line
        assert set(channel_ports) <= listening_ports(kernel) and listening_ports(launcher) == {comm_port}

        gw.request("POST", f"/api/kernels/{kernel_id}/restart")
        assert_gone(first, "a restart")
        assert launcher_of(kernel_id).pid != launcher.pid
        with channels(gw, kernel_id) as ch:
            reply, out = ch.execute("print('x' in globals())")
            assert (reply["status"], out) == ("ok", "False\n"), gw.story(kernel_id)
        second = family(launcher_of(kernel_id))
        assert any(p.name().startswith("deno") for p in second), [p.name() for p in second]
    finally:
        gw.request("DELETE", f"/api/kernels/{kernel_id}")
    assert_gone(second, "a shutdown")
    assert kernel_id not in [k["id"] for k in gw.request("GET", "/api/kernels")]
    assert "stopping the kernel" in gw.kernel_log(kernel_id) or "the kernel exited" in gw.kernel_log(kernel_id)


GARBAGE = [
    b"not json",
    b"\xff\xfe\x00",
    b'{"signum": 11}',  # SIGSEGV: forwarded, it would kill the kernel
    b'{"signum": "9"}',  # EG's own launcher would int() this and kill itself
    b'{"signum": true}',
    b'{"signum": 0, "signum": 9}',
    b'{"shutdown": true}',
    b"[" * 5000,
    b'{"signum": 0' + b" " * 200_000 + b"}",
]


def send_raw(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the launcher stops reading a request that is too long
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)


def test_the_comm_port_ignores_garbage_and_still_serves_eg(gateway: EnterpriseGateway):
    gw = gateway
    kernel_id = gw.start_kernel()
    try:
        launcher = launcher_of(kernel_id)
        kernel = launcher.children()[0]
        (comm_port,) = listening_ports(launcher)
        with channels(gw, kernel_id) as ch:
            assert ch.execute("y = 5")[0]["status"] == "ok", gw.story(kernel_id)
            with socket.create_connection(("127.0.0.1", comm_port), timeout=10):  # says nothing while the rest goes
                for data in GARBAGE:
                    send_raw(comm_port, data)
            deadline = time.monotonic() + 30
            while gw.kernel_log(kernel_id).count("comm port: ignored") < len(GARBAGE) + 1:
                assert time.monotonic() < deadline, gw.story(kernel_id)
                time.sleep(0.2)
            assert launcher.is_running() and kernel.is_running(), gw.story(kernel_id)
            reply, out = ch.execute("print(y)")
            assert (reply["status"], out) == ("ok", "5\n"), "the same kernel, its state kept"
            reply = interrupted(gw, ch, kernel_id)  # EG's requests still come through
            assert reply["ename"] == "KeyboardInterrupt", gw.story(kernel_id)
        assert launcher_of(kernel_id).pid == launcher.pid
        procs = family(launcher)
    finally:
        gw.request("DELETE", f"/api/kernels/{kernel_id}")
    assert_gone(procs, "a shutdown")


DECODE_WITH_EG = """
import json, logging, sys, types
from Cryptodome.PublicKey import RSA
from enterprise_gateway.services.processproxies.processproxy import ResponseManager

key = RSA.generate(ResponseManager.KEY_SIZE)
pem = types.SimpleNamespace(_public_pem=key.publickey().export_key("PEM"))
print(ResponseManager.public_key.fget(pem), flush=True)  # EG's {public_key}, as EG writes it
manager = types.SimpleNamespace(_private_key=key, _response_registry={}, log=logging.getLogger("eg"))
print(json.dumps(ResponseManager._decode_payload(manager, sys.stdin.readline().strip())), flush=True)
"""


def test_egs_response_manager_opens_what_the_launcher_seals(eg: EGInstall):
    proc = subprocess.Popen(
        [str(eg.python), "-c", DECODE_WITH_EG], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    info = {"shell_port": 42001, "key": secrets.token_hex(16), "kernel_id": str(uuid.uuid4()), "comm_port": 42006}
    public_key = proc.stdout.readline().strip()
    proc.stdin.write(seal(info, load_public_key(public_key)).decode() + "\n")
    proc.stdin.close()
    assert json.loads(proc.stdout.readline()) == info
    assert proc.wait(timeout=60) == 0


FAKE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def expand(word: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of $(NAME) in a container's command and args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), word)


def render_pod(eg: EGInstall, tmp_path: Path, client_env: dict[str, str]) -> tuple[dict[str, Any], str, str]:
    """The Kubernetes kernelspec as EG's pod holds it (deploy/enterprise-gateway/ plus EG's launch_kubernetes.py),
    its argv run as EG would with --pod-template (render only: no cluster here), with EG's KERNEL_* values and then
    `client_env` (what a client's start request may set: EG passes any KERNEL_* on); the pod, kernel id, public key."""
    folder = tmp_path / "kernels" / kernelspecs.KUBERNETES_NAME
    shutil.copytree(DEPLOY / kernelspecs.KUBERNETES_NAME, folder)
    shutil.copy(eg.sdist / "launch_kubernetes.py", folder / "scripts")
    spec = json.loads((folder / "kernel.json").read_text())
    kernel_id, public_key = str(uuid.uuid4()), eg_public_key(new_key())
    values = {"{kernel_id}": kernel_id, "{response_address}": "10.1.2.3:8877", "{public_key}": public_key,
              "{port_range}": "0..0"}  # fmt: skip
    argv = [values.get(word, word) for word in spec["argv"]]
    assert argv[1] == f"{kernelspecs.EG_KERNELS}/{kernelspecs.KUBERNETES_NAME}/scripts/launch_kubernetes.py"
    argv[:2] = [str(eg.python), str(folder / "scripts" / "launch_kubernetes.py")]
    (tmp_path / "kubeconfig").write_text(FAKE_KUBECONFIG)
    image = spec["metadata"]["process_proxy"]["config"]["image_name"]
    env = {  # what EG's KubernetesProcessProxy and ContainerProcessProxy put in the launch's environment
        "PATH": os.environ["PATH"], "KUBECONFIG": str(tmp_path / "kubeconfig"), "KERNEL_ID": kernel_id,
        "KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": "enterprise-gateway", "KERNEL_POD_NAME": f"alice-{kernel_id}",
        "KERNEL_SERVICE_ACCOUNT_NAME": "default", "KERNEL_IMAGE": image, "KERNEL_EXECUTOR_IMAGE": image,
        "KERNEL_UID": "1000", "KERNEL_GID": "100", "KERNEL_LANGUAGE": "python", **spec["env"], **client_env,
    }  # fmt: skip
    out = tmp_path / "pod.yaml"
    done = subprocess.run([*argv, "--pod-template", str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(out.read_text()), kernel_id, image


CLIENT_CHOICES = {  # what a hostile client of EG may put in its start request's env
    "KERNEL_NAMESPACE": "kube-system",
    "KERNEL_IMAGE": "evil.example/root-shell:latest",
    "KERNEL_EXECUTOR_IMAGE": "evil.example/root-shell:latest",
    "KERNEL_SERVICE_ACCOUNT_NAME": "cluster-admin",
    "KERNEL_UID": "4242",
    "KERNEL_GID": "4242",
    "KERNEL_CPUS": "64",
    "KERNEL_MEMORY": "500Gi",
    "KERNEL_CPUS_LIMIT": "64",
    "KERNEL_MEMORY_LIMIT": "500Gi",
}


@pytest.mark.parametrize("client_env", [{}, CLIENT_CHOICES], ids=["egs-values", "a-clients-choices"])
def test_egs_launch_kubernetes_renders_the_pod_that_runs_the_launcher(eg: EGInstall, tmp_path: Path, client_env):
    """The pod runs the launcher with EG's values and the kernel's settings; what the operator fixed (namespace,
    image, service account, user, resources, seccomp and AppArmor, the checkpoint key) stays so whatever a client's
    KERNEL_* variables say."""
    pod, kernel_id, image = render_pod(eg, tmp_path, client_env)
    ours = kernelspecs.PodSettings()
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == ours.namespace == "enterprise-gateway"
    assert pod["metadata"]["labels"] | {"kernel_id": kernel_id, "component": "kernel"} == pod["metadata"]["labels"]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "default" and spec["automountServiceAccountToken"] is False
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}  # the seccomp layer's only system call table
    context = spec["securityContext"]
    assert context == {
        "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
        "seccompProfile": {"type": "Localhost", "localhostProfile": "sandbox-kernel-seccomp.json"},
    }  # fmt: skip
    (container,) = spec["containers"]
    assert container["image"] == image == kernelspecs.IMAGE
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "appArmorProfile": {"type": "Unconfined"},
    }  # fmt: skip
    assert pod["metadata"]["annotations"][f"container.apparmor.security.beta.kubernetes.io/{container['name']}"] == (
        "unconfined"
    )
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "400Mi", "ephemeral-storage": "512Mi"},
        "limits": {"cpu": "1", "memory": f"{ours.memory_limit_mb + 512}Mi", "ephemeral-storage": "3072Mi"},
    }
    # the checkpoint key: the Secret's one item, read-only at the path the kernel is told
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["checkpoint-key"]["secret"] == {
        "secretName": ours.key_secret, "defaultMode": 0o440,
        "items": [{"key": kernelspecs.KEY_FILE, "path": kernelspecs.KEY_FILE}],
    }  # fmt: skip
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["checkpoint-key"] == {"name": "checkpoint-key", "mountPath": kernelspecs.KEY_FOLDER, "readOnly": True}
    assert {mounts[n]["mountPath"]: volumes[n]["emptyDir"]["sizeLimit"] for n in ("home", "tmp")} == {
        kernelspecs.IMAGE_HOME: f"{4 * 512 + 256}Mi", "/tmp": "512Mi",
    }  # fmt: skip
    pod_env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    (pod_ip,) = [item for item in container["env"] if "valueFrom" in item]  # set by Kubernetes, by no client
    assert pod_ip == {"name": kernelspecs.POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    pod_env[kernelspecs.POD_IP_ENV] = "10.1.2.9"  # what Kubernetes puts there: the pod's IP, which EG connects to
    assert pod_env["SANDBOX_KERNEL_CHECKPOINT_KEY"] == f"{kernelspecs.KEY_FOLDER}/{kernelspecs.KEY_FILE}"
    assert pod_env[CHECKPOINT_KEY_ENV] == pod_env["SANDBOX_KERNEL_CHECKPOINT_KEY"]  # the variable the kernel reads
    # the command: the launcher with EG's values, then the kernel's settings
    command = [*container["command"], *container["args"]]
    launcher = [kernelspecs.IMAGE_COMMAND, *kernelspecs.launcher_arguments(kernelspecs.POD_VALUES)]
    assert command[: len(launcher)] == launcher
    parsed = arguments.parse([expand(word, pod_env) for word in command[2:]])
    assert (parsed.kernel_id, parsed.response_host, parsed.response_port) == (kernel_id, "10.1.2.3", 8877)
    assert parsed.ip == "10.1.2.9", "the kernel's ports listen on the pod's IP only, not on 0.0.0.0"
    assert parsed.kernel_settings == (
        "--SandboxKernel.os_sandbox=required", "--SandboxKernel.memory_limit_mb=1024",
        "--SandboxKernel.max_checkpoints=4",
    )  # fmt: skip
    policy = yaml.safe_load((DEPLOY / "network-policy.yaml").read_text())
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert pod["metadata"]["labels"] | selected == pod["metadata"]["labels"], "the policy selects the kernel's pod"


def flat_keys(tree: Any, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return {prefix}
    return {key for name, value in tree.items() for key in flat_keys(value, f"{prefix}{name}.")} | {prefix}


def test_the_helm_values_use_the_charts_keys_and_name_the_kernelspec(eg: EGInstall):
    ours = yaml.safe_load((DEPLOY / "helm-values.yaml").read_text())
    chart = yaml.safe_load((eg.sdist / "values.yaml").read_text())
    unknown = flat_keys(ours) - flat_keys(chart)
    assert not unknown, f"keys that EG {EG_VERSION}'s chart does not have: {sorted(unknown)}"
    assert kernelspecs.KUBERNETES_NAME in ours["kernel"]["allowedKernels"]
    assert ours["kernel"]["defaultKernelName"] == kernelspecs.KUBERNETES_NAME
    assert ours["image"] == f"elyra/enterprise-gateway:{EG_VERSION}"
    assert ours["kernel"]["launchTimeout"] >= 60
    assert ours["kernel"]["shareGatewayNamespace"] is True  # where network-policy.yaml is applied
    assert ours["service"] == {"type": "ClusterIP"}  # not the chart's NodePort: EG's ports on no node
    assert ours["kip"] == {"criSocket": "/run/containerd/containerd.sock"}  # the chart's is Docker's
    assert "authToken" not in ours  # given in a file of the operator's, never in this one or on a command line
    policy = yaml.safe_load((DEPLOY / "network-policy.yaml").read_text())
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    pod_template = (eg.sdist / "deployment.yaml").read_text().split("  template:", 1)[1]
    for name, value in source["podSelector"]["matchLabels"].items():
        assert f"        {name}: {value}\n" in pod_template, "the policy admits EG's own pods (the chart's labels)"
    to_eg, to_dns = policy["spec"]["egress"]  # nothing else: no other pod, no metadata endpoint, no internet
    assert to_eg == {"to": [source], "ports": [{"protocol": "TCP", "port": 8877}]}  # EG's response port only
    response_port = yaml.safe_load((eg.sdist / "values.yaml").read_text())["service"]["ports"][1]
    assert response_port["name"] == "http-response" and response_port["targetPort"] == 8877
    assert to_dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert to_dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


# --- the launcher alone, with this test as EG's response address: how a kernel's life ends ----------------------


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    info: dict[str, Any]  # the connection info the launcher sent
    log: Path


def launch(
    tmp_path: Path, key: rsa.RSAPrivateKey, response_port: int | None = None, ip: str | None = "127.0.0.1"
) -> tuple[subprocess.Popen[bytes], Path]:
    """`sandbox-kernel launch-eg` as EG's distributed kernelspec runs it, answering to `response_port` (with
    `ip` None: no --ip, the launcher's default)."""
    argv = kernelspecs.distributed_kernel_json(COMMAND, ["127.0.0.1"], ip=ip)["argv"]
    values = {"{kernel_id}": str(uuid.uuid4()), "{response_address}": f"127.0.0.1:{response_port or free_port()}",
              "{public_key}": eg_public_key(key), "{port_range}": "0..0"}  # fmt: skip
    log = tmp_path / "launcher.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([values.get(w, w) for w in argv], stdout=out, stderr=subprocess.STDOUT)  # type: ignore[union-attr]
    return proc, log


@contextlib.contextmanager
def launcher_started(tmp_path: Path, ip: str | None = "127.0.0.1") -> Iterator[Launched]:
    """A launcher, this test its EG's response address, until it has sent the connection info."""
    with socket.socket() as response:
        response.bind(("127.0.0.1", 0))
        response.listen(1)
        response.settimeout(START_SECONDS)
        key = new_key()
        proc, log = launch(tmp_path, key, response.getsockname()[1], ip)
        try:
            conn, _ = response.accept()
            with conn:
                conn.settimeout(60)
                data = b"".join(iter(lambda: conn.recv(65536), b""))
            info = open_payload(data, key)
            yield Launched(proc, info, log)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[Launched]:
    with launcher_started(tmp_path) as started:
        yield started


def client_of(info: dict[str, Any]) -> BlockingKernelClient:
    """A client on the connection info the launcher sent (its shell channel: requests wait until the kernel binds;
    wait_for_ready's heartbeat check can call a kernel that is still starting dead)."""
    kc = BlockingKernelClient()
    kc.load_connection_info({k: v for k, v in info.items() if k not in ("pid", "pgid", "comm_port", "kernel_id")})
    kc.start_channels()
    return kc


def run_cell(kc: BlockingKernelClient, code: str) -> dict[str, Any]:
    """The execute_reply's content."""
    msg_id = kc.execute(code)
    deadline = time.monotonic() + START_SECONDS
    while True:
        reply = kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return dict(reply["content"])


def send_request(port: int, request: dict[str, int]) -> None:
    """As EG's RemoteProcessProxy._send_listener_request does: connect, send the JSON, close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(json.dumps(request).encode())


ENDINGS: dict[str, Callable[[Launched, BlockingKernelClient], None]] = {
    "comm port shutdown": lambda lp, kc: send_request(lp.info["comm_port"], {"shutdown": 1}),
    "comm port SIGTERM": lambda lp, kc: send_request(lp.info["comm_port"], {"signum": 15}),
    "comm port SIGKILL": lambda lp, kc: send_request(lp.info["comm_port"], {"signum": 9}),
    "SIGTERM to the launcher": lambda lp, kc: lp.proc.terminate(),
    "the kernel's own shutdown_request": lambda lp, kc: kc.shutdown(),
    "SIGKILL to the launcher": lambda lp, kc: lp.proc.kill(),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_ending_leaves_no_process(launched: Launched, ending: str):
    """However the kernel's life ends, the launcher, the kernel and its Deno processes all end, and the comm port
    is closed (EG's next request is refused: the kernel is gone)."""
    assert launched.info["pid"] == launched.proc.pid and launched.info["ip"] == "127.0.0.1"
    kc = client_of(launched.info)
    try:
        assert run_cell(kc, "z = 7")["status"] == "ok", launched.log.read_text()
        procs = family(psutil.Process(launched.proc.pid))  # the sandbox is up once a cell has run
        assert any(p.name().startswith("deno") for p in procs), [p.name() for p in procs]
        ENDINGS[ending](launched, kc)
        assert_gone(procs, ending)
    finally:
        kc.stop_channels()
    status = launched.proc.wait(timeout=10)
    assert status == (-signal.SIGKILL if ending == "SIGKILL to the launcher" else 0), launched.log.read_text()
    with pytest.raises(OSError):
        send_request(launched.info["comm_port"], {"signum": 0})


def test_a_launcher_that_cannot_reach_eg_stops_its_kernel(tmp_path: Path):
    proc, log = launch(tmp_path, new_key())  # a response port where nothing listens
    assert proc.wait(timeout=START_SECONDS) == 1, log.read_text()
    text = log.read_text()
    assert "could not send the connection info to EG's response address" in text
    (pid,) = re.findall(r"kernel \S+ started \(pid (\d+)\)", text)
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE


def test_with_default_arguments_nothing_listens_beyond_loopback(tmp_path: Path):
    """launch-eg without --ip: every listening socket of the launcher, the kernel and its Deno processes (read from
    the kernel's own /proc/PID/net through psutil, once a cell has started the sandbox) is on 127.0.0.1, so no
    other host reaches the unencrypted IOPub channel. The scan sees the kernel's own ports (the control)."""
    with launcher_started(tmp_path, ip=None) as launched:
        assert launched.info["ip"] == "127.0.0.1"
        kc = client_of(launched.info)
        try:
            assert run_cell(kc, "print('up')")["status"] == "ok", launched.log.read_text()
            procs = family(psutil.Process(launched.proc.pid))
            assert any(p.name().startswith("deno") for p in procs), [p.name() for p in procs]
            listening = {
                (c.laddr.ip, c.laddr.port)
                for p in procs
                for c in p.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN or c.type == socket.SOCK_DGRAM
            }
        finally:
            kc.stop_channels()
        ours = {launched.info[name] for name in ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")}
        assert ours | {launched.info["comm_port"]} <= {port for _, port in listening}, listening  # the scan sees them
        beyond = {(ip, port) for ip, port in listening if not ipaddress.ip_address(ip).is_loopback}
        assert not beyond, f"listening beyond loopback: {sorted(beyond)}"
        assert "beyond this host's loopback" not in launched.log.read_text()  # no exposure to warn of
