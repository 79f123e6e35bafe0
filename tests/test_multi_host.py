"""Kernels on other hosts: a real Enterprise Gateway 3.3.0 starts sandbox kernels over SSH on two hosts (network
namespaces with sshd on a private range, tests/ssh_hosts.py) from the shipped distributed kernelspec, whose argv
survives EG's shell line; EG's key runs only `sandbox-kernel eg-ssh` there, as docs/enterprise-gateway.md says.

Cells run through `Sandbox(gateway_url=...)`, each kernel is found in its host's namespace, a checkpoint taken on
one host is restored on the other, `sandbox-kernel eg-hosts` tells ready hosts from unreachable and ungated ones, a
launcher that cannot start its kernel makes EG's start fail within seconds saying why, and a host taken down leaves
the other's kernels running while a start on it fails within seconds, naming the host. The attack the gate stops,
a client's KERNEL_* value that the host's shell would expand, is tried with the gate and without it (to show it is
real).

Needs root, iproute2 and openssh-server (.ci/run installs the last); skipped with the reason elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import eg_server
import ssh_hosts
from eg_server import COMMAND, KERNEL_USERNAME, PORT_RANGE, EnterpriseGateway, installed
from sandbox_kernel.client.gateway_rest import GatewayError
from sandbox_kernel.client.sync_sandbox import Sandbox

if (why := ssh_hosts.unavailable()) is not None:
    pytest.skip(f"other hosts cannot be made here: {why}", allow_module_level=True)

BENCH = Path(__file__).resolve().parents[1] / "bench"
DOWN_SECONDS = 40  # a start on a host that is down fails within this (EG's SSH connect, then its error)
FAILED_START_SECONDS = 30  # a launcher that cannot start its kernel: EG answers within this (its launch timeout: 180)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("multi-host")


def gate_options(folder: Path) -> str:
    """The key's authorized_keys options on every host: its forced command is the gate, and nothing else is allowed."""
    return eg_server.gate_options(folder / "remote-logs")


@pytest.fixture(scope="module")
def hosts(folder: Path) -> Iterator[ssh_hosts.Hosts]:
    with ssh_hosts.ssh_hosts(folder / "hosts", 2, gate_options(folder)) as made:
        yield made


@pytest.fixture(scope="module")
def gateway(folder: Path, hosts: ssh_hosts.Hosts) -> Iterator[EnterpriseGateway]:
    with eg_server.ssh_gateway(folder / "eg", installed(), hosts) as running:
        yield running


def on(host: ssh_hosts.Host, gateway: EnterpriseGateway, **env: str) -> Sandbox:
    """A sandbox whose kernel EG starts on `host` (KERNEL_REMOTE_HOST, EG's own choice of host for a start)."""
    options = gateway.client_options()
    options["gateway_env"] = {**options["gateway_env"], "KERNEL_REMOTE_HOST": host.address, **env}
    return Sandbox(**options)


def failed_start(host: ssh_hosts.Host, gateway: EnterpriseGateway) -> tuple[float, str]:
    """A start on `host` that EG refuses: how long until it answered, and what it said."""
    t0 = time.monotonic()
    with pytest.raises(GatewayError) as refused:
        with on(host, gateway) as never:
            never.run("1")
    return time.monotonic() - t0, str(refused.value)


def host_of(sb: Sandbox, gateway: EnterpriseGateway, hosts: ssh_hosts.Hosts) -> str:
    """The host whose network namespace the sandbox's launcher runs in."""
    kernel_id = sb._async.kernel.kernel_id  # type: ignore[union-attr]
    pids = gateway.launcher_pids(kernel_id)
    assert len(pids) == 1, f"launchers of {kernel_id}: {pids}{gateway.story(kernel_id)}"
    namespace = os.stat(f"/proc/{pids[0]}/ns/net").st_ino
    found = [h.name for h in hosts.hosts if os.stat(f"/run/netns/{h.name}").st_ino == namespace]
    assert len(found) == 1, f"launcher {pids[0]} is in no host's namespace"
    return found[0]


