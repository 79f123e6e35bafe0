"""Code the guest leaves in a writable folder never runs in the kernel process.

Promise (docs/security.md): the kernel process starts with no working folder on its `sys.path` (the
kernelspec's argv removes it before anything is imported), and refuses, before it loads anything, settings
under which it would load code or configuration from a folder the guest can write (`skills_path`, a Python
path, a config file, `wheelhouse`, a local `pyodide_index` inside a read-write mount or working folder).
"""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path

import pytest
from attack_kit import token

from conftest import START_TIMEOUT, execute, stop_kernel, value
from test_working_folder import start_in  # a kernel started in a folder through the kernelspec, as JupyterLab does


def planted_module(marker: Path) -> str:
    """A module that, if the host ever imports it, leaves `marker` behind (and then gets out of the way)."""
    return f"open({str(marker)!r}, 'w').write('host code ran')\n"


def test_restart_never_imports_modules_the_guest_planted_in_the_working_folder(tmp_path):
    """working_folder='rw': the guest writes traitlets.py, json.py, zmq/ next to the notebook; Kernel > Restart."""
    folder, markers = tmp_path / "notebook", tmp_path / "markers"
    folder.mkdir()
    markers.mkdir()
    km, kc = start_in(folder, ["--SandboxKernel.working_folder=rw"])
    try:
        plants = {"traitlets.py": "traitlets", "json.py": "json", "zmq/__init__.py": "zmq", "sandbox_kernel.py": "sk"}
        code = "import os\nos.makedirs('zmq', exist_ok=True)\n" + "".join(
            f"open({name!r}, 'w').write({planted_module(markers / mark)!r})\n" for name, mark in plants.items()
        )
        run = execute(kc, code)
        assert run.content["status"] == "ok", run.content
        assert sorted(p.name for p in folder.iterdir()) == [], "code stays inside the sandbox"
        # The same modules, as a host process (or host_writes='any') could leave them.
        (folder / "zmq").mkdir()
        for name, mark in plants.items():
            (folder / name).write_text(planted_module(markers / mark))
        # A sourceless module compiled for the host's Python, as any host process could have left it there.
        source = tmp_path / "secrets.py"
        source.write_text(planted_module(markers / "secrets"))
        py_compile.compile(str(source), cfile=str(folder / "secrets.pyc"))
        km.restart_kernel()
        kc.wait_for_ready(timeout=START_TIMEOUT)
        assert value(execute(kc, "6 * 7")) == "42"
        assert value(execute(kc, "import os\nsorted(os.listdir())")).count(".py") >= 3  # still the same folder
    finally:
        stop_kernel(km, kc)
    assert sorted(p.name for p in markers.iterdir()) == [], "LEAK: the kernel process imported a planted module"


def test_kernel_argv_puts_no_working_folder_on_the_python_path(tmp_path):
    """The kernelspec's own argv, run in a folder: `sys.path` holds neither '' nor that folder."""
    from sandbox_kernel.jupyter.kernelspec import kernel_json

    argv = kernel_json()["argv"]
    code = argv[argv.index("-c") + 1].split("; from sandbox_kernel")[0] + "; print(sys.path)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    paths = eval(out.stdout)  # a list literal printed by Python itself
    assert "" not in paths and str(tmp_path) not in paths and "." not in paths, paths


@pytest.mark.parametrize("setting", ["skills_path", "wheelhouse", "pyodide_index"])
def test_nothing_the_kernel_loads_may_lie_in_the_writable_working_folder(tmp_path, setting):
    """The skills example of docs/skills.md (`skills_path = "my_skills"`) with working_folder='rw': refused at start."""
    folder, marker = tmp_path / "notebook", tmp_path / f"marker-{token('skill')}"
    (folder / "my_skills").mkdir(parents=True)
    (folder / "my_skills" / "planted.py").write_text(planted_module(marker))
    km, kc = start_in(folder, ["--SandboxKernel.working_folder=rw", f"--SandboxKernel.{setting}=my_skills"])
    try:
        run = execute(kc, "1 + 1")
        assert run.content["ename"] == "SandboxSettingsError", run.content
        shown = run.content["evalue"]
        assert f"holds SandboxKernel.{setting}" in shown and "plant code there" in shown, shown
    finally:
        stop_kernel(km, kc)
    assert not marker.exists(), "LEAK: a skill file in the writable working folder was imported"


def test_read_only_working_folder_with_skills_is_fine(tmp_path):
    """Read-only, the same layout is safe: the skills load and the guest cannot change them."""
    folder = tmp_path / "notebook"
    (folder / "my_skills").mkdir(parents=True)
    (folder / "my_skills" / "hello.py").write_text(
        "class HelloSkill:\n    def greet(self, name: str) -> str:\n        return f'hello {name}'\n"
    )
    km, kc = start_in(folder, ["--SandboxKernel.working_folder=ro", "--SandboxKernel.skills_path=my_skills"])
    try:
        assert value(execute(kc, "device.HelloSkill.greet('you')")) == "'hello you'"
    finally:
        stop_kernel(km, kc)


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_the_working_folder_may_not_be_the_home_folder(tmp_path, mode):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(token("key"))
    env = {
        "HOME": str(home),
        "SANDBOX_KERNEL_CACHE": os.environ.get("SANDBOX_KERNEL_CACHE")
        or str(Path.home() / ".cache" / "sandbox-kernel"),
    }
    km, kc = start_in(home, [f"--SandboxKernel.working_folder={mode}"], env)
    try:
        run = execute(kc, "open('.ssh/id_ed25519').read()")
        assert run.content["ename"] == "SandboxSettingsError", run.content
        assert "is your home folder" in run.content["evalue"] and "a project folder" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)
