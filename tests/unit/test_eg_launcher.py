"""The pure parts of `sandbox-kernel launch-eg`: its arguments, the sealed payload, the comm port's parser and
listener, the ports it picks, and the kernelspecs that spell its words. Against Enterprise Gateway itself:
tests/test_enterprise_gateway.py."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from eg_payload import eg_public_key, new_key, open_payload
from sandbox_kernel.enterprise_gateway import arguments, comm, kernelspecs, ports
from sandbox_kernel.enterprise_gateway.arguments import LaunchArgumentError, PortRange
from sandbox_kernel.enterprise_gateway.comm import BadRequest, CommListener, Request, parse_request
from sandbox_kernel.enterprise_gateway.payload import load_public_key, seal

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "enterprise-gateway"


@pytest.fixture(scope="module")
def private_key() -> rsa.RSAPrivateKey:
    return new_key()


def words(key: str, *more: str, **values: str) -> list[str]:
    given = {"kernel-id": "1e4dbb2c-ad42-450d-a398-d2573d3b8a69", "response-address": "10.0.0.5:8877"} | values
    return [*(w for name, value in given.items() for w in (f"--{name}", value)), "--public-key", key, *more]


# --- arguments -------------------------------------------------------------------------------------------------


def test_egs_own_and_older_spellings_are_both_taken(private_key):
    key = eg_public_key(private_key)
    new = arguments.parse(words(key, "--port-range", "40000..41999"))
    old = arguments.parse(
        [
            "--RemoteProcessProxy.kernel-id", "1e4dbb2c-ad42-450d-a398-d2573d3b8a69",
            "--RemoteProcessProxy.response-address", "10.0.0.5:8877",
            "--RemoteProcessProxy.public-key", key,
            "--RemoteProcessProxy.port-range", "40000..41999",
            "--RemoteProcessProxy.spark-context-initialization-mode", "none",
        ]
    )  # fmt: skip
    assert new == old
    assert (new.kernel_id, new.response_host, new.response_port) == (
        "1e4dbb2c-ad42-450d-a398-d2573d3b8a69",
        "10.0.0.5",
        8877,
    )
    assert new.port_range == PortRange(40000, 41999) and not new.port_range.any
    assert new.ip == "127.0.0.1" and new.kernel_settings == ()  # loopback unless the operator says otherwise
    assert new.public_key.public_numbers() == private_key.public_key().public_numbers()


def test_kernel_settings_pass_on_and_anything_else_is_refused(private_key, capsys):
    parsed = arguments.parse(words(eg_public_key(private_key), "--SandboxKernel.cell_timeout=30", "--ip", "127.0.0.1"))
    assert parsed.kernel_settings == ("--SandboxKernel.cell_timeout=30",) and parsed.ip == "127.0.0.1"
    for extra in (["--kernel-class-name", "x"], ["--SandboxKernel.cell_timeout", "30"], ["stray"]):
        with pytest.raises(SystemExit) as exit:
            arguments.parse(words(eg_public_key(private_key), *extra))
        assert exit.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err


def test_a_missing_value_or_spark_is_refused_by_argparse(private_key, capsys):
    for argv in (words(eg_public_key(private_key))[2:], [*words(eg_public_key(private_key)), "--spark-context-initialization-mode", "lazy"]):  # fmt: skip
        with pytest.raises(SystemExit):
            arguments.parse(argv)
    assert "invalid choice: 'lazy'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0..0", PortRange(0, 0)), ("1024..65535", PortRange(1024, 65535)), ("40000..40005", PortRange(40000, 40005))],
)
def test_port_ranges_that_hold_the_kernels_ports(text, expected):
    assert arguments.parse_port_range(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("40000-41000", "is not LOWER..UPPER"),
        ("40000..", "is not LOWER..UPPER"),
        ("$(PORT_RANGE)", "PORT_RANGE is not set in the pod's environment"),
        ("{port_range}", "EG did not substitute this placeholder"),
        ("80..2000", "must lie within 1024..65535"),
        ("41000..40000", "lower first"),
        ("40000..70000", "must lie within 1024..65535"),
        ("40000..40004", "holds 5 ports; the kernel needs 6"),
    ],
)
def test_port_ranges_that_cannot_be_used_say_why(text, says):
    with pytest.raises(LaunchArgumentError) as error:
        arguments.parse_port_range(text)
    assert says in str(error.value)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("10.0.0.5", "is not HOST:PORT"),
        ("10.0.0.5:0", "is not HOST:PORT"),
        ("10.0.0.5:65536", "is not HOST:PORT"),
        (":8877", "is not HOST:PORT"),
        ("host name:8877", "is not HOST:PORT"),
        ("$(RESPONSE_ADDRESS)", "RESPONSE_ADDRESS is not set in the pod's environment"),
    ],
)
def test_a_response_address_that_cannot_be_used_says_why(private_key, value, says):
    with pytest.raises(LaunchArgumentError) as error:
        arguments.parse(words(eg_public_key(private_key), **{"response-address": value}))
    assert says in str(error.value)


@pytest.mark.parametrize("value", ["", "../../etc/passwd", "a b", "x" * 129, "{kernel_id}"])
def test_a_kernel_id_that_is_not_one_is_refused(private_key, value):
    with pytest.raises(LaunchArgumentError, match="is not a kernel id"):
        arguments.parse(words(eg_public_key(private_key), **{"kernel-id": value}))


def test_an_ip_that_is_not_ipv4_is_refused(private_key):
    with pytest.raises(LaunchArgumentError, match="is not an IPv4 address"):
        arguments.parse(words(eg_public_key(private_key), "--ip", "localhost"))


def test_public_keys_that_are_not_egs_are_refused():
    small = rsa.RSAPublicNumbers(65537, (1 << 511) | 0xF1).public_key()  # cryptography makes no keys this small
    curve = ec.generate_private_key(ec.SECP256R1())
    for text, says in [
        ("not base64!", "is not a base64 DER public key"),
        (base64.b64encode(b"junk").decode(), "is not a base64 DER public key"),
        (eg_public_key(curve), "must be an RSA key"),
        (eg_public_key(small), "512 bits is too small"),
        ("A" * 5000, "too long"),
    ]:
        with pytest.raises(ValueError) as error:
            load_public_key(text)
        assert says in str(error.value), text[:40]


# --- the payload ------------------------------------------------------------------------------------------------


def test_the_sealed_connection_info_opens_with_egs_private_key_only(private_key):
    info = {"shell_port": 40001, "key": "c5462790-f5bc", "kernel_id": "k", "comm_port": 40006, "pid": 1}
    sealed = seal(info, private_key.public_key())
    assert open_payload(sealed, private_key) == info
    assert b"c5462790" not in base64.b64decode(sealed)
    assert seal(info, private_key.public_key()) != sealed  # a fresh AES key each time
    other = new_key()
    with pytest.raises(ValueError):
        open_payload(sealed, other)


# --- the comm port --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "request_"),
    [
        (b'{"signum": 0}', Request.POLL),
        (b'{"signum": 2}', Request.INTERRUPT),
        (b'{"signum": 15}', Request.STOP),
        (b'{"signum": 9}', Request.KILL),
        (b'{"shutdown": 1}', Request.STOP),
        (b' {"signum":2}\n', Request.INTERRUPT),
    ],
)
def test_egs_requests(data, request_):
    assert parse_request(data) is request_


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe{}",
        b'{"signum": 11}',  # SIGSEGV: EG never sends it; forwarding it would kill the kernel
        b'{"signum": "9"}',
        b'{"signum": true}',
        b'{"signum": 2.0}',
        b'{"signum": NaN}',
        b'{"shutdown": true}',
        b'{"shutdown": 0}',
        b'{"signum": 0, "signum": 9}',
        b'{"signum": 2, "shutdown": 1}',
        b'{"exec": "rm -rf /"}',
        b"[2]",
        b"2",
        b"[" * 1000 + b"]" * 1000,
        b'{"signum": 0' + b" " * comm.MAX_REQUEST_BYTES + b"}",
    ],
)
def test_anything_else_is_a_bad_request(data):
    with pytest.raises(BadRequest):
        parse_request(data)


async def _serve_and_send(payloads: list[bytes | None], monkeypatch) -> list[Request]:
    """A listener on 127.0.0.1; each payload sent on its own connection (None: connect and send nothing)."""
    monkeypatch.setattr(comm, "READ_SECONDS", 0.3)
    seen: list[Request] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    listener = CommListener(sock, seen.append)
    await listener.start()
    idle = []
    try:
        for payload in payloads:
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            if payload is None:
                idle.append((reader, writer))
                continue
            writer.write(payload)
            try:
                writer.write_eof()
                await reader.read()  # the listener closes its side when it is done with the request
            except ConnectionResetError:  # it closed with bytes unread (a request too long)
                pass
            writer.close()
        for reader, writer in idle:
            assert await asyncio.wait_for(reader.read(), 2) == b""  # closed by the listener after READ_SECONDS
            writer.close()
    finally:
        await listener.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", listener.port)  # refused: EG then knows the kernel is gone
    return seen


def test_the_listener_serves_good_requests_and_ignores_the_rest(monkeypatch, caplog):
    payloads = [None, b'{"signum": 2}', b"garbage", b"x" * 100_000, b'{"signum": 11}', b'{"shutdown": 1}']
    seen = asyncio.run(_serve_and_send(payloads, monkeypatch))
    assert seen == [Request.INTERRUPT, Request.STOP]
    ignored = [r.getMessage() for r in caplog.records if "comm port: ignored" in r.getMessage()]
    assert len(ignored) == 4, ignored
    assert any("no request within" in line for line in ignored)
    assert any(f"more than {comm.MAX_REQUEST_BYTES} bytes" in line for line in ignored)


def test_the_signals_eg_sends_are_the_ones_taken():
    assert set(comm.SIGNALS) == {0, signal.SIGINT, signal.SIGTERM, signal.SIGKILL}


# --- ports -------------------------------------------------------------------------------------------------------


def test_ports_come_from_the_range_and_differ():
    chosen = ports.free_ports(5, PortRange(42000, 43999), "127.0.0.1")
    assert len(set(chosen)) == 5 and all(42000 <= p <= 43999 for p in chosen)
    sock = ports.bind(PortRange(42000, 43999), "127.0.0.1", frozenset(chosen))
    with sock:
        assert 42000 <= sock.getsockname()[1] <= 43999 and sock.getsockname()[1] not in chosen
    anywhere = ports.free_ports(5, PortRange(0, 0), "127.0.0.1")
    assert len(set(anywhere)) == 5 and 0 not in anywhere


def test_a_full_range_says_so():
    held = [ports.bind(PortRange(0, 0), "127.0.0.1")]
    port = held[0].getsockname()[1]
    try:
        with pytest.raises(ports.NoFreePort) as caught:
            ports.bind(PortRange(port, port), "127.0.0.1")
        assert str(caught.value).startswith(f"no free port on 127.0.0.1 in the range {port}..{port} after 200 tries")
        assert "(--EnterpriseGatewayApp.port_range or EG_PORT_RANGE, or the kernelspec's process_proxy config " \
            "port_range)" in str(caught.value)  # fmt: skip
    finally:
        held[0].close()


# --- kernelspecs -------------------------------------------------------------------------------------------------


GENERATOR = DEPLOY / "kernelspec.py"
SPEC = DEPLOY / kernelspecs.KUBERNETES_NAME


def generate(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *options], capture_output=True, text=True, timeout=120)


def test_the_kubernetes_kernelspec_in_deploy_is_the_one_the_code_makes():
    done = generate("--check")
    assert done.returncode == 0, f"{done.stderr}run deploy/enterprise-gateway/kernelspec.py"
    spec = json.loads((SPEC / "kernel.json").read_text())
    assert spec["metadata"]["process_proxy"] == {
        "class_name": kernelspecs.KUBERNETES_PROXY,
        "config": {"image_name": kernelspecs.IMAGE},
    }
    assert (
        spec["argv"][1]
        == f"/usr/local/share/jupyter/kernels/{kernelspecs.KUBERNETES_NAME}/scripts/launch_kubernetes.py"
    )
    assert spec["interrupt_mode"] == "signal"  # interrupts go over the comm port
    assert (SPEC / "scripts" / "kernel-pod.yaml.j2").read_text() == kernelspecs.pod_template()


def test_an_operators_kernelspec_names_their_image_in_both_files_and_bad_values_are_refused(tmp_path):
    out = tmp_path / kernelspecs.KUBERNETES_NAME
    image = "registry.example:5000/team/sandbox-kernel:1.2.3"
    done = generate("--image", image, "--namespace", "sandboxes", "--service-account", "kernels",
                    "--seccomp-profile", "Unconfined", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "kernel.json").read_text())["metadata"]["process_proxy"]["config"]["image_name"] == image
    template = (out / "scripts" / "kernel-pod.yaml.j2").read_text()
    for line in ('  namespace: "sandboxes"', '  serviceAccountName: "kernels"', f'    image: "{image}"',
                 "      type: Unconfined"):  # fmt: skip
        assert f"\n{line}\n" in template, line
    assert generate("--image", image, "--namespace", "sandboxes", "--service-account", "kernels",
                    "--seccomp-profile", "Unconfined", "--out", str(out), "--check").returncode == 0  # fmt: skip
    bad = generate("--image", "x {{ kernel_id }}", "--namespace", "Kube_System", "--seccomp-profile", "../etc/x",
                   "--out", str(tmp_path / "no"))  # fmt: skip
    assert bad.returncode == 2 and not (tmp_path / "no").exists()
    assert bad.stderr == (
        "kernelspec.py: the pod's settings cannot be used: image 'x {{ kernel_id }}': an image reference "
        "(registry/name:tag or @sha256:...); namespace 'Kube_System': a Kubernetes namespace name (a DNS label); "
        "seccomp profile '../etc/x': a file name under the kubelet's seccomp folder, or 'Unconfined'\n"
    )


def test_the_distributed_kernelspec_runs_the_launcher_with_what_eg_substitutes(private_key):
    spec = kernelspecs.distributed_kernel_json(
        "/opt/env/bin/sandbox-kernel", ["node1"], port_range="40000..41999", ip="10.0.0.7"
    )
    assert spec["metadata"]["process_proxy"]["config"] == {"remote_hosts": "node1", "port_range": "40000..41999"}  # type: ignore[index]
    argv: list[str] = spec["argv"]  # type: ignore[assignment]
    assert argv[:2] == ["/opt/env/bin/sandbox-kernel", "launch-eg"]
    values = {"{kernel_id}": "k-1", "{response_address}": "10.0.0.5:8877", "{public_key}": eg_public_key(private_key), "{port_range}": "0..0"}  # fmt: skip
    parsed = arguments.parse([values.get(word, word) for word in argv[2:]])
    assert (parsed.kernel_id, parsed.response_host, parsed.port_range) == ("k-1", "10.0.0.5", PortRange(0, 0))
    assert parsed.ip == "10.0.0.7"
    local = kernelspecs.distributed_kernel_json("/opt/env/bin/sandbox-kernel", ["127.0.0.1"])["argv"]
    assert "--ip" not in local  # type: ignore[operator]  # the launcher's default, loopback, is where EG connects


def test_remote_hosts_listen_on_their_route_to_eg_by_default(private_key):
    """One kernelspec for many hosts: each launcher takes its own address towards EG's response address."""
    argv: list[str] = kernelspecs.distributed_kernel_json("/opt/env/bin/sandbox-kernel", ["node1", "node2"])["argv"]  # type: ignore[assignment]
    assert argv[-2:] == ["--ip", "route"]
    values = {"{kernel_id}": "k-1", "{response_address}": "127.0.0.9:8877", "{public_key}": eg_public_key(private_key), "{port_range}": "0..0"}  # fmt: skip
    assert arguments.parse([values.get(word, word) for word in argv[2:]]).ip == "127.0.0.1"  # loopback's own route


