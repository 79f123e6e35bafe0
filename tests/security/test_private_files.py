"""What the kernel and the agent API write for the user stays the user's: checkpoints and the audit log are 0600,
folders the kernel makes for them 0700, with the usual umask of 022 in the kernel process (before: 0644/0755).

The kernel process inherits the umask of the process that starts it; each test sets 022 around the start.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import execute, start_kernel, stop_kernel
from sandbox_kernel import Sandbox


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def umask(bits: int) -> Iterator[None]:
    before = os.umask(bits)
    try:
        yield
    finally:
        os.umask(before)


def test_the_default_audit_log_and_its_folders_are_private(tmp_path):
    data = tmp_path / "jupyter-data"  # the kernel's Jupyter data dir; not there yet
    with umask(0o022):
        km, kc = start_kernel(env={"JUPYTER_DATA_DIR": str(data)})
    try:
        assert execute(kc, "6 * 7").content["status"] == "ok"
    finally:
        stop_kernel(km, kc)
    log = data / "sandbox-kernel" / "audit.jsonl"
    assert [json.loads(line)["kind"] for line in log.read_text().splitlines()] == ["cell"]
    assert mode(log) == 0o600
    assert mode(data / "sandbox-kernel") == 0o700 and mode(data) == 0o700  # both made by the kernel


def test_an_audit_log_given_in_the_users_folder_is_private_and_the_folder_is_left_alone(tmp_path):
    users = tmp_path / "logs"
    users.mkdir(mode=0o755)
    users.chmod(0o755)
    log = users / "calls" / "audit.jsonl"
    with umask(0o022):
        km, kc = start_kernel([f"--SandboxKernel.audit_log={log}"])
    try:
        assert execute(kc, "1").content["status"] == "ok"
    finally:
        stop_kernel(km, kc)
    assert log.read_text().count('"kind": "cell"') == 1
    assert mode(log) == 0o600 and mode(users / "calls") == 0o700 and mode(users) == 0o755


def test_checkpoints_the_agent_api_hands_out_and_saves_are_private(tmp_path):
    tmp_path.chmod(0o755)
    with umask(0o022), Sandbox() as sb:
        sb.run("secret = 'only mine'")
        cp = sb.checkpoint()
        saved = cp.save(tmp_path / "kept.sbkcp")
    assert mode(cp.path) == 0o600  # the client's own copy
    assert mode(saved.path) == 0o600
    assert mode(tmp_path) == 0o755  # the user's folder is left as it was