def test_kernels_run_on_two_other_hosts_and_a_checkpoint_moves_between_them(gateway, hosts):
    first, second = hosts.hosts
    with on(first, gateway) as a:
        assert host_of(a, gateway, hosts) == first.name
        a.run("rows = [n * n for n in range(10)]\nopen('/tmp/made-on', 'w').write('first')")
        assert a.run("sum(rows)").text == "285"
        cp = a.checkpoint()
    options = gateway.client_options()
    options["gateway_env"] = {**options["gateway_env"], "KERNEL_REMOTE_HOST": second.address}
    with Sandbox.from_checkpoint(cp, **options) as b:
        assert host_of(b, gateway, hosts) == second.name
        assert b.run("sum(rows), open('/tmp/made-on').read()").text == "(285, 'first')"


def test_a_clients_kernel_value_is_data_on_the_host_not_a_command(gateway, hosts, folder):
    """EG writes KERNEL_* values into its SSH shell line inside double quotes, where `$(...)` would run on the host.
    Through the gate the kernel starts and sees the value exactly as the client sent it; nothing ran."""
    mark = folder / "ran-on-host"
    hostile = f"$(touch {mark})`touch {mark}`"
    with on(hosts.hosts[0], gateway, KERNEL_NOTE=hostile) as sb:
        assert sb.run("1 + 1").text == "2"
        kernel_id = sb._async.kernel.kernel_id  # type: ignore[union-attr]
        log = (folder / "remote-logs" / f"kernel-{kernel_id}.log").read_text()
        launcher_env = Path(f"/proc/{gateway.launcher_pids(kernel_id)[0]}/environ").read_bytes().split(b"\0")
    assert f"KERNEL_NOTE={hostile}".encode() in launcher_env, "the value did not reach the launcher as sent"
    assert not mark.exists(), log
    assert "exported names not passed to the kernel" in log  # EG's own variables stay out; KERNEL_NOTE went in


def test_without_the_gate_the_same_value_runs_on_the_host(gateway, hosts, folder):
    """The attack is real: with a plain login shell for the key, EG's line runs the client's command. The
    kernelspec's argv survives that shell too: EG's start returns once the launcher on the host has answered."""
    mark = folder / "ran-without-gate"
    gated = hosts.authorized_keys.read_text()
    hosts.authorized_keys.write_text(gated.replace(gate_options(folder), "restrict"))
    env = {"KERNEL_USERNAME": KERNEL_USERNAME, "KERNEL_REMOTE_HOST": hosts.hosts[0].address,
           "KERNEL_NOTE": f"$(touch {mark})"}  # fmt: skip
    try:
        kernel_id = gateway.request("POST", "/api/kernels", {"name": gateway.kernel_name, "env": env})["id"]
    finally:
        hosts.authorized_keys.write_text(gated)
    try:
        assert mark.exists()
        assert len(gateway.launcher_pids(kernel_id)) == 1, gateway.story(kernel_id)
    finally:
        gateway.request("DELETE", f"/api/kernels/{kernel_id}")