@pytest.mark.parametrize(
    "command, hosts, ip, says",
    [
        (
            "/opt/env/bin/sandbox-kernel",
            ["node1", "node2"],
            "10.0.0.7",
            "is one host's address, and remote_hosts names 2",
        ),
        ("/opt/my env/bin/sandbox-kernel", ["node1"], None, "would change meaning in the shell line EG builds"),
        ("/opt/env/bin/sandbox-kernel;id", ["node1"], None, "would change meaning in the shell line EG builds"),
    ],
)
def test_a_distributed_kernelspec_eg_could_not_run_is_refused(command, hosts, ip, says):
    """EG connects to the address it resolves each host's name to, so one address cannot serve several hosts; and
    it joins the argv with spaces into a shell line over SSH, so a word a shell would split or run is refused."""
    with pytest.raises(ValueError, match=re.escape(says)):
        kernelspecs.distributed_kernel_json(command, hosts, ip=ip)


def test_the_default_ip_is_loopback_and_anything_else_is_named_an_exposure():
    assert arguments.exposure("127.0.0.1") is None and arguments.exposure("127.0.0.2") is None
    for ip, where in (("0.0.0.0", "every address of this host"), ("10.1.2.9", "10.1.2.9")):
        warning = arguments.exposure(ip)
        assert warning is not None and f"listen on {where}, beyond this host's loopback" in warning
        assert "signed with the connection key but not encrypted" in warning and "reads every cell" in warning
    assert "default='0.0.0.0'" not in repr(arguments._parser()._actions)  # 0.0.0.0 is no option's default


