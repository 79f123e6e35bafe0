"""Mounts may not reach the host places the kernel trusts (its code, configuration, cache) or keeps secret."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandbox_kernel.sandbox.host_places import (
    Place,
    kernel_places,
    local_folder,
    mount_problems,
    working_folder_problem,
)
from sandbox_kernel.sandbox.mounts import parse


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fake home with the kernel's cache, Jupyter's folders and a project in it."""
    home = tmp_path / "home"
    for folder in (".cache/sandbox-kernel/snapshots", ".jupyter", ".local/share/jupyter/runtime", "project/data"):
        (home / folder).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name in ("SANDBOX_KERNEL_CACHE", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR",
                 "JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "XDG_CACHE_HOME", "XDG_DATA_HOME", "IPYTHONDIR",
                 "SANDBOX_KERNEL_CHECKPOINT_KEY", "PYTHONUSERBASE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return home


def problems(spec: str, base: Path, *extra: Place) -> list[str]:
    return mount_problems([parse(spec, base)], kernel_places(extra), home=Path.home())


@pytest.mark.parametrize("folder", [".cache", ".cache/sandbox-kernel", ".cache/sandbox-kernel/snapshots"])
def test_rw_mounts_that_reach_the_cache_are_refused(home, folder):
    (found,) = problems(f"{folder}:/data:rw", home)
    assert "sandbox-kernel's own cache" in found and "read-only" in found


def test_rw_mounts_of_the_home_folder_are_refused(home):
    (found,) = problems(".:/data:rw", home)
    assert "holds your home folder" in found


@pytest.mark.parametrize(
    ("folder", "what"),
    [(".jupyter", "Jupyter's configuration"), (".local/share/jupyter", "Jupyter's data folder")],
)
def test_rw_mounts_of_jupyters_folders_are_refused(home, folder, what):
    (found,) = problems(f"{folder}:/data:rw", home)
    assert what in found


def test_a_rw_mount_holding_the_kernels_python_path_is_refused(home, tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / ".venv" / "lib").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(project / ".venv" / "lib")])
    (found,) = problems(f"{project}:/data:rw", home)
    assert "the kernel's Python path (sys.path)" in found and str(project / ".venv" / "lib") in found


def test_a_rw_mount_holding_or_inside_a_configured_place_is_refused(home):
    skills = home / "project" / "my_skills"
    (skills / "sub").mkdir(parents=True)
    place = Place(skills, "SandboxKernel.skills_path")
    assert "holds SandboxKernel.skills_path" in problems("project:/data:rw", home, place)[0]
    assert "lies inside SandboxKernel.skills_path" in problems("project/my_skills/sub:/data:rw", home, place)[0]


def test_no_mount_may_show_a_secret_place(home):
    (found,) = problems(".local:/data:ro", home)
    assert "guest code must not read" in found and "Jupyter's data folder" in found


def test_ordinary_mounts_are_fine(home):
    assert problems("project:/data:rw", home) == []
    assert problems("project/data:/data:ro", home) == []
    assert problems(".jupyter:/config:ro", home) == []  # read-only and not secret


def test_the_working_folder_may_not_be_home_or_root(home):
    assert "your home folder" in (working_folder_problem(home, home) or "")
    assert "the root folder" in (working_folder_problem(Path("/"), home) or "")
    assert working_folder_problem(home / "project", home) is None


def test_local_folder_of_an_index_setting(tmp_path):
    assert local_folder(f"file://{tmp_path}") == tmp_path.resolve()
    assert local_folder(str(tmp_path)) == tmp_path.resolve()
    assert local_folder("https://cdn.example/pyodide/") is None
