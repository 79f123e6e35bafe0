"""The audit log rotates at SandboxKernel.audit_log_max_bytes and keeps audit_log_backups older files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from sandbox_kernel.skills.audit import AuditLog


def counts(path: Path) -> list[int]:
    return [json.loads(line)["n"] for line in path.read_text().splitlines()]


def test_a_full_log_becomes_dot_1_and_the_oldest_beyond_the_backups_is_dropped(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path, max_bytes=300, backups=2)
    for n in range(41):
        audit.record(kind="cell", n=n)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    newest, older, oldest = counts(path), counts(tmp_path / "audit.jsonl.1"), counts(tmp_path / "audit.jsonl.2")
    assert oldest + older + newest == list(range(oldest[0], 41))  # in order, none missing
    assert oldest[0] > 0  # the first lines went with the oldest file
    for name in ("audit.jsonl.1", "audit.jsonl.2"):  # rotated by the line that took them to 300 bytes
        lines = (tmp_path / name).read_text().splitlines(keepends=True)
        assert len("".join(lines)) >= 300 > len("".join(lines[:-1]))
    assert len(path.read_text()) < 300
    for name in ("audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def test_without_backups_a_full_log_starts_again_and_zero_never_rotates(tmp_path):
    dropped = AuditLog(tmp_path / "a.jsonl", max_bytes=200, backups=0)
    kept = AuditLog(tmp_path / "b.jsonl", max_bytes=0, backups=3)
    for n in range(30):
        dropped.record(n=n)
        kept.record(n=n)
    assert counts(tmp_path / "b.jsonl") == list(range(30))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl"]
    assert counts(tmp_path / "a.jsonl")[-1] == 29 and len(counts(tmp_path / "a.jsonl")) < 30


def test_two_kernels_sharing_the_log_rotate_it_once_and_write_to_the_new_file(tmp_path):
    path = tmp_path / "audit.jsonl"
    first, second = AuditLog(path, max_bytes=250, backups=3), AuditLog(path, max_bytes=250, backups=3)
    for n in range(0, 40, 2):
        first.record(n=n)
        second.record(n=n + 1)
    files = [path, *(tmp_path / f"audit.jsonl.{k}" for k in (1, 2, 3))]
    every = [n for f in reversed(files) if f.exists() for n in counts(f)]
    assert sorted(every) == every  # one order across the files: nobody kept writing into a rotated file
    assert every[-1] == 39 and len(every) == len(set(every))