def test_a_non_loopback_ip_is_warned_of_in_the_launchers_log(private_key, monkeypatch, caplog):
    """The warning comes before the kernel starts (here the start fails at once: the warning is still there)."""
    from sandbox_kernel.enterprise_gateway import launcher

    async def no_start(self, **kwargs):
        raise RuntimeError("no kernel here")

    monkeypatch.setattr(launcher.AsyncKernelManager, "start_kernel", no_start)
    for ip, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="sandbox_kernel.launch_eg"):
            assert launcher.main(words(eg_public_key(private_key), "--ip", ip)) == 1
        assert any("beyond this host's loopback" in r.getMessage() for r in caplog.records) is warned, ip


def test_the_pod_listens_on_its_own_ip_which_kubernetes_gives_it():
    """EG's KubernetesProcessProxy connects to the pod's IP (status.podIP): the pod passes exactly that as --ip,
    from the downward API, under a name that is not KERNEL_* (EG's clients set only those)."""
    import yaml

    pod = yaml.safe_load(kernelspecs.pod_template().replace("{{ kernel_pod_name | yaml_safe }}", "p").replace(
        "{{ kernel_id | yaml_safe }}", "k"))  # fmt: skip
    (container,) = pod["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--ip") + 1] == f"$({kernelspecs.POD_IP_ENV})"
    assert {"name": kernelspecs.POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container[
        "env"
    ]
    assert not kernelspecs.POD_IP_ENV.startswith("KERNEL_")
    assert "0.0.0.0" not in kernelspecs.pod_template()


def test_only_egs_pods_may_reach_the_kernel_pods():
    """network-policy.yaml: ingress to kernel pods (all their ports) only from EG's pods in the namespace."""
    import yaml

    policy = yaml.safe_load((DEPLOY / "network-policy.yaml").read_text())
    assert "Ingress" in policy["spec"]["policyTypes"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app": "enterprise-gateway", "component": "kernel"}
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"gateway-selector": "enterprise-gateway"}}}]}
    ]


