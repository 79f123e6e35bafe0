"""The kernel's first sandbox is spawned before the kernel process imports ipykernel (jupyter/early_start.py), on real
kernels: used when the kernel's own settings agree, killed (having run nothing) when they do not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from conftest import START_TIMEOUT, execute, sandbox_pids, value
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

USED = "the first sandbox was spawned as the kernel process began"
NOT_USED = "the sandbox spawned early does not match the kernel's settings"


def run_kernel(tmp_path: Path, arguments: list[str], env: dict[str, str] | None = None) -> tuple[str, str, list[int]]:
    """Start a kernel (its log at INFO into a file), run `1+1`; (its result, its log, its sandbox processes)."""
    log = tmp_path / "kernel.log"
    km = KernelManager(kernel_name=KERNEL_NAME)
    with log.open("w") as stderr:
        km.start_kernel(
            extra_arguments=["--log-level=INFO", *arguments], stderr=stderr, env={**os.environ, **(env or {})}
        )
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
        result = execute(kc, "1+1", timeout=START_TIMEOUT)
        pid = km.provisioner.pid  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while len(pids := sandbox_pids(pid)) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # a discarded early sandbox is killed as its replacement starts
        answer = value(result) if result.content["status"] == "ok" else result.content["ename"]
        return answer, log.read_text(), pids
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_the_first_sandbox_starts_with_the_kernel_process_and_is_used(tmp_path: Path) -> None:
    answer, log, pids = run_kernel(tmp_path, [])
    assert answer == "2"
    assert USED in log
    assert len(pids) == 1


def test_it_is_not_spawned_when_turned_off(tmp_path: Path) -> None:
    answer, log, pids = run_kernel(tmp_path, ["--SandboxKernel.early_start=False"])
    assert answer == "2"
    assert USED not in log and NOT_USED not in log
    assert len(pids) == 1


def test_a_kernel_that_arrives_at_other_settings_kills_it_and_starts_its_own(tmp_path: Path) -> None:
    # A config file that says one thing the first time it is read (by the early start) and another the second time
    # (by the kernel's app): the kernel's reading wins, and the sandbox made from the first is killed.
    config = tmp_path / "config"
    config.mkdir()
    (config / "sandbox_kernel_config.py").write_text(
        "import os\n"
        "c.SandboxKernel.memory_limit_mb = 700 if os.environ.get('SBK_TEST_READ_BEFORE') else 600\n"
        "os.environ['SBK_TEST_READ_BEFORE'] = '1'\n"
    )
    answer, log, pids = run_kernel(tmp_path, [], {"JUPYTER_CONFIG_DIR": str(config)})
    assert answer == "2"
    assert NOT_USED in log and USED not in log
    assert len(pids) == 1, "the early sandbox was not killed"


@pytest.mark.parametrize("setting", ['--SandboxKernel.skills=["NoSuchSkill"]'])
def test_settings_the_kernel_finds_wrong_kill_it(tmp_path: Path, setting: str) -> None:
    # Skills are imported by the kernel only: the early start cannot see this problem, so it spawned a sandbox.
    answer, log, pids = run_kernel(tmp_path, [setting])
    assert answer == "SandboxSettingsError"
    assert "the sandbox spawned as the kernel process began is not used: the settings are wrong" in log
    assert pids == []
