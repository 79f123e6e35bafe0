"""Packages in the sandbox: preloaded wheels, %pip under the allow-list, the Pyodide index."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import re
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from conftest import execute, serve_http, start_kernel, stop_kernel, value
from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision


def make_wheel(
    folder: Path,
    name: str,
    version: str = "1.0",
    tag: str = "py3-none-any",
    body: str = "",
    requires: tuple[str, ...] = (),
) -> Path:
    """A minimal wheel whose module `name` has VALUE = '<name> <version>' (and the dependencies `requires`)."""
    dist = f"{name}-{version}"
    needs = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": body or f"VALUE = '{name} {version}'\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n{needs}",
        f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    record = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, text in files.items():
            data = text.encode()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n")
    wheel = folder / f"{dist}-{tag}.whl"
    wheel.write_bytes(buffer.getvalue())
    return wheel


def sdist_that_runs_code(marker: Path) -> bytes:
    """An sdist whose in-tree build backend writes `marker` on import: built on the host = host code execution."""
    files = {
        "evil-1.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "evil-1.0/backend.py": f"import pathlib\npathlib.Path({str(marker)!r}).write_text('host code ran')\n",
        "evil-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buffer.getvalue()


class HostileIndex:
    """A server on 127.0.0.1 with a requirements file (`/req.txt`) naming an sdist that runs code when built
    (`/evil-1.0.tar.gz`), and a Pyodide lock (`serve_lock`); it records every request."""

    def __init__(self, marker: Path) -> None:
        self.requests: list[str] = []
        self.files: dict[str, bytes] = {"/evil-1.0.tar.gz": sdist_that_runs_code(marker)}
        self.not_found = "Not Found"  # the reason phrase of a 404: the server's own words
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                body = outer.files.get(self.path)
                if body is None:
                    self.send_response(404, outer.not_found)
                else:
                    self.send_response(200)
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server, self.url = serve_http(Handler)
        self.files["/req.txt"] = f"evil @ {self.url}evil-1.0.tar.gz\n".encode()

    def serve_lock(self, entries: dict[str, dict[str, object]]) -> None:
        info = json.loads((paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json").read_text())["info"]
        self.files["/pyodide-lock.json"] = json.dumps({"info": info, "packages": entries}).encode()

    def close(self) -> None:
        self.server.shutdown()


# ---- SandboxKernel.packages ------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheelhouse")
    make_wheel(folder, "sbk_demo")
    make_wheel(folder, "sbk_app", requires=("sbk-dep>=1",))  # for %pip install: a dependency comes too
    make_wheel(folder, "sbk_dep")
    return folder


def test_packages_from_a_wheelhouse_are_there_at_start_and_after_a_restart(wheelhouse):
    km, kc = start_kernel(["--SandboxKernel.packages=['sbk-demo==1.0']", f"--SandboxKernel.wheelhouse={wheelhouse}"])
    try:
        assert value(execute(kc, "import sbk_demo; sbk_demo.VALUE")) == "'sbk_demo 1.0'"
        assert execute(kc, "import js; js.Deno.exit(0)", timeout=60).content["ename"] == "SandboxRestarted"
        assert value(execute(kc, "import sbk_demo; sbk_demo.VALUE", timeout=120)) == "'sbk_demo 1.0'"
    finally:
        stop_kernel(km, kc)
    cached = list((paths.cache_dir() / "packages").glob("*/sbk_demo-1.0-py3-none-any.whl"))
    assert cached, "the resolved wheel is cached on the host"


READ_HOST_FILE = """import js
try:
    await js.Deno.readFile({path!r})
    print("read")