def test_the_kernelspecs_image_puts_egs_script_where_kernel_json_runs_it():
    text = (DEPLOY / "Containerfile.kernelspecs").read_text()
    copies = re.findall(r"^COPY (--from=\S+ )?(.+) (\S+)$", text, re.M)
    ours = f"/kernels/{kernelspecs.KUBERNETES_NAME}/"
    for stage, sources, target in copies:
        assert target.startswith(ours), target
        if not stage:
            assert all((REPO / source).exists() for source in sources.split()), sources
    (from_eg,) = [(sources, target) for stage, sources, target in copies if stage]
    placed = from_eg[1] + Path(from_eg[0]).name
    spec = json.loads((SPEC / "kernel.json").read_text())
    assert spec["argv"][1] == placed.replace(
        "/kernels/", f"{kernelspecs.EG_KERNELS}/", 1
    )  # the chart copies /kernels there
    assert f"-t {kernelspecs.KERNELSPECS_IMAGE} " in text
    values = (DEPLOY / "helm-values.yaml").read_text()
    assert re.search(rf"^  image: {re.escape(kernelspecs.KERNELSPECS_IMAGE)}$", values, re.M)


def test_a_kernel_that_cannot_start_is_one_line_in_the_log_not_a_traceback(private_key, monkeypatch, caplog):
    from sandbox_kernel.enterprise_gateway import launcher

    async def fails(self: launcher.Launcher) -> int:
        raise FileNotFoundError(2, "No such file or directory", "/opt/sandbox-kernel/venv/bin/python")

    monkeypatch.setattr(launcher.Launcher, "run", fails)
    assert launcher.main(words(eg_public_key(private_key))) == 1
    (record,) = [r for r in caplog.records if r.name == "sandbox_kernel.launch_eg"]
    assert record.levelname == "ERROR" and record.exc_info is None
    assert record.getMessage() == (
        "could not start the kernel: FileNotFoundError: [Errno 2] No such file or directory: "
        "'/opt/sandbox-kernel/venv/bin/python' (`sandbox-kernel doctor` in this environment checks its kernelspec, "
        "Deno and the cache)"
    )


