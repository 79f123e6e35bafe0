"""Private folders: named for their kernel; a sweep removes those of kernels that are gone, and only those."""

from __future__ import annotations

import os
import subprocess
import sys

from sandbox_kernel.sandbox import private_folders


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_folder_is_named_for_this_kernel_and_private(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = private_folders.make()
    assert folder.parent == tmp_path and folder.name.startswith(f"sbk-{os.getpid()}-")
    assert folder.stat().st_mode & 0o777 == 0o700


def test_the_sweep_removes_folders_of_dead_kernels_only(tmp_path):
    gone = tmp_path / f"sbk-{dead_pid()}-abc"
    (gone / "deno").mkdir(parents=True)
    live = tmp_path / f"sbk-{os.getpid()}-def"
    live.mkdir()
    unrelated = [tmp_path / "sbk-notapid", tmp_path / "other-1-x"]
    for path in unrelated:
        path.mkdir()
    link = tmp_path / f"sbk-{dead_pid()}-link"
    link.symlink_to(live)
    assert private_folders.sweep(tmp_path) == [gone]
    assert not gone.exists() and live.is_dir() and link.is_symlink() and all(p.is_dir() for p in unrelated)