except Exception as e:
    print("refused" if "NotCapable" in str(e) else repr(e))"""


def test_pip_install_from_the_wheelhouse_without_network_and_again_after_a_restart(wheelhouse):
    km, kc = start_kernel([f"--SandboxKernel.wheelhouse={wheelhouse}"])
    try:
        run = execute(kc, "%pip install sbk-demo sbk-app", timeout=120)
        assert run.content["status"] == "ok", run.content
        assert "Installed sbk-demo, sbk-app in the sandbox (SandboxKernel.wheelhouse)" in run.stream()
        both = "import sbk_demo, sbk_app, sbk_dep\n(sbk_demo.VALUE, sbk_app.VALUE, sbk_dep.VALUE)"
        assert value(execute(kc, both)) == "('sbk_demo 1.0', 'sbk_app 1.0', 'sbk_dep 1.0')"
        listed = execute(kc, "%pip list --format freeze").stream()
        assert {"sbk-app==1.0", "sbk-dep==1.0", "sbk-demo==1.0"} <= set(listed.split()), listed
        # the sandbox reads the copies resolved for it, never the wheelhouse itself
        wheel = wheelhouse / "sbk_demo-1.0-py3-none-any.whl"
        assert execute(kc, READ_HOST_FILE.format(path=str(wheel))).stream() == "refused\n"
        assert execute(kc, "import js; js.Deno.exit(0)", timeout=60).content["ename"] == "SandboxRestarted"
        assert value(execute(kc, both, timeout=120)) == "('sbk_demo 1.0', 'sbk_app 1.0', 'sbk_dep 1.0')"  # replayed

        run = execute(kc, "%pip install sbk-absent", timeout=120)
        assert run.content["ename"] == "PackageLoadError", run.content
        evalue = run.content["evalue"]
        assert evalue.startswith(f"%pip install sbk-absent: SandboxKernel.wheelhouse ({wheelhouse}) has no "), evalue
        assert "SandboxKernel.allow_net" in evalue and len(run.of_type("error")) == 1

        run = execute(kc, "%pip install ../x", timeout=60)
        assert run.content["ename"] == "PackageLoadError"
        assert run.content["evalue"].startswith("%pip install: '../x' is not a package name"), run.content["evalue"]
        hostile = "from sandbox_guest import _host\n_host.request({'type': 'wheelhouse_wheels', 'specs': ['--index-url=http://x']})"
        answer = value(execute(kc, hostile, timeout=60))
        assert "'type': 'InvalidRequirement'" in answer and "--index-url=http://x" in answer, answer
        assert value(execute(kc, "import sbk_demo; sbk_demo.VALUE")) == "'sbk_demo 1.0'"
    finally:
        stop_kernel(km, kc)


def test_native_wheels_are_refused_clearly(tmp_path):
    make_wheel(tmp_path, "sbk_native", tag="cp311-cp311-linux_x86_64")
    km, kc = start_kernel(["--SandboxKernel.packages=['sbk-native']", f"--SandboxKernel.wheelhouse={tmp_path}"])
    try:
        run = execute(kc, "1+1", timeout=120)
        assert run.content["ename"] == "SandboxUnavailable"
        assert "no pure-Python (py3-none-any) or Pyodide (pyemscripten_" in run.content["evalue"]
        assert "sbk-native" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)


@pytest.fixture
def hostile(tmp_path):
    server = HostileIndex(tmp_path / "MARKER")
    yield server
    server.close()


@pytest.mark.parametrize(
    "spec",
    ["--requirement={url}req.txt", "evil @ {url}evil-1.0.tar.gz", "{url}evil-1.0.tar.gz"],
    ids=["option", "direct-reference", "url"],
)
def test_packages_that_would_build_an_sdist_on_the_host_are_refused(hostile, tmp_path, spec):
    spec = spec.format(url=hostile.url)  # each makes pip fetch the sdist and run its build backend
    km, kc = start_kernel([f"--SandboxKernel.packages={[spec]!r}"])
    try:
        run = execute(kc, "1+1", timeout=120)
        assert not (tmp_path / "MARKER").exists(), "a packages setting ran code on the host"
        assert hostile.requests == []
        assert run.content["ename"] == "SandboxUnavailable"
        assert f"SandboxKernel.packages: {spec!r}" in run.content["evalue"], run.content["evalue"]
    finally:
        stop_kernel(km, kc)


# ---- %pip and micropip -----------------------------------------------------------------------


class Index:
    """A PEP 503 simple index on 127.0.0.1 that serves the given wheels and records every request."""

    def __init__(self, wheel: Path, *more: Path) -> None:
        self.wheel = wheel
        self.requests: list[str] = []
        files = {w.name: w for w in (wheel, *more)}
        pages: dict[str, list[str]] = {}
        for w in files.values():
            project = re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower()
            digest = hashlib.sha256(w.read_bytes()).hexdigest()
            pages.setdefault(f"/simple/{project}", []).append(f'<a href="/files/{w.name}#sha256={digest}">{w.name}</a>')
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                name = self.path.removeprefix("/files/")
                if self.path.rstrip("/") in pages:
                    body, kind = (
                        f"<html><body>{''.join(pages[self.path.rstrip('/')])}</body></html>".encode(),
                        "text/html",
                    )
                elif name in files:
                    body, kind = files[name].read_bytes(), "application/octet-stream"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server, _ = serve_http(Handler)
        self.port = self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def index(wheelhouse):
    server = Index(wheelhouse / "sbk_demo-1.0-py3-none-any.whl")
    yield server
    server.close()


def test_pip_without_network_says_what_to_allow(kc, index):
    run = execute(kc, f"%pip install -q sbk-demo --index-url http://127.0.0.1:{index.port}/simple", timeout=120)
    assert run.content["status"] == "error"
    assert "needs network access to the package index" in run.content["evalue"]
    assert "SandboxKernel.allow_net" in run.content["evalue"] and "SandboxKernel.packages" in run.content["evalue"]
    assert index.requests == []
    errors = run.of_type("error")
    assert len(errors) == 1, errors  # once, not again from Pyodide's run_sync
    assert errors[0]["traceback"] == [f"PackageLoadError: {run.content['evalue']}"] and not run.stream("stderr")


def test_pip_from_an_allowed_index(index):
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{index.port}']"])
    try:
        run = execute(kc, f"%pip install sbk-demo --index-url http://127.0.0.1:{index.port}/simple", timeout=120)
        assert run.content["status"] == "ok", run.content
        assert "Installed sbk-demo" in run.stream()
        assert value(execute(kc, "import sbk_demo; sbk_demo.VALUE")) == "'sbk_demo 1.0'"
        assert f"/files/{index.wheel.name}" in index.requests
        assert execute(kc, "import js; js.Deno.exit(0)", timeout=60).content["ename"] == "SandboxRestarted"
        # %pip installs are replayed after the restart (from the same index)
        assert value(execute(kc, "import sbk_demo; sbk_demo.VALUE", timeout=120)) == "'sbk_demo 1.0'"
        run = execute(
            kc,
            f"import micropip\nawait micropip.install('sbk-demo', index_urls=['http://127.0.0.1:{index.port}/simple'])",
        )
        assert run.content["status"] == "ok"
    finally:
        stop_kernel(km, kc)


# ---- Pyodide's own packages ----------------------------------------------------------------------


def test_numpy_without_a_reachable_index_fails_fast(kc):
    started = time.monotonic()
    run = execute(kc, "import numpy", timeout=120)
    assert time.monotonic() - started < 20
    assert run.content["ename"] == "ModuleNotFoundError"  # raised by the import, as under CPython
    evalue = run.content["evalue"]
    assert evalue.startswith("No module named 'numpy': numpy is provided by the Pyodide index"), evalue
    assert f"cdn.jsdelivr.net/pyodide/v{paths.pyodide_version()}/full/" in evalue
    assert "SandboxKernel.pyodide_index" in evalue
    assert "SandboxKernel.allow_net does not apply" in evalue  # the host fetches these, not the sandbox
    assert value(execute(kc, "1+1")) == "2"


def test_pip_install_of_a_pyodide_package_says_where_it_comes_from_once(kc):
    run = execute(kc, "%pip install numpy", timeout=120)
    assert run.content["ename"] == "PackageLoadError"
    assert "numpy is provided by the Pyodide index" in run.content["evalue"]
    assert "SandboxKernel.allow_net does not apply" in run.content["evalue"]
    assert len(run.of_type("error")) == 1


@pytest.fixture(scope="module")
def local_index(tmp_path_factory) -> Path:
    return make_pyodide_index(tmp_path_factory.mktemp("pyodide-index"))


def make_pyodide_index(folder: Path) -> Path:
    """A Pyodide index folder: a lock file naming one package, sbk-pyo (`import sbk_pyo`), and its wheel."""
    wheel = make_wheel(folder, "sbk_pyo", body="VALUE = 'from the local Pyodide index'\n")
    bundled = json.loads((paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json").read_text())
    entry = {
        "name": "sbk-pyo", "version": "1.0", "file_name": wheel.name, "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "package_type": "package",
        "imports": ["sbk_pyo"], "depends": [], "unvendored_tests": False,
    }  # fmt: skip
    (folder / "pyodide-lock.json").write_text(json.dumps({"info": bundled["info"], "packages": {"sbk-pyo": entry}}))
    return folder


def test_imports_load_from_a_local_pyodide_index(local_index):
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={local_index}"])
    try:
        run = execute(kc, "import sbk_pyo\nsbk_pyo.VALUE", timeout=120)
        assert value(run) == "'from the local Pyodide index'"
        assert "sbk-pyo" in run.stream("stderr")  # Pyodide says what it loads (on stderr: pipes get the code's output)
    finally:
        stop_kernel(km, kc)


def test_auto_loading_can_be_switched_off(local_index):
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={local_index}", "--SandboxKernel.auto_load_packages=False"])
    try:
        assert execute(kc, "import sbk_pyo").content["ename"] == "ModuleNotFoundError"
    finally:
        stop_kernel(km, kc)


def test_a_package_the_index_cannot_provide_fails_only_where_it_is_imported(local_index, tmp_path):
    """As under CPython: `except ImportError` fallbacks and imports in functions never called work; the error is a
    ModuleNotFoundError that carries the loader's reason, raised by the import itself."""
    lock = json.loads((local_index / "pyodide-lock.json").read_text())
    gone = {**lock["packages"]["sbk-pyo"], "name": "sbk-gone", "file_name": "sbk_gone-1.0-py3-none-any.whl"}
    lock["packages"]["sbk-gone"] = {**gone, "imports": ["sbk_gone"]}  # named by the lock, its wheel missing
    for wheel in local_index.glob("*.whl"):
        (tmp_path / wheel.name).write_bytes(wheel.read_bytes())
    (tmp_path / "pyodide-lock.json").write_text(json.dumps(lock))
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={tmp_path}"])
    try:
        fallback = "try:\n    import sbk_gone as json\nexcept ImportError as e:\n    import json\n    print(repr(e))\njson.dumps([1])"
        run = execute(kc, fallback, timeout=120)
        assert value(run) == "'[1]'"
        assert run.stream().startswith("ModuleNotFoundError(\"No module named 'sbk_gone': "), run.stream()
        assert "sbk_gone-1.0-py3-none-any.whl" in run.stream()  # the loader's reason
        assert value(execute(kc, "def later():\n    import sbk_gone\n'defined'")) == "'defined'"
        run = execute(kc, "print('before')\nimport sbk_pyo, sbk_gone", timeout=120)
        assert run.stream("stderr").endswith("Loaded sbk-pyo\n"), run.stream("stderr")  # what can be had loads
        assert run.stream() == "before\n"  # the cell runs up to the import that fails
        assert run.content["ename"] == "ModuleNotFoundError" and "sbk_gone-1.0" in run.content["evalue"], run.content
        assert "sandbox_guest" not in "".join(run.content["traceback"])
        assert value(execute(kc, "sbk_pyo.VALUE")) == "'from the local Pyodide index'"  # loaded all the same
        assert execute(kc, "import importlib.util\nprint(importlib.util.find_spec('sbk_gone'))").stream() == "None\n"
    finally:
        stop_kernel(km, kc)