def test_the_docs_check_egs_sdist_with_the_sha256_the_tests_pin():
    from eg_server import EG_SDIST, EG_SDIST_SHA256

    page = (REPO / "docs" / "enterprise-gateway.md").read_text()
    assert f'echo "{EG_SDIST_SHA256}  {EG_SDIST}" | sha256sum -c' in page
    assert set(re.findall(r"[0-9a-f]{64}", page)) == {EG_SDIST_SHA256}


def test_a_launcher_that_cannot_start_its_kernel_answers_eg_with_the_reason_where_eg_reads_a_number(private_key):
    """EG 3.3.0's answer to such a payload is HTTP 500 with `invalid literal for int() with base 10: '<reason>'`
    (tests/test_multi_host.py shows it with EG itself); int() shows 200 characters of it."""
    from sandbox_kernel.enterprise_gateway import launcher

    values = {"{kernel_id}": "k-1", "{response_address}": "127.0.0.1:9", "{public_key}": eg_public_key(private_key),
              "{port_range}": "0..0"}  # fmt: skip
    argv: list[str] = kernelspecs.distributed_kernel_json("/x/sandbox-kernel", ["127.0.0.1"])["argv"]  # type: ignore[assignment]
    args = arguments.parse([values.get(word, word) for word in argv[2:]])
    info = open_payload(launcher.failure_report(args, "no free port on 10.0.0.7 " + "x" * 500), private_key)
    assert info["kernel_id"] == "k-1"
    assert info["comm_port"].startswith("launch-eg could not start the kernel: no free port on 10.0.0.7")
    assert len(info["comm_port"]) <= 190
    with pytest.raises(ValueError, match="launch-eg could not start the kernel"):
        int(info["comm_port"])


def test_a_public_key_of_an_algorithm_cryptography_does_not_know_is_a_value_error():
    """SubjectPublicKeyInfo with the OID 1.2.3.4: cryptography raises UnsupportedAlgorithm, which must not reach
    the launcher's or the gate's user as a traceback."""
    der = bytes.fromhex("300b300506032a030403020001")
    with pytest.raises(ValueError, match="is not a base64 DER public key"):
        load_public_key(base64.b64encode(der).decode())