def preflight(hosts: ssh_hosts.Hosts, *addresses: str) -> subprocess.CompletedProcess[str]:
    """`sandbox-kernel eg-hosts` as an operator runs it on EG's host, with EG's key."""
    key, known = hosts.client_key, hosts.known_hosts
    return subprocess.run([COMMAND, "eg-hosts", "--user", "root", "--identity", str(key), "--known-hosts", str(known),
                           *addresses], capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_preflight_tells_ready_hosts_from_unreachable_and_ungated_ones(hosts, folder):
    first, second = hosts.hosts
    nowhere = f"{hosts.prefix}.99"  # on the bridge's network, and no host has it
    done = preflight(hosts, first.address, nowhere, second.address)
    assert done.returncode == 1, done.stdout + done.stderr
    blocks = done.stdout.split(f"\n{nowhere}: ")
    assert blocks[0].startswith(f"{first.address}: ready\n  the forced command is sandbox-kernel eg-ssh\n")
    assert "[  ok] os layers: OS layers in force" in blocks[0] and "[FAIL]" not in done.stdout
    assert blocks[1].startswith(f"NOT READY\n  SSH to {nowhere}: "), done.stdout
    assert f"\n{second.address}: ready\n" in done.stdout
    gated = hosts.authorized_keys.read_text()
    hosts.authorized_keys.write_text(gated.replace(gate_options(folder), "restrict"))
    try:
        plain = preflight(hosts, first.address)
    finally:
        hosts.authorized_keys.write_text(gated)
    assert plain.returncode == 1
    assert plain.stdout.startswith(f"{first.address}: NOT READY\n  EG's key has a shell here: a client's KERNEL_*")


def test_the_remote_load_script_reports_cells_and_each_hosts_kernels(gateway, hosts, tmp_path):
    """bench/remote_load.py, as a user runs it against a gateway URL with EG's key for the hosts' memory."""
    key, known = hosts.client_key, hosts.known_hosts
    output = tmp_path / "RESULTS.md"
    argv = [sys.executable, str(BENCH / "remote_load.py"), "--gateway-url", gateway.url, "--token-env", "EG_TOKEN",
            "--kernel-name", gateway.kernel_name, "--gateway-env", f"KERNEL_USERNAME={KERNEL_USERNAME}",
            "--kernels", "2", "--duration", "4", "--think", "0.2", "--cpu-iterations", "10000",
            "--ssh-user", "root", "--identity", str(key), "--known-hosts", str(known), "--output", str(output),
            *(word for host in hosts.hosts for word in ("--ssh-host", host.address))]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, env={**os.environ, "EG_TOKEN": gateway.token}
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    text = output.read_text()
    assert "| kernels held to the end | 2 of 2 |" in text and "| failures | 0 |" in text, text
    for host in hosts.hosts:  # EG placed one kernel on each (in turn), and each host's gate counted its own
        row = next(line for line in text.splitlines() if line.startswith(f"| {host.address} |"))
        assert row.split("|")[2].strip() == "1", row


HOLD_PORTS = """
import resource, socket, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
for port in range({lower}, {upper} + 1):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port))
    except OSError:  # in use already (a port of an earlier test's kernel, in TIME_WAIT)
        continue
    held.append(s)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_launcher_that_cannot_start_the_kernel_tells_eg_why_at_once(gateway, hosts):
    """With every port of EG's range taken on the host, the launcher cannot start the kernel: EG's answer to the
    start says so within seconds, instead of waiting for EG's launch timeout (eg_server.START_SECONDS, 180 s)."""
    host = hosts.hosts[0]
    lower, upper = PORT_RANGE
    holder = subprocess.Popen(["ip", "netns", "exec", host.name, sys.executable, "-c",
                               HOLD_PORTS.format(lower=lower, upper=upper)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        took, refusal = failed_start(host, gateway)
    finally:
        holder.kill()
        holder.wait()
    assert took < FAILED_START_SECONDS, f"EG answered the failed start after {took:.1f} s"
    assert "could not start the kernel: no free port on" in refusal, refusal


def test_a_host_taken_down_fails_its_starts_fast_and_leaves_the_other_running(gateway, hosts):
    alive, dead = hosts.hosts
    with on(alive, gateway) as sb:
        sb.run("n = 1")
        dead.take_down()
        try:
            took, refusal = failed_start(dead, gateway)
        finally:
            dead.bring_up()
        assert took < DOWN_SECONDS, f"a start on the dead host took {took:.1f} s"
        assert dead.address in refusal, refusal
        assert sb.run("n + 1").text == "2"
