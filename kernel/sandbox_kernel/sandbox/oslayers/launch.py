"""The launcher: apply the OS layers to this very process, then exec Deno (which inherits them).

Run as `python -I -S launch.py SPEC_JSON` by the kernel; it imports only the standard library and
its sibling modules, and never returns: it becomes Deno, or exits with REFUSED_EXIT and a message
(or with 1, silently, when the kernel is already gone).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

if not __package__:  # run as a script: find the package beside this file
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from sandbox_kernel.sandbox.oslayers import diagnose, fsview, landlock, libc, namespaces, seccomp
from sandbox_kernel.sandbox.oslayers.spec import REFUSED_EXIT, LaunchSpec


@dataclass
class Applied:
    """What the launcher did, as it reports it to the kernel (`report.describe` puts it in words)."""

    mode: str
    layers: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # layer -> why it is not in force
    refused: str = ""  # set when the launcher will not start Deno

    def to_json(self) -> str:
        fields = asdict(self)
        if not self.refused:
            del fields["refused"]
        return json.dumps(fields)


def _apply(spec: LaunchSpec) -> Applied:
    """Every layer of `spec.layers` that this system allows, and why the others are missing."""
    applied = Applied(spec.mode)
    layers, missing = applied.layers, applied.missing
    if spec.mode == "off":
        return applied
    if not sys.platform.startswith("linux"):
        for name in spec.layers:
            missing[name] = f"not available on {sys.platform}"
        return applied
    if "namespaces" in spec.layers:
        try:
            layers["namespaces"] = namespaces.enter(spec.network, _view(spec), missing)
        except namespaces.NotAllowed as exc:
            missing["namespaces"] = str(exc)
    libc.check(libc.prctl(libc.PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    layers["no_new_privs"] = True
    if "landlock" in spec.layers:
        try:
            abi = landlock.abi_version()
        except OSError as exc:
            missing["landlock"] = diagnose.landlock(exc.errno or 0)
        else:
            # Deno's own caches go to the scratch folder; writable only where it is a capped private tmpfs.
            scratch = [spec.scratch] if spec.scratch and "private root" in layers.get("namespaces", []) else []
            rules = landlock.Rules(read=spec.read, write=[*spec.write, *scratch], execute=spec.execute)
            rules.tcp_connect = spec.tcp_ports or []
            enforced = landlock.restrict_self(rules, abi, tcp_any_port=spec.tcp_ports is None)
            layers["landlock"] = {"abi": abi, "enforced": enforced}
    if "seccomp" in spec.layers:
        if seccomp.supported():
            seccomp.install(allow_inet=spec.network)
            layers["seccomp"] = {"denied": sorted(seccomp.X86_64_DENIED), "processes": False}
        else:
            missing["seccomp"] = f"no system call table for {os.uname().machine} yet"
    return applied


def _view(spec: LaunchSpec) -> fsview.View | None:
    """The private root to build, when the spec names a folder for it and this machine can pivot."""
    if not spec.view_root or not fsview.supported():
        return None
    read = [*spec.read, *spec.execute]
    return fsview.View(
        read=read, write=spec.write, root=spec.view_root, scratch=spec.scratch, cwd=spec.cwd, hide=spec.hide
    )


def main(argv: list[str]) -> None:
    spec = LaunchSpec.from_json(argv[1])
    libc.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != spec.parent:
        os._exit(1)  # the kernel is already gone
    if spec.data_limit:
        resource.setrlimit(resource.RLIMIT_DATA, (spec.data_limit, spec.data_limit))
    try:
        applied = _apply(spec)
    except OSError as exc:
        applied = Applied(spec.mode, missing={"launcher": str(exc)})
        if spec.mode != "off":
            _refuse(spec, applied, f"an OS layer failed to apply: {exc}")
    if spec.mode == "required" and applied.missing:
        problems = "; ".join(f"{k}: {v}" for k, v in applied.missing.items())
        _refuse(spec, applied, f"os_sandbox='required' but a layer is missing: {problems}")
    _report(spec, applied)
    os.execve(spec.argv[0], spec.argv, spec.env)


def _report(spec: LaunchSpec, applied: Applied) -> None:
    if spec.report_fd >= 0:
        os.write(spec.report_fd, applied.to_json().encode())
        os.close(spec.report_fd)


def _refuse(spec: LaunchSpec, applied: Applied, message: str) -> None:
    applied.refused = message
    _report(spec, applied)
    sys.stderr.write(f"sandbox-kernel launcher: {message}\n")
    sys.stderr.flush()
    os._exit(REFUSED_EXIT)


if __name__ == "__main__":
    main(sys.argv)