def test_the_package_cache_is_not_writable_by_the_guest(kc):
    cache = paths.cache_dir() / "pyodide-packages"
    run = execute(kc, f"import js\njs.Deno.writeTextFileSync({str(cache / 'planted.whl')!r}, 'x')")
    assert run.content["status"] == "error" and "NotCapable" in run.content["evalue"]
    assert not (cache / "planted.whl").exists()


def test_pip_list_show_and_uninstall_answer_as_pip_does(index):
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{index.port}']"])
    try:
        run = execute(kc, f"%pip install -q sbk-demo --index-url http://127.0.0.1:{index.port}/simple", timeout=120)
        assert run.content["status"] == "ok", run.content
        table = execute(kc, "%pip list").stream().splitlines()
        assert table[0].split() == ["Package", "Version"] and set(table[1]) == {"-", " "}, table
        assert "sbk-demo 1.0" in [" ".join(line.split()) for line in table], table
        assert "ipython" in " ".join(table)  # what the sandbox's Python has, as pip lists a whole environment
        shown = execute(kc, "%pip show sbk-demo").stream()
        assert shown.startswith("Name: sbk-demo\nVersion: 1.0\nSummary: \n"), shown
        assert "\nLocation: /lib/python3.14/site-packages\nRequires: \nRequired-by: \n" in shown, shown
        run = execute(kc, "%pip uninstall sbk-demo", allow_stdin=False)  # pip would ask first
        assert run.content.get("ename") == "UsageError" and "add -y" in run.content["evalue"], run.content
        assert value(execute(kc, "import importlib.metadata as m\nm.version('sbk-demo')")) == "'1.0'"  # still there
        run = execute(kc, "%pip uninstall -y sbk-demo")
        assert run.stream() == (
            "Found existing installation: sbk-demo 1.0\nUninstalling sbk-demo-1.0:\n  Successfully uninstalled sbk-demo-1.0\n"
        ), run.stream()
        assert run.stream("stderr") == "", run.stream("stderr")
        assert execute(kc, "import sbk_demo").content["ename"] == "ModuleNotFoundError"
        run = execute(kc, "%pip uninstall sbk-demo")
        assert run.stream("stderr") == "WARNING: Skipping sbk-demo as it is not installed.\n"
        # After a restart, what was uninstalled is not installed again.
        fetched = list(index.requests)
        assert execute(kc, "import js; js.Deno.exit(0)", timeout=60).content["ename"] == "SandboxRestarted"
        run = execute(kc, "import sbk_demo", timeout=120)
        assert run.content.get("ename") == "ModuleNotFoundError", (run.outputs, index.requests, fetched)
        assert index.requests == fetched
    finally:
        stop_kernel(km, kc)
