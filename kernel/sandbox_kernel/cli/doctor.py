"""`sandbox-kernel doctor`: is this machine ready, and which OS layers will confine the sandbox?"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.launch_plan import LAUNCHER, SYSTEM_READ, elf_interpreter
from sandbox_kernel.sandbox.oslayers.report import describe, read_report
from sandbox_kernel.sandbox.oslayers.spec import LAYERS, LaunchSpec

MIN_DENO = (2, 8, 1)  # earlier 2.x releases have published permission bypasses


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    essential: bool = True  # a failed essential check means the kernel cannot start


def probe_layers(mode: str = "auto", layers: tuple[str, ...] = LAYERS) -> tuple[dict[str, object], str, int]:
    """Run `deno --version` through the launcher, confined as a sandbox is; (report, output, exit code)."""
    deno = os.path.realpath(paths.deno_executable())
    view_root = tempfile.TemporaryDirectory(prefix="sbk-doctor-")
    read_fd, write_fd = os.pipe()
    spec = LaunchSpec(
        argv=[deno, "--version"],
        env={"NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"},
        mode=mode,
        layers=list(layers),
        parent=os.getpid(),
        read=list(SYSTEM_READ),
        execute=[deno, *elf_interpreter(deno)],
        report_fd=write_fd,
        view_root=view_root.name,
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", str(LAUNCHER), spec.to_json()],
            pass_fds=(write_fd,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_fd)
        view_root.cleanup()
    report = read_report(read_fd)
    return report, (proc.stdout + proc.stderr).strip(), proc.returncode


def checks() -> list[Check]:
    found: list[Check] = []
    try:
        deno = paths.deno_executable()
        out = subprocess.run([deno, "--version"], capture_output=True, text=True, timeout=60).stdout
        version = out.split()[1] if out.startswith("deno ") else "?"
        parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
        found.append(
            Check("deno", parts >= MIN_DENO, f"{deno} (Deno {version}; needs ≥ {'.'.join(map(str, MIN_DENO))})")
        )
    except (OSError, subprocess.SubprocessError, ImportError) as exc:
        found.append(Check("deno", False, f"the Deno binary cannot run: {exc} (pip install deno)"))
    folder = paths.pyodide_dir(provision.deno_dir())
    try:
        problems = provision.pyodide_problems(thorough=True)
    except (OSError, ValueError, provision.ProvisionError) as exc:
        problems = [str(exc)]
    found.append(
        Check(
            "pyodide",
            not problems,
            f"Pyodide {paths.pyodide_version()} cached in {folder}, every file as pinned"
            if not problems
            else f"{'; '.join(problems[:3])} in {folder}: run `sandbox-kernel fetch` (it fetches what is missing or "
            "damaged; needs the npm registry)",
        )
    )
    wheels = provision.guest_wheels()
    found.append(
        Check(
            "guest wheels",
            bool(wheels),
            f"{len(wheels)} wheels in {provision.wheels_dir()}"
            if wheels
            else "not fetched: run `sandbox-kernel fetch`",
        )
    )
    found.append(_snapshot())
    found.append(_kernelspec())
    try:
        report, output, code = probe_layers()
        missing = report.get("missing") or {}
        detail = describe(report) + ("" if code == 0 else f"; Deno failed under them (exit {code}): {output[-500:]}")
        found.append(Check("os layers", not missing and code == 0, detail, essential=code != 0))
    except (OSError, subprocess.SubprocessError) as exc:
        found.append(Check("os layers", False, f"the launcher failed: {exc}", essential=False))
    return found


def _snapshot() -> Check:
    snapshot = provision.snapshot_if_ready()
    if snapshot is not None:
        return Check("snapshot", True, str(snapshot), essential=False)
    if not paths.cache_writable(provision.snapshot_path().parent):
        return Check("snapshot", False, f"missing. {provision.snapshot_not_writable()}", essential=False)
    return Check("snapshot", False, "not built yet: the first start builds it (or `sandbox-kernel fetch`)", False)


def _kernelspec() -> Check:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME, kernel_json

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        return Check("kernelspec", False, f"{KERNEL_NAME} is not registered: run `sandbox-kernel install --sys-prefix`")
    python = spec.argv[0]
    if not os.access(python, os.X_OK):
        return Check(
            "kernelspec",
            False,
            f"{KERNEL_NAME} in {spec.resource_dir} runs {python}, which is not found: "
            "run `sandbox-kernel install` again",
        )
    expected = kernel_json(python)["argv"]
    if not isinstance(expected, list) or spec.argv[1:] != expected[1:]:
        return Check(
            "kernelspec",
            False,
            f"{KERNEL_NAME} in {spec.resource_dir} starts the kernel as {spec.argv[1:3]}, not as this version does "
            "(an older install, or edited): it may import modules from the notebook's folder on the host. Run "
            "`sandbox-kernel install` again",
        )
    return Check("kernelspec", True, f"{KERNEL_NAME} in {spec.resource_dir} runs {python}")


def main() -> int:
    """Print one line per check; exit 1 when the kernel cannot start."""
    results = checks()
    for check in results:
        mark = "ok" if check.ok else ("FAIL" if check.essential else "warn")
        print(f"[{mark:>4}] {check.name}: {check.detail}")
    return 1 if any(c.essential and not c.ok for c in results) else 0
