"""`sandbox-kernel mirror`: a local Pyodide index in one command, then a kernel that needs no index server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import execute, start_kernel, stop_kernel, value
from test_packages import HostileIndex

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


# ---- a hostile index: its lock file is data, never pip options ------------------------------------------


def entry(name: str, **fields: object) -> dict[str, object]:
    """A lock entry for a file the index does not have (so the mirror falls back to pip for it)."""
    return {
        "name": name, "version": "1.0", "file_name": "missing-1.0-py3-none-any.whl", "sha256": "0" * 64,
        "install_dir": "site", "package_type": "package", "imports": [], "depends": [], **fields,
    }  # fmt: skip


ESCAPES = "\x1b]0;owned\x07\x1b[2J"  # a terminal title and a clear screen


@pytest.fixture
def hostile(tmp_path):
    index = HostileIndex(tmp_path / "MARKER")
    yield index
    index.close()


def test_a_package_name_that_is_a_pip_option_is_refused_and_nothing_runs(hostile, tmp_path):
    option = f"--requirement={hostile.url}req.txt"  # the file turns on an sdist, whose build backend runs
    hostile.serve_lock({option: entry(option)})
    done = mirror(str(tmp_path / "copy"), "--index", hostile.url)
    assert not (tmp_path / "MARKER").exists(), "the hostile index ran code on the host"
    assert "/req.txt" not in hostile.requests and "/evil-1.0.tar.gz" not in hostile.requests
    assert done.returncode == 2, done
    assert f"package {option!r}: the name is not a package name" in done.stderr
    assert "/missing-1.0-py3-none-any.whl" not in hostile.requests  # refused before any file is fetched
    assert not (tmp_path / "copy" / "pyodide-lock.json").exists()


def test_every_bad_entry_of_a_hostile_lock_is_named_on_its_own_line(hostile, tmp_path):
    hostile.serve_lock({
        "up": entry("up", file_name="../../x.whl"),
        "elsewhere": entry("elsewhere", file_name="http://elsewhere.example/x.whl"),
        "nohash": {k: v for k, v in entry("nohash").items() if k != "sha256"},
        "shorthash": entry("shorthash", sha256="0" * 63),
        "optversion": entry("optversion", version="1.0 --index-url x"),
        ESCAPES: entry("x"),
        "fine": entry("fine"),
    })  # fmt: skip
    done = mirror(str(tmp_path / "copy"), "--index", hostile.url)
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert lines[0].startswith("sandbox-kernel mirror: ") and "refused" in lines[0], lines
    expected = {
        "up": "file_name '../../x.whl' is not a plain file name",
        "elsewhere": "file_name 'http://elsewhere.example/x.whl' is not a plain file name",
        "nohash": "sha256 is missing",
        "shorthash": f"sha256 {'0' * 63!r} is not 64 hex digits",
        "optversion": "version '1.0 --index-url x' is not a PEP 440 version",
        ESCAPES: "the name is not a package name",  # shown escaped: the terminal gets no control characters
    }
    for name, why in expected.items():
        assert sum(f"package {name!r}: {why}" in line for line in lines) == 1, (name, lines)
    assert not any("'fine'" in line for line in lines)
    assert not any(c in done.stdout + done.stderr for c in "\x1b\x07")
    assert hostile.requests == ["/pyodide-lock.json"]  # nothing fetched from anywhere the lock names


def test_what_the_index_server_says_reaches_the_terminal_escaped(hostile, tmp_path):
    hostile.serve_lock({"six": entry("six")})  # a good entry whose file the server does not have
    hostile.not_found = f"Not Found{ESCAPES}"  # the reason phrase of its 404
    done = mirror(str(tmp_path / "copy"), "six", "--index", hostile.url)
    assert done.returncode == 0, done
    assert "/missing-1.0-py3-none-any.whl" in hostile.requests
    assert "from PyPI: six (the Pyodide index could not give them: HTTPError: HTTP Error 404: Not Found" in done.stdout
    assert "Not Found\\x1b]0;owned\\x07\\x1b[2J" in done.stdout
    assert not any(c in done.stdout + done.stderr for c in "\x1b\x07")
