"""%pip and !pip report only what happened (issue 33): with PyPI reachable and the Pyodide lock's files not (a common
company network), a pure-Python package the lock names comes from PyPI; what cannot be installed says which package,
why and the setting; %pip uninstall says success only once the files are gone.

Local stand-ins: a Pyodide index on 127.0.0.1 that serves its lock file but refuses every package file (403, as a
proxy that blocks the CDN), and a PEP 503 index on 127.0.0.1 that the sandbox's micropip takes as its default (PyPI):
with that default micropip searches Pyodide's lock first, as it does with pypi.org.
"""

from __future__ import annotations

import hashlib
import http.server
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import execute, serve_http, start_kernel, stop_kernel, value
from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision
from test_packages import Index, make_wheel

LOCKED = ("sbk_lockpure", "sbk_lockdep", "sbk_lockonly")  # named by the lock; only the first two are on "PyPI"


class BlockedPyodideIndex:
    """A Pyodide index on 127.0.0.1: its pyodide-lock.json is served, every package file is refused (403)."""

    def __init__(self, lock: str) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                if self.path != "/pyodide-lock.json":
                    self.send_error(403)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(lock.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server, self.url = serve_http(Handler)

    def close(self) -> None:
        self.server.shutdown()


def lock_for(wheels: list[Path]) -> str:
    """A lock file naming these wheels (their sha256 as Pyodide's own build would differ: any will do, unfetched)."""
    bundled = json.loads((paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json").read_text())
    packages = {}
    for wheel in wheels:
        module = wheel.name.split("-")[0]
        name = module.replace("_", "-")
        packages[name] = {
            "name": name, "version": "1.0", "file_name": wheel.name, "install_dir": "site",
            "sha256": hashlib.sha256(b"pyodide's build of " + wheel.read_bytes()).hexdigest(),
            "package_type": "package", "imports": [module], "depends": [], "unvendored_tests": False,
        }  # fmt: skip
    return json.dumps({"info": bundled["info"], "packages": packages})


@pytest.fixture(scope="module")
def network(tmp_path_factory) -> Iterator[tuple[BlockedPyodideIndex, Index]]:
    folder = tmp_path_factory.mktemp("indexes")
    locked = [make_wheel(folder, name, body=f"VALUE = '{name} from PyPI'\n") for name in LOCKED]
    app = make_wheel(folder, "sbk_app", requires=("sbk-lockdep",), body="import sbk_lockdep\nVALUE = 'app'\n")
    cdn = BlockedPyodideIndex(lock_for(locked))
    pypi = Index(locked[0], locked[1], app)  # sbk_lockonly is not on it
    yield cdn, pypi
    cdn.close()
    pypi.close()


@pytest.fixture(scope="module")
def kernel(network):
    cdn, pypi = network
    allow = f"['127.0.0.1:{pypi.port}', 'pypi.org:443', 'files.pythonhosted.org:443']"
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={cdn.url}", f"--SandboxKernel.allow_net={allow}"])
    as_pypi = (
        "import micropip, micropip.package_index as index\n"
        f"index.DEFAULT_INDEX_URLS[:] = ['http://127.0.0.1:{pypi.port}/simple']\n"
        "micropip.set_index_urls(index.DEFAULT_INDEX_URLS[:])\n"
        "micropip._package_manager_singleton.index_urls == index.DEFAULT_INDEX_URLS"  # micropip: the lock first
    )
    assert value(execute(kc, as_pypi, timeout=180)) == "True"
    yield kc, cdn, pypi
    stop_kernel(km, kc)


def listed(kc) -> list[str]:
    return [" ".join(line.split()) for line in execute(kc, "%pip list").stream().splitlines()[2:]]


def advice(cdn: BlockedPyodideIndex, name: str) -> str:
    """The host's words for a pure-Python package of the lock whose file it could not fetch."""
    return (
        f"{name} is provided by the Pyodide index, and it could not be fetched from {cdn.url} (HTTPError: HTTP Error "
        f"403: Forbidden). {name} is pure Python, so a wheel from the package index (PyPI) works as well: add "
        f"'{name}' to SandboxKernel.packages (resolved on the host), or run `%pip install {name}` with pypi.org:443 "
        "and files.pythonhosted.org:443 in SandboxKernel.allow_net (fetched by the sandbox). Or set "
        "SandboxKernel.pyodide_index to a reachable mirror URL or a local folder holding the Pyodide packages (with "
        "their pyodide-lock.json), e.g. one made by `sandbox-kernel mirror DIR NAME...`. (The kernel fetches these "
        "on the host, outside the sandbox, so SandboxKernel.allow_net does not apply to them.)"
    )


def test_the_stand_ins_reproduce_micropips_false_success(kernel):
    """Control: micropip alone, with this lock and this 'PyPI', says nothing of the file it could not load."""
    kc, _, pypi = kernel
    run = execute(kc, "import micropip\nawait micropip.install('sbk-lockdep')\nprint('micropip returned')", timeout=180)
    assert run.content["status"] == "ok", run.content
    assert run.stream().endswith("Failed to load sbk-lockdep\nmicropip returned\n"), run.stream()  # and no error
    assert value(execute(kc, "import importlib.util\nimportlib.util.find_spec('sbk_lockdep') is None")) == "True"
    assert not [r for r in pypi.requests if "sbk" in r and "lockdep" in r]  # PyPI's wheel was never asked for


def test_pip_install_takes_pypis_wheel_when_the_locks_file_is_unreachable(kernel):
    kc, cdn, pypi = kernel
    run = execute(kc, "%pip install sbk-lockpure", timeout=180)
    assert run.content["status"] == "ok", run.content
    assert run.stream() == "Installed sbk-lockpure in the sandbox (micropip)\n"
    assert "Failed" not in run.stream("stderr"), run.stream("stderr")
    assert "/sbk_lockpure-1.0-py3-none-any.whl" in cdn.requests  # the lock's file was tried first, on the host
    assert "/files/sbk_lockpure-1.0-py3-none-any.whl" in pypi.requests
    assert value(execute(kc, "import sbk_lockpure\nsbk_lockpure.VALUE")) == "'sbk_lockpure from PyPI'"
    assert "sbk-lockpure 1.0" in listed(kc)
    # !pip, and a wheel whose requirement is in the lock (unreachable) and on PyPI: both from PyPI
    run = execute(kc, "!pip install sbk-app", timeout=180)
    assert run.content["status"] == "ok", run.content
    assert run.stream() == "Installed sbk-app in the sandbox (micropip)\n"
    assert "Failed" not in run.stream("stderr"), run.stream("stderr")
    assert value(execute(kc, "import sbk_app, sbk_lockdep\n(sbk_app.VALUE, sbk_lockdep.VALUE)")) == (
        "('app', 'sbk_lockdep from PyPI')"
    )
    assert {"sbk-app 1.0", "sbk-lockdep 1.0"} <= set(listed(kc))


def test_what_cannot_be_installed_says_which_why_and_the_setting(kernel):
    kc, cdn, pypi = kernel
    expected = (
        f"{advice(cdn, 'sbk-lockonly')}\nThe package index (http://127.0.0.1:{pypi.port}/simple) does not give it "
        "either: Can't fetch metadata for 'sbk-lockonly'. Please make sure you have entered a correct package name "
        "and correctly specified index_urls (if you changed them)."
    )
    for line in ("%pip install sbk-lockonly", "!pip install sbk-lockonly"):
        run = execute(kc, line, timeout=180)
        assert run.content.get("ename") == "PackageLoadError", run.content
        assert run.content["evalue"] == expected, run.content["evalue"]
        assert "Installed" not in run.stream(), run.stream()
    run = execute(kc, "%pip install sbk-nowhere", timeout=180)
    assert run.content["evalue"] == (
        "%pip install sbk-nowhere: Can't fetch metadata for 'sbk-nowhere'. Please make sure you have entered a correct "
        f"package name and correctly specified index_urls (if you changed them) (package index: "
        f"http://127.0.0.1:{pypi.port}/simple)."
    ), run.content["evalue"]
    assert "Installed" not in run.stream()
    assert not [row for row in listed(kc) if "lockonly" in row or "nowhere" in row]
    # The import's advice names what works (SandboxKernel.packages, %pip install) before a mirror.
    run = execute(kc, "import sbk_lockonly", timeout=120)
    assert run.content["ename"] == "ModuleNotFoundError"
    assert run.content["evalue"] == f"No module named 'sbk_lockonly': {advice(cdn, 'sbk-lockonly')}"


def test_pip_uninstall_says_success_only_for_what_it_removed(kernel):
    kc = kernel[0]
    assert execute(kc, "%pip install sbk-lockpure", timeout=180).content["status"] == "ok"  # (if not yet)
    run = execute(kc, "%pip uninstall -y sbk-never-installed")
    assert run.content["status"] == "ok" and run.stream() == "", run.outputs
    assert run.stream("stderr") == "WARNING: Skipping sbk-never-installed as it is not installed.\n"
    # A distribution without a RECORD (its files put there by hand): micropip would remove its metadata only.
    plant = (
        "import pathlib, site\n"
        "root = pathlib.Path(site.getsitepackages()[0])\n"
        "(root / 'sbk_by_hand.py').write_text('VALUE = 1\\n')\n"
        "(root / 'sbk_by_hand-1.0.dist-info').mkdir()\n"
        "(root / 'sbk_by_hand-1.0.dist-info' / 'METADATA').write_text('Metadata-Version: 2.1\\nName: sbk-by-hand\\n"
        "Version: 1.0\\n')\n"
        "print(root)"
    )
    root = execute(kc, plant).stream().strip()
    run = execute(kc, "%pip uninstall -y sbk-by-hand")
    assert run.content.get("ename") == "UsageError", run.content
    assert run.content["evalue"] == (
        f"%pip uninstall: cannot uninstall sbk-by-hand 1.0: no RECORD file was found for it in {root}, so what it "
        "installed is unknown (pip refuses it too): remove its modules and its .dist-info folder yourself"
    )
    assert "Successfully" not in run.stream()
    assert value(execute(kc, "import sbk_by_hand\nsbk_by_hand.VALUE")) == "1" and "sbk-by-hand 1.0" in listed(kc)
    # What %pip installed is removed for real: gone from the list, and from the files.
    run = execute(kc, "%pip uninstall -y sbk-lockpure")
    assert run.stream().endswith("  Successfully uninstalled sbk-lockpure-1.0\n"), run.outputs
    assert "sbk-lockpure 1.0" not in listed(kc)
    assert value(execute(kc, f"import pathlib\npathlib.Path({root!r}, 'sbk_lockpure').exists()")) == "False"
