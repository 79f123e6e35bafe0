"""The kernel's checkpoint folder: named by its connection file, so a restarted kernel finds it; swept when both
the connection file and the kernel are gone (checkpoints/kernel_folder.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from sandbox_kernel.checkpoints import kernel_folder


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_same_connection_file_gives_the_same_private_folder(tmp_path):
    connection = tmp_path / "kernel-1.json"
    connection.write_text("{}")
    folder = kernel_folder.for_kernel(str(connection))
    assert kernel_folder.for_kernel(str(tmp_path / "." / "kernel-1.json")) == folder
    assert kernel_folder.for_kernel(str(tmp_path / "kernel-2.json")) != folder
    assert folder.parent == tmp_path / "data" / "sandbox-kernel" / "checkpoints"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    owner = json.loads(kernel_folder.owner_file(folder).read_text())
    assert owner == {"connection_file": str(connection), "pid": os.getpid()}
    assert list(folder.iterdir()) == []  # the folder holds checkpoints only


def test_without_a_connection_file_each_process_gets_its_own_folder(tmp_path):
    assert kernel_folder.for_kernel(None).name.startswith(f"sbk-{os.getpid()}-")


def test_the_sweep_removes_a_folder_only_when_its_connection_file_and_kernel_are_gone(tmp_path):
    kept_file, kept_kernel, gone = (tmp_path / f"kernel-{n}.json" for n in (1, 2, 3))
    folders = [kernel_folder.for_kernel(str(path)) for path in (kept_file, kept_kernel, gone)]
    kept_file.write_text("{}")
    for folder in (folders[0], folders[2]):  # their kernels ended
        owner = kernel_folder.owner_file(folder)
        owner.write_text(json.dumps({**json.loads(owner.read_text()), "pid": dead_pid()}))
    stranger = kernel_folder.root() / "not-a-kernels"
    stranger.mkdir()
    assert kernel_folder.sweep() == [folders[2]]
    assert folders[0].is_dir() and folders[1].is_dir() and stranger.is_dir() and not folders[2].exists()
    assert not kernel_folder.owner_file(folders[2]).exists() and kernel_folder.owner_file(folders[0]).is_file()
