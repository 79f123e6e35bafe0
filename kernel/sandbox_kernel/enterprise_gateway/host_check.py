"""`sandbox-kernel eg-hosts HOST...`: which SSH hosts can run this kernel for Enterprise Gateway, and why not.

Run on EG's host as EG's user, with EG's key: for each host it asks over SSH (as EG does: no password, the host's
key already known) first whether a shell would run a command (if one does, EG's key has no forced command there,
and a client's `KERNEL_*` value would run on that host: ssh_gate.py), then for the host's `sandbox-kernel doctor`
through the gate (Deno, the Pyodide cache, the snapshot, the OS layers). One block per host; exit status 1 if any
host cannot run kernels safely.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sandbox_kernel.enterprise_gateway.ssh_gate import DOCTOR, REFUSED

CONNECT_SECONDS = 5  # ssh's ConnectTimeout: a host that does not answer by then is reported as unreachable
DOCTOR_SECONDS = 120  # the host's doctor starts a confined Deno to see the OS layers
SHELL_PROBE = "echo sandbox-kernel-shell-$((6*7))"  # what a shell prints as ...-42, and the gate refuses
SHELL_RAN = "sandbox-kernel-shell-42"


@dataclass(frozen=True)
class HostReport:
    host: str
    ok: bool
    lines: list[str]


def ssh_command(host: str, command: str, user: str | None, options: Sequence[str]) -> list[str]:
    """ssh as EG connects: keys only, the host's key already known, a bounded connect."""
    target = f"{user}@{host}" if user else host
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_SECONDS}", "-o",
            "StrictHostKeyChecking=yes", *options, target, command]  # fmt: skip


def ssh_options(identity: str | None, known_hosts: str | None) -> list[str]:
    """ssh's options for EG's key (only that key is tried) and a known_hosts file, where they are not ssh's own."""
    return [*(["-i", identity, "-o", "IdentitiesOnly=yes"] if identity else []),
            *(["-o", f"UserKnownHostsFile={known_hosts}"] if known_hosts else [])]  # fmt: skip


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else ""


def run_ssh(
    address: str, command: str, user: str | None, options: Sequence[str], seconds: float
) -> tuple[int, str, str]:
    """(status, stdout, stderr) of one command over ssh; status 255 with the reason for ssh's own failures."""
    try:
        done = subprocess.run(ssh_command(address, command, user, options), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=seconds)  # fmt: skip
    except FileNotFoundError:
        return 255, "", "ssh (OpenSSH's client) is not installed on this machine: the preflight needs it"
    except subprocess.TimeoutExpired:
        return 255, "", f"no answer within {seconds:g} s"
    return done.returncode, done.stdout, done.stderr


def check(host: str, user: str | None = None, options: Sequence[str] = ()) -> HostReport:
    """One host: reachable, gated, and ready (its doctor's lines). It connects to the address the host's name
    resolves to, as EG does (so known_hosts must name that address, as EG's paramiko looks it up)."""
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        return HostReport(host, False, [f"the name does not resolve here ({exc}): EG could not reach it either"])
    status, out, err = run_ssh(address, SHELL_PROBE, user, options, CONNECT_SECONDS * 4)
    if status == 255:  # ssh's own failure: the connection, the host key or the authentication
        return HostReport(host, False, [f"SSH to {address}: {_last_line(err) or 'failed'}"])
    if SHELL_RAN in out:
        return HostReport(host, False, [
            "EG's key has a shell here: a client's KERNEL_* value would run as a command on this host. Give the key "
            "the forced command (authorized_keys: command=\"/full/path/sandbox-kernel eg-ssh\",restrict ...; "
            "docs/enterprise-gateway.md, the SSH hosts)"
        ])  # fmt: skip
    if REFUSED not in err:
        said = _last_line(err) or _last_line(out)
        return HostReport(host, False, [f"the key's forced command is not sandbox-kernel eg-ssh: it answered {said!r}"])
    lines = ["the forced command is sandbox-kernel eg-ssh"]
    status, out, err = run_ssh(address, DOCTOR, user, options, DOCTOR_SECONDS)
    lines += out.strip().splitlines()
    if status == 255:
        lines.append(f"SSH to {address}, for doctor: {_last_line(err) or 'failed'}")
    elif REFUSED in err:
        lines.append("its sandbox-kernel is older than the preflight: it refused `doctor` (upgrade it)")
    elif status != 0:
        lines.append(f"doctor exited {status}: this host cannot start the kernel {_last_line(err)}".rstrip())
    return HostReport(host, status == 0, lines)


def main(hosts: list[str], user: str | None = None, options: Sequence[str] = ()) -> int:
    """Check every host at once; print one block each, in the order given."""
    with ThreadPoolExecutor(max(1, min(len(hosts), 8))) as pool:
        reports = list(pool.map(lambda host: check(host, user, options), hosts))
    for report in reports:
        print(f"{report.host}: {'ready' if report.ok else 'NOT READY'}")
        for line in report.lines:
            print(f"  {line}")
    return 0 if all(r.ok for r in reports) else 1
