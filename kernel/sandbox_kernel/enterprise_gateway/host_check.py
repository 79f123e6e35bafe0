"""`sandbox-kernel eg-hosts HOST...`: which SSH hosts can run this kernel for Enterprise Gateway, and why not.

Run on EG's host as EG's user, with EG's key: for each host it asks over SSH (as EG does: no password, the host's
key already known) first whether a shell would run a command (if one does, EG's key has no forced command there,
and a client's `KERNEL_*` value would run on that host: ssh_gate.py), then for the host's `sandbox-kernel doctor`
through the gate (Deno, the Pyodide cache, the snapshot, the OS layers). One block per host; exit status 1 if any
host cannot run kernels safely.
"""

from __future__ import annotations

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


def check(host: str, user: str | None = None, options: Sequence[str] = ()) -> HostReport:
    """One host: reachable, gated, and ready (its doctor's lines)."""
    try:
        probe = subprocess.run(ssh_command(host, SHELL_PROBE, user, options), capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=CONNECT_SECONDS * 4)  # fmt: skip
    except subprocess.TimeoutExpired:
        return HostReport(host, False, [f"SSH: no answer within {CONNECT_SECONDS * 4} s"])
    said = (probe.stdout + probe.stderr).strip()
    if probe.returncode == 255:  # ssh's own failure: the connection, the host key or the authentication
        return HostReport(host, False, [f"SSH: {said.splitlines()[-1] if said else 'failed'}"])
    if SHELL_RAN in probe.stdout:
        return HostReport(host, False, [
            "EG's key has a shell here: a client's KERNEL_* value would run as a command on this host. Give the key "
            "the forced command (authorized_keys: command=\"/full/path/sandbox-kernel eg-ssh\",restrict ...; "
            "docs/enterprise-gateway.md, the SSH hosts)"
        ])  # fmt: skip
    if REFUSED not in probe.stderr:
        return HostReport(
            host, False, [f"the key's forced command is not sandbox-kernel eg-ssh: it answered {said[:300]!r}"]
        )
    try:
        doctor = subprocess.run(ssh_command(host, DOCTOR, user, options), capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=DOCTOR_SECONDS)  # fmt: skip
    except subprocess.TimeoutExpired:
        return HostReport(
            host, False, ["the forced command is sandbox-kernel eg-ssh", f"doctor: no answer within {DOCTOR_SECONDS} s"]
        )
    lines = ["the forced command is sandbox-kernel eg-ssh", *doctor.stdout.strip().splitlines()]
    if REFUSED in doctor.stderr:
        lines.append("its sandbox-kernel is older than the preflight: it refused `doctor` (upgrade it)")
    elif doctor.returncode != 0:
        lines.append(f"doctor exited {doctor.returncode}: this host cannot start the kernel")
    return HostReport(host, doctor.returncode == 0, lines)


def main(hosts: list[str], user: str | None = None, options: Sequence[str] = ()) -> int:
    """Check every host at once; print one block each, in the order given."""
    with ThreadPoolExecutor(max(1, min(len(hosts), 8))) as pool:
        reports = list(pool.map(lambda host: check(host, user, options), hosts))
    for report in reports:
        print(f"{report.host}: {'ready' if report.ok else 'NOT READY'}")
        for line in report.lines:
            print(f"  {line}")
    return 0 if all(r.ok for r in reports) else 1
