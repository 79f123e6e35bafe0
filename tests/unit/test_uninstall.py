"""Where `sandbox-kernel uninstall` looks for the kernelspec, and what it removes (cli/uninstall.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from sandbox_kernel.cli.uninstall import kernelspec_folders, uninstall


def test_without_a_place_every_folder_jupyter_finds_kernelspecs_in_is_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "extra"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    found = kernelspec_folders(False, False, None)
    for base in (tmp_path / "extra", tmp_path / "data", Path(sys.prefix) / "share" / "jupyter"):
        assert base / "kernels" / "pyodide-sandbox" in found
    assert kernelspec_folders(True, False, None) == [tmp_path / "data" / "kernels" / "pyodide-sandbox"]
    assert kernelspec_folders(False, False, "/p") == [Path("/p/share/jupyter/kernels/pyodide-sandbox")]


def test_every_copy_found_is_removed_and_a_folder_without_kernel_json_is_not_touched(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    folders = [tmp_path / name / "kernels" / "pyodide-sandbox" for name in ("a", "b", "c")]
    for folder in folders[:2]:
        folder.mkdir(parents=True)
        (folder / "kernel.json").write_text("{}")
    folders[2].mkdir(parents=True)  # not a kernelspec
    done = uninstall(folders, cache=False, key=False, audit_log=None)
    assert done.removed == [f"removed kernelspec {folders[0]}", f"removed kernelspec {folders[1]}"]
    assert not folders[0].exists() and not folders[1].exists() and folders[2].is_dir()
    assert done.failed == []
