"""Checkpoints and the audit log are the user's alone: files 0600, folders the kernel makes 0700, whatever the umask."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel.checkpoints import client as checkpoints
from sandbox_kernel.checkpoints.client import Checkpoint
from sandbox_kernel.private_files import make_folders
from sandbox_kernel.skills.audit import AuditLog


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o002, 0o277], ids=lambda m: f"umask{m:03o}")
def umask(request) -> Iterator[int]:
    """The process umask during the test: the usual one, a group-friendly one, and one that takes owner bits."""
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def folder_with_mode(path: Path, bits: int) -> Path:
    path.mkdir()
    path.chmod(bits)
    return path


def test_the_audit_log_and_the_folders_it_makes_are_private(tmp_path, umask):
    users = folder_with_mode(tmp_path / "logs", 0o755)  # the user's own folder: left as it is
    log_path = users / "new" / "deeper" / "audit.jsonl"
    audit = AuditLog(log_path)
    audit.record(kind="cell", execution_count=1)
    assert log_path.read_text().count("\n") == 1
    assert mode(log_path) == 0o600
    assert mode(users / "new") == mode(users / "new" / "deeper") == 0o700
    assert mode(users) == 0o755


def test_an_audit_log_others_could_read_is_made_private_and_kept(tmp_path, caplog):
    log_path = tmp_path / "audit.jsonl"
    log_path.write_text('{"kind": "old"}\n')
    log_path.chmod(0o644)  # what earlier versions left
    with caplog.at_level(logging.WARNING):
        AuditLog(log_path).record(kind="cell")
    assert mode(log_path) == 0o600
    assert log_path.read_text().splitlines()[0] == '{"kind": "old"}'  # appended to, not replaced
    assert "could be read by other users (mode 644); made it 600" in caplog.text


def test_the_kernels_own_folder_is_tightened_and_no_other(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    own = tmp_path / "data" / "sandbox-kernel"
    own.mkdir(parents=True)
    own.chmod(0o755)  # as an earlier version made it
    (tmp_path / "data").chmod(0o755)
    AuditLog(own / "audit.jsonl")
    assert mode(own) == 0o700
    assert mode(tmp_path / "data") == 0o755  # Jupyter's data folder is not the kernel's


def test_make_folders_leaves_existing_ones_alone(tmp_path, umask):
    existing = folder_with_mode(tmp_path / "shared", 0o775)
    make_folders(existing / "a" / "b")
    assert mode(existing) == 0o775 and mode(existing / "a") == mode(existing / "a" / "b") == 0o700


def a_checkpoint(tmp_path: Path) -> Checkpoint:
    source = tmp_path / "kernel-made.sbkcp"
    source.write_bytes(b"SBKCKPT1 sealed bytes")
    source.chmod(0o600)
    return Checkpoint(source, "demo", source.stat().st_size, {})


def test_a_saved_checkpoint_is_private_even_over_a_file_others_could_read(tmp_path, umask):
    cp = a_checkpoint(tmp_path)
    saved = cp.save(tmp_path / "saved.sbkcp")
    assert mode(saved.path) == 0o600 and saved.path.read_bytes() == cp.path.read_bytes()
    old = tmp_path / "old.sbkcp"
    old.write_bytes(b"x")
    old.chmod(0o644)
    assert mode(cp.save(old).path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel-made.sbkcp", "old.sbkcp", "saved.sbkcp"]


def test_a_client_copy_made_across_file_systems_is_private(tmp_path, umask, monkeypatch):
    kernel_file = a_checkpoint(tmp_path).path
    client = tmp_path / "client"
    client.mkdir()

    def no_hard_link(source, target):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(checkpoints.os, "link", no_hard_link)
    checkpoints._link_or_copy(kernel_file, client / "1-copy.sbkcp")
    assert mode(client / "1-copy.sbkcp") == 0o600
    assert [p.name for p in client.iterdir()] == ["1-copy.sbkcp"]  # no partial file left behind
