"""No rw mount may reach sandbox-kernel's own cache (Pyodide and the snapshot every later kernel starts from)."""

from __future__ import annotations

import pytest

from sandbox_kernel.mounts import MountError, parse


@pytest.fixture
def home(tmp_path, monkeypatch):
    cache = tmp_path / ".cache" / "sandbox-kernel"
    (cache / "snapshots").mkdir(parents=True)
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(cache))
    return tmp_path


@pytest.mark.parametrize("folder", [".", ".cache", ".cache/sandbox-kernel", ".cache/sandbox-kernel/snapshots"])
def test_rw_mounts_that_reach_the_cache_are_refused(home, folder):
    with pytest.raises(MountError, match="sandbox-kernel's own cache"):
        parse(f"{folder}:/data:rw", home)


def test_read_only_and_unrelated_rw_mounts_are_fine(home):
    (home / "project").mkdir()
    assert parse(".:/data:ro", home).writable is False
    assert parse("project:/out:rw", home).writable is True
