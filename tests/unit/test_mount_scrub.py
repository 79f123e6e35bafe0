"""The after-cell scrub of rw mounts tolerates files that vanish while it looks (it must never lose a reply)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel.mounts import Mount, enforce_limits


def test_files_that_vanish_during_the_scrub_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "bad.txt").write_text("x")
    (tmp_path / "good.csv").write_text("y")
    real = Path.rglob

    def rglob(self: Path, pattern: str):  # another process deletes entries between listing and looking
        yield tmp_path / "gone-before-stat.txt"
        yield from real(self, pattern)

    monkeypatch.setattr(Path, "rglob", rglob)
    mount = Mount(tmp_path, "/out", writable=True, suffixes=(".csv",))
    notices = enforce_limits(mount)
    assert notices == ["removed /out/bad.txt: files there must end in .csv (SandboxKernel.mount_limits['/out'])"]
    assert not (tmp_path / "bad.txt").exists() and (tmp_path / "good.csv").exists()
