"""`sandbox-kernel mirror`: a local Pyodide index in one command, then a kernel that needs no index server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import execute, start_kernel, stop_kernel, value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
CLI = str(Path(sys.executable).parent / "sandbox-kernel")


def mirror(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "mirror", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory) -> Path:
    """Pyodide's CDN is unreachable here: the packages come from PyPI (a pure one, and a PEP 783 one)."""
    folder = tmp_path_factory.mktemp("mirror")
    done = mirror(str(folder), "python-dateutil", "librt")
    assert done.returncode == 0, done.stderr
    assert "from PyPI: python-dateutil, librt (the Pyodide index could not give them:" in done.stdout
    assert f"--SandboxKernel.pyodide_index={folder}" in done.stdout
    return folder


def test_the_folder_holds_the_wheels_with_their_dependencies_and_a_lock_naming_them(mirrored):
    lock = json.loads((mirrored / "pyodide-lock.json").read_text())
    assert {"python-dateutil", "six", "librt", "mypy-extensions"} <= set(lock["packages"])
    assert lock["packages"]["python-dateutil"]["depends"] == ["six"]
    assert "pyemscripten_" in lock["packages"]["librt"]["file_name"]
    for pkg in lock["packages"].values():
        assert (mirrored / pkg["file_name"]).is_file()


def test_a_kernel_then_loads_from_the_folder(mirrored):
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={mirrored}"])
    try:
        code = "import dateutil.relativedelta as rd, librt.base64\n(rd.relativedelta(months=1).months, librt.base64.b64encode(b'x'))"
        assert value(execute(kc, code, timeout=120)) == "(1, b'eA==')"
    finally:
        stop_kernel(km, kc)


def test_a_mirror_of_a_mirror_copies_from_the_index_and_names_what_it_could_not_get(mirrored, tmp_path):
    done = mirror(str(tmp_path / "copy"), "six", "no-such-package-sbk", "--index", str(mirrored))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "from the Pyodide index: six"
    copied = next((tmp_path / "copy").glob("six-*.whl"))
    assert copied.read_bytes() == (mirrored / copied.name).read_bytes()
    assert "sandbox-kernel mirror: could not get no-such-package-sbk: PyPI has no pure or pyemscripten_" in done.stderr
    assert json.loads((tmp_path / "copy" / "pyodide-lock.json").read_text())["packages"].keys() == {"six"}
