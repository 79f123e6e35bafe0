"""Other hosts for the tests, made on this machine: each one a network namespace with its own address on a private
bridge and its own sshd, as tests/test_multi_host.py's Enterprise Gateway reaches remote hosts (EG's
DistributedProcessProxy, over SSH with a key).

The namespaces share this machine's files (the same venv, the same Pyodide cache), as hosts provisioned alike do;
what differs is the network: a host's kernels listen on its own address, EG reaches them across the bridge, and
taking a host's link down cuts it off as a dead machine would be. The addresses (10.231.N.0/24, N from the process
id, so that two runs at once do not meet) exist only inside this machine. Needs root, `ip` and sshd (openssh-server); `unavailable()` says why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSHD_START_SECONDS = 20


def unavailable() -> str | None:
    """Why other hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for program in ("ip", "ssh-keygen"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    if not Path(SSHD).exists():
        return f"{SSHD} is not installed (Debian: apt-get install openssh-server)"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


@dataclass
class Host:
    """One host: its namespace, its address, the root side of its link, and its sshd."""

    name: str
    address: str
    link: str
    sshd: subprocess.Popen[bytes] | None = None

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A command inside this host's network namespace."""
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    def take_down(self) -> None:
        """Cut the host off the network, as a machine that has been off for a while is: nothing reaches it, and
        this machine has forgotten its hardware address (a fresh ARP entry would make connections wait for TCP's
        own timeout, ~2 minutes, instead of failing with "no route to host" in ~3 s)."""
        _run("ip", "link", "set", self.link, "down")
        _run("ip", "neigh", "flush", "to", self.address)

    def bring_up(self) -> None:
        """Back on the network after take_down()."""
        _run("ip", "link", "set", self.link, "up")


@dataclass
class Hosts:
    """The hosts and what EG needs to reach them: a home with its key and their host keys."""

    hosts: list[Host]
    bridge_address: str  # this machine's address on the bridge: where EG's response port listens
    prefix: str  # the bridge network's first three numbers (its /24)
    client_home: Path  # a HOME whose .ssh holds the client key and the hosts' keys (paramiko reads both there)
    authorized_keys: Path  # the hosts' AuthorizedKeysFile: the client key, with what the test puts before it

    @property
    def client_key(self) -> Path:
        return self.client_home / ".ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.client_home / ".ssh" / "known_hosts"


def _wait_for_port(host: Host, log: Path) -> None:
    deadline = time.monotonic() + SSHD_START_SECONDS
    while time.monotonic() < deadline:
        if host.sshd is not None and host.sshd.poll() is not None:
            raise RuntimeError(f"sshd on {host.name} exited: {log.read_text(errors='replace')[-2000:]}")
        probe = host.run("bash", "-c", f"exec 3<>/dev/tcp/{host.address}/22", timeout=5)
        if probe.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {host.name} did not listen within {SSHD_START_SECONDS} s: {log.read_text()[-2000:]}")


@contextmanager
def ssh_hosts(folder: Path, count: int, key_options: str) -> Iterator[Hosts]:
    """`count` hosts with sshd, reached from this machine as root with a key whose authorized_keys line starts
    with `key_options` (e.g. `command="...",restrict`); all of it removed at the end."""
    tag = f"{os.getpid() % 100000}"
    bridge = f"sbkbr{tag}"
    prefix = f"10.231.{1 + os.getpid() % 250}"  # a /24 for the bridge (.1) and the hosts (.11 and up)
    folder.mkdir(parents=True, exist_ok=True)
    home = folder / "client-home"
    (home / ".ssh").mkdir(parents=True)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh" / "id_ed25519"))
    client_key = (home / ".ssh" / "id_ed25519.pub").read_text().strip()
    authorized = folder / "authorized_keys"
    authorized.write_text(f"{key_options} {client_key}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    with ExitStack() as stack:
        _run("ip", "link", "add", bridge, "type", "bridge")
        stack.callback(subprocess.run, ["ip", "link", "del", bridge], capture_output=True)
        _run("ip", "addr", "add", f"{prefix}.1/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        hosts, known = [], []
        for i in range(count):
            host = Host(f"sbkh{tag}-{i}", f"{prefix}.{11 + i}", f"sbkv{tag}-{i}")
            _run("ip", "netns", "add", host.name)
            stack.callback(subprocess.run, ["ip", "netns", "del", host.name], capture_output=True)
            _run("ip", "link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.name)
            _run("ip", "link", "set", host.link, "master", bridge, "up")
            for argv in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{host.address}/24", "dev", "eth0"],
                         ["ip", "link", "set", "eth0", "up"],
                         ["ip", "route", "add", "default", "via", f"{prefix}.1"]):  # fmt: skip
                _run("ip", "netns", "exec", host.name, *argv)
            keys = folder / host.name
            keys.mkdir()
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host_key"))
            known.append(f"{host.address} {(keys / 'host_key.pub').read_text().split(' ')[0]} "
                         f"{(keys / 'host_key.pub').read_text().split(' ')[1]}")  # fmt: skip
            config = keys / "sshd_config"
            config.write_text(
                f"ListenAddress {host.address}\nHostKey {keys / 'host_key'}\nPidFile none\n"
                f"AuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nMaxStartups 100\n"
            )
            log = keys / "sshd.log"
            with open(log, "wb") as out:
                host.sshd = subprocess.Popen(["ip", "netns", "exec", host.name, SSHD, "-D", "-e", "-f", str(config)],
                                             stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
            stack.callback(_stop, host.sshd)
            _wait_for_port(host, log)
            hosts.append(host)
        (home / ".ssh" / "known_hosts").write_text("\n".join(known) + "\n")
        yield Hosts(hosts, f"{prefix}.1", prefix, home, authorized)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
