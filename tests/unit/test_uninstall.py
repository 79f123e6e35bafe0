"""Where `sandbox-kernel uninstall` looks for the kernelspec, and what it removes (cli/uninstall.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from sandbox_kernel import paths
from sandbox_kernel.cli.uninstall import cache_problem, kernelspec_folders, uninstall
from sandbox_kernel.packages.index import index_cache
from sandbox_kernel.packages.wheelhouse import PipWheelhouse
from sandbox_kernel.sandbox import provision


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


def test_a_cache_holding_every_folder_kernels_make_may_be_removed_whole(tmp_path, monkeypatch):
    """Each folder named where the code makes it (a %pip wheelhouse's copies too): none is taken for a stranger's."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(cache))
    made = [
        provision.deno_dir(),
        provision.wheels_dir(),
        provision.snapshot_path().parent,
        index_cache("https://example.org/index/"),
        PipWheelhouse(tmp_path, "2026_0").folder,
        cache / "packages" / "0123456789abcdef",  # index.preinstall_wheels: SandboxKernel.packages
    ]
    for folder in made:
        folder.mkdir(parents=True)
    assert {folder.relative_to(cache).parts[0] for folder in made} == paths.CACHE_PARTS
    assert cache_problem(cache) is None
    (cache / "notes.txt").write_text("mine")
    assert cache_problem(cache) == f"{cache} holds what sandbox-kernel did not put there (notes.txt)"


def test_without_a_place_the_page_policy_is_looked_for_in_every_jupyter_config_folder(tmp_path, monkeypatch):
    from sandbox_kernel.jupyter.page_policy import FILE_NAME, installed_files

    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(tmp_path / "extra"))
    found = installed_files(False, False, None)
    for base in (tmp_path / "config", tmp_path / "extra", Path(sys.prefix) / "etc" / "jupyter", Path("/etc/jupyter")):
        assert base / "jupyter_server_config.d" / FILE_NAME in found
        assert base / "labconfig" / "page_config.d" / FILE_NAME in found
    assert installed_files(True, False, None) == [
        tmp_path / "config" / "jupyter_server_config.d" / FILE_NAME,
        tmp_path / "config" / "labconfig" / "page_config.d" / FILE_NAME,
    ]
    assert installed_files(False, True, None)[0] == Path(sys.prefix) / "etc/jupyter/jupyter_server_config.d" / FILE_NAME


def test_uninstall_removes_the_page_policy_files_found_and_is_quiet_about_absent_ones(tmp_path):
    there, absent = tmp_path / "a" / "x.json", tmp_path / "b" / "x.json"
    there.parent.mkdir()
    there.write_text("{}")
    done = uninstall([], cache=False, key=False, audit_log=None, page_policies=[there, absent])
    assert [line for line in done.removed if "page policy" in line] == [
        f"removed the page policy (restart Jupyter for its pages to lose it) {there}"
    ]
    assert not there.exists() and done.failed == []
