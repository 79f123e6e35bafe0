"""What os_sandbox reports in a container whose seccomp profile refuses the OS layers' calls.

The kernel (or doctor) runs under `like_a_container.py`: a real seccomp filter on its whole process tree refuses
unshare, the mount calls and the Landlock calls with EPERM, as Docker's default profile does to a process without
CAP_SYS_ADMIN (and an older runtime's to the Landlock calls). `auto` then runs with what is left and says, in
doctor, kernel_info and the kernel's log, which layer is missing, the failed call with its errno, the cause and the
setting that allows it; `required` refuses with those words in the notebook.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from conftest import START_TIMEOUT, execute, stop_kernel, value
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

CONTAINER = str(Path(__file__).with_name("like_a_container.py"))
USERNS_REFUSED = "unshare(CLONE_NEWUSER) failed with EPERM (Operation not permitted): a seccomp filter on this process"
LANDLOCK_REFUSED = (
    "landlock_create_ruleset failed with EPERM (Operation not permitted): a seccomp filter on this process"
)
USERNS_FIX = "fix: a seccomp profile that allows unshare, mount, umount2, pivot_root (`sandbox-kernel seccomp-profile"
LANDLOCK_FIX = "fix: a seccomp profile that allows landlock_create_ruleset, landlock_add_rule, landlock_restrict_self"


def start_in_container(arguments: list[str], log: Path, *mode: str) -> tuple[KernelManager, BlockingKernelClient]:
    """A kernel whose whole process tree runs under the container-like filter; its log (stderr) goes to `log`."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.kernel_spec.argv = [sys.executable, CONTAINER, *mode, *km.kernel_spec.argv]
    with log.open("w") as stderr:
        km.start_kernel(extra_arguments=arguments, stderr=stderr)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=START_TIMEOUT)
    return km, kc


@pytest.fixture
def kernel_log(tmp_path: Path) -> Path:
    return tmp_path / "kernel.log"


@pytest.fixture
def in_container(kernel_log: Path) -> Iterator[BlockingKernelClient]:
    km, kc = start_in_container([], kernel_log)
    yield kc
    stop_kernel(km, kc)


def test_doctor_in_the_container_names_each_missing_layer_its_errno_cause_and_fix():
    done = subprocess.run(
        [sys.executable, CONTAINER, sys.executable, "-m", "sandbox_kernel", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # auto still starts: the check warns
    (line,) = [line for line in done.stdout.splitlines() if "os layers:" in line]
    assert line.startswith("[warn] os layers: OS layers in force: seccomp ("), line
    for words in (f"missing: namespaces ({USERNS_REFUSED}", USERNS_FIX, f"landlock ({LANDLOCK_REFUSED}", LANDLOCK_FIX):
        assert words in line, line


def test_auto_in_the_container_runs_and_says_why_in_kernel_info_and_the_log(in_container, kernel_log):
    assert value(execute(in_container, "6 * 7")) == "42"
    report = in_container.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["os_sandbox"]
    assert set(report["layers"]) == {"seccomp", "no_new_privs"}, report
    assert report["missing"]["namespaces"].startswith(USERNS_REFUSED) and USERNS_FIX in report["missing"]["namespaces"]
    assert report["missing"]["landlock"].startswith(LANDLOCK_REFUSED) and LANDLOCK_FIX in report["missing"]["landlock"]
    logged = [line for line in kernel_log.read_text().splitlines() if "OS layers in force" in line]
    assert logged and "WARNING" in logged[0], kernel_log.read_text()[-3000:]
    assert f"missing: namespaces ({USERNS_REFUSED}" in logged[0] and LANDLOCK_FIX in logged[0], logged[0]


def test_required_in_the_container_refuses_with_the_reason_and_the_fix_in_the_notebook(kernel_log):
    km, kc = start_in_container(["--SandboxKernel.os_sandbox=required"], kernel_log)
    try:
        run = execute(kc, "1 + 1")
        assert run.content["status"] == "error", run.content
        shown = run.content["evalue"] + "".join(m["content"].get("text", "") for m in run.outputs)
        assert "os_sandbox='required' but a layer is missing: namespaces: " + USERNS_REFUSED in shown, shown
        assert USERNS_FIX in shown and LANDLOCK_FIX in shown, shown
    finally:
        stop_kernel(km, kc)


def test_mounts_refused_leave_the_namespaces_and_landlock_in_force_and_say_the_private_root_is_missing(kernel_log):
    """A profile (or an AppArmor policy) that lets the process make user namespaces but not mount: the private root
    cannot be built; the kernel runs with the host's root behind the namespaces, Landlock and seccomp, and says so."""
    km, kc = start_in_container([], kernel_log, "--mounts-only")
    try:
        assert value(execute(kc, "6 * 7")) == "42"
        report = kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["os_sandbox"]
        assert report["layers"]["namespaces"] == ["user", "mount", "ipc", "uts", "net"], report
        assert {"landlock", "seccomp"} <= set(report["layers"]), report
        assert list(report["missing"]) == ["private root"], report
        why = report["missing"]["private root"]
        assert why.startswith(
            "the private root could not be built (make mounts private: Operation not permitted, EPERM)"
        )
        assert USERNS_FIX in why, why
    finally:
        stop_kernel(km, kc)
