"""Pyodide indexes you can trust, built here from what PyPI has: a folder, a file:// URL or an http mirror with
its own lock; files checked against the lock at every use; bad values refused at the first cell; and compiled
Pyodide wheels (PEP 783, `pyemscripten_<abi>_wasm32`) from PyPI, through the index and through `packages`."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import execute, serve_http, start_kernel, stop_kernel, value
from sandbox_kernel import paths
from sandbox_kernel.packages.checks import lock_entry_problems
from sandbox_kernel.sandbox import provision
from test_packages import Index

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PYPI_NAMES = ["python-dateutil", "six", "librt"]


def bundled_lock() -> dict:
    return json.loads((paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json").read_text())


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_download(names: list[str], folder: Path) -> None:
    """Pure wheels and the guest's own Pyodide ABI's wheels, as SandboxKernel.packages resolves them."""
    platform = f"pyemscripten_{bundled_lock()['info']['abi_version']}_wasm32"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", "3.14",
         "--implementation", "cp", "--abi", "none", "--abi", "cp314", "--abi", "abi3", "--platform", "any",
         "--platform", platform, "-d", str(folder), *names],
        check=True, timeout=300,
    )  # fmt: skip


def lock_entry(wheel: Path) -> dict:
    """What a Pyodide lock file says of `wheel`: its imports (top-level names), dependencies and sha256."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    fields = [line.split(": ", 1) for line in meta.splitlines() if ": " in line]
    requires = [v for k, v in fields if k == "Requires-Dist" and "extra ==" not in v]
    tops = {n.split("/")[0] for n in names}
    return {
        "name": canonical(dict(fields)["Name"]), "version": dict(fields)["Version"], "file_name": wheel.name,
        "install_dir": "site", "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "package_type": "package",
        "imports": sorted(t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", ".data"))),
        "depends": [canonical(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]) for r in requires],
        "unvendored_tests": False,
    }  # fmt: skip


def write_lock(folder: Path) -> None:
    entries = {e["name"]: e for e in map(lock_entry, sorted(folder.glob("*.whl")))}
    for entry in entries.values():
        entry["depends"] = [d for d in entry["depends"] if d in entries]
    (folder / "pyodide-lock.json").write_text(json.dumps({"info": bundled_lock()["info"], "packages": entries}))


def test_every_entry_of_pyodides_own_lock_passes_the_checks_made_of_any_index():
    lock = bundled_lock()["packages"]
    assert len(lock) > 300  # the whole of Pyodide's distribution: wheels, and zips of libraries and tests
    assert {name: problems for name, pkg in lock.items() if (problems := lock_entry_problems(name, pkg))} == {}


@pytest.fixture(scope="module")
def pypi_index(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pypi-index")
    pip_download(PYPI_NAMES, folder)
    write_lock(folder)
    return folder


class Mirror:
    """An http mirror of a folder on 127.0.0.1 that records the paths asked for."""

    def __init__(self, folder: Path) -> None:
        self.requests: list[str] = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)

            def do_GET(self) -> None:
                mirror.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.server, self.url = serve_http(Handler)

    def close(self) -> None:
        self.server.shutdown()


def test_a_dotted_import_loads_the_package_and_its_dependencies_from_a_file_url(pypi_index):
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={pypi_index.as_uri()}"])
    try:
        run = execute(kc, "import dateutil.parser\ndateutil.parser.isoparse('2026-11-24T10:00').year", timeout=120)
        assert value(run) == "2026"
        assert "python-dateutil" in run.stream("stderr")  # Pyodide says what it loads, on stderr
        # A compiled Pyodide wheel from PyPI (PEP 783): its C code runs in the sandbox.
        run = execute(kc, "import librt.base64\nlibrt.base64.b64encode(b'sandbox')", timeout=120)
        assert value(run) == "b'c2FuZGJveA=='"
        assert execute(kc, "import no_such_module_here").content["ename"] == "ModuleNotFoundError"
    finally:
        stop_kernel(km, kc)


def test_an_http_mirror_is_read_with_its_own_lock_and_cached_files_are_checked(pypi_index):
    mirror = Mirror(pypi_index)
    six_wheel = next(pypi_index.glob("six-*.whl")).name
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={mirror.url}"])
    try:
        assert value(execute(kc, "import six\nsix.__name__", timeout=120)) == "'six'"
        assert "/pyodide-lock.json" in mirror.requests and f"/{six_wheel}" in mirror.requests
        digest = hashlib.sha256(mirror.url.encode()).hexdigest()[:12]
        cached = paths.cache_dir() / "pyodide-packages" / paths.pyodide_version() / digest / six_wheel
        cached.write_bytes(b"not the wheel the lock file names")
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=120)
        assert value(execute(kc, "import six\nsix.__name__", timeout=120)) == "'six'"
        assert mirror.requests.count(f"/{six_wheel}") == 2  # the changed file was fetched again, not loaded
        assert hashlib.sha256(cached.read_bytes()).hexdigest() == lock_entry(pypi_index / six_wheel)["sha256"]
    finally:
        stop_kernel(km, kc)
        mirror.close()


def lock_of(name: str, **fields: object) -> str:
    """A lock naming one package (None drops a field), as a hostile index could write it."""
    entry = {
        "name": name, "version": "1.0", "file_name": "x-1.0-py3-none-any.whl", "sha256": "0" * 64,
        "install_dir": "site", "package_type": "package", "imports": ["x"], "depends": [], **fields,
    }  # fmt: skip
    entries = {name: {k: v for k, v in entry.items() if v is not None}}
    return json.dumps({"info": bundled_lock()["info"], "packages": entries})


def bad_lock(folder: Path, text: str) -> str:
    folder.mkdir()
    (folder / "pyodide-lock.json").write_text(text)
    return str(folder)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: str(tmp / "no-such-folder"), "is not a folder"),
        (lambda tmp: "ftp://example.org/pyodide/", "use an http:// or https:// URL, a file:// URL or a folder"),
        (lambda tmp: bad_lock(tmp / "garbled", "{not json"), "is not valid JSON"),
        (lambda tmp: bad_lock(tmp / "nopackages", '{"info": {}}'), "has no 'packages' object"),
        (
            lambda tmp: bad_lock(tmp / "escape", lock_of("x", file_name="../../x.whl")),
            "package 'x': file_name '../../x.whl' is not a plain file name",
        ),
        (
            lambda tmp: bad_lock(tmp / "option", lock_of("--index-url=http://evil.example/")),
            "package '--index-url=http://evil.example/': the name is not a package name",
        ),
        (
            lambda tmp: bad_lock(tmp / "version", lock_of("x", version="1.0 --index-url x")),
            "package 'x': version '1.0 --index-url x' is not a PEP 440 version",
        ),
        (lambda tmp: bad_lock(tmp / "nohash", lock_of("x", sha256=None)), "package 'x': sha256 is missing"),
    ],
    ids=["missing-folder", "other-scheme", "garbled-lock", "not-a-lock", "path-in-file-name", "option-name",
         "option-version", "no-sha256"],
)  # fmt: skip
def test_a_bad_index_is_refused_at_the_first_cell(tmp_path, make, expected):
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={make(tmp_path)}"])
    try:
        run = execute(kc, "1+1", timeout=120)
        assert run.content["status"] == "error"
        assert "SandboxKernel.pyodide_index" in run.content["evalue"] and expected in run.content["evalue"]
    finally:
        stop_kernel(km, kc)


def test_packages_resolves_a_pep783_wheel_for_the_guests_abi(pypi_index):
    km, kc = start_kernel(["--SandboxKernel.packages=['librt']", f"--SandboxKernel.wheelhouse={pypi_index}"])
    try:
        assert value(execute(kc, "import librt.base64\nlibrt.base64.b64decode('c2FuZGJveA==')", timeout=120)) == (
            "b'sandbox'"
        )
        # Its compiled module (wasm) is loaded from the read-only folder the host unpacked, not from a copy.
        run = execute(kc, "librt.base64.__file__")
        assert value(run).startswith("'/lib/sandbox-packages/librt/base64.cpython-314-wasm32-emscripten.so"), run
    finally:
        stop_kernel(km, kc)


def wheel_with_data_files(folder: Path) -> Path:
    """A pure wheel that also installs a man page, as fonttools does (`*.data/data/share/man/man1/...`)."""
    dist = "sbk_data-1.0"
    files = {
        "sbk_data/__init__.py": "VALUE = 'imported'\n",
        f"{dist}.data/data/share/man/man1/sbk-data.1": ".TH SBK-DATA 1\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\nName: sbk-data\nVersion: 1.0\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        record = []
        for path, text in files.items():
            zf.writestr(path, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(text)}")
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n")
    return wheel


def test_a_wheel_with_data_files_loads_cleanly(tmp_path):
    wheel_with_data_files(tmp_path)
    write_lock(tmp_path)
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={tmp_path}"])
    try:
        run = execute(kc, "import sbk_data\nsbk_data.VALUE", timeout=120)
        assert value(run) == "'imported'"
        assert "Failed" not in run.stream() + run.stream("stderr"), run.outputs
        assert "sbk-data" in run.stream("stderr")  # Pyodide said it loaded it, on stderr
    finally:
        stop_kernel(km, kc)


def test_a_mirror_without_its_own_lock_says_so_when_a_file_cannot_be_had(tmp_path):
    mirror = Mirror(tmp_path)  # an empty folder: no lock file, no wheels
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={mirror.url}"])
    try:
        run = execute(kc, "import six", timeout=120)
        assert run.content["ename"] == "ModuleNotFoundError"
        assert f"{mirror.url} has no pyodide-lock.json" in run.content["evalue"]
        assert "looked up in Pyodide's own lock file" in run.content["evalue"]
        assert "/pyodide-lock.json" in mirror.requests
    finally:
        stop_kernel(km, kc)
        mirror.close()


def test_pip_installs_a_pep783_wheel_from_an_allowed_index(pypi_index):
    index = Index(*sorted(pypi_index.glob("*.whl")))  # librt and its (pure) dependency
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{index.port}']"])
    try:
        run = execute(kc, f"%pip install -q librt --index-url http://127.0.0.1:{index.port}/simple", timeout=120)
        assert run.content["status"] == "ok", run.content
        assert value(execute(kc, "import librt.base64\nlibrt.base64.b64encode(b'pip')")) == "b'cGlw'"
        assert any(r.startswith("/files/librt-") and "pyemscripten" in r for r in index.requests), index.requests
    finally:
        stop_kernel(km, kc)
        index.close()


def test_pip_install_takes_what_the_configured_index_has_without_network(pypi_index):
    """`%pip install six` with six in SandboxKernel.pyodide_index and no allow_net: installed from the index."""
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={pypi_index.as_uri()}"])
    try:
        run = execute(kc, "%pip install six", timeout=120)
        assert run.content["status"] == "ok", run.content
        assert "Loaded six" in run.stream("stderr") and "Load" not in run.stream(), (run.stream(), run.stream("stderr"))
        assert value(execute(kc, "import six\nsix.PY3")) == "True"
    finally:
        stop_kernel(km, kc)


def test_tqdm_from_pypi_draws_its_bars_without_a_thread_warning(tmp_path):
    """tqdm's monitor thread cannot start in the sandbox: the bar works, and says nothing about threads."""
    pip_download(["tqdm"], tmp_path)
    write_lock(tmp_path)
    km, kc = start_kernel([f"--SandboxKernel.pyodide_index={tmp_path}"])
    try:
        run = execute(kc, "from tqdm import tqdm\nfor i in tqdm(range(3)):\n    pass", timeout=120)
        assert run.content["status"] == "ok", run.content
        errors = run.stream("stderr")
        assert "3/3" in errors, errors  # the bar
        assert "thread" not in errors and "Warning" not in errors, errors
        assert value(execute(kc, "from tqdm import trange\nsum(trange(4))")) == "6"
    finally:
        stop_kernel(km, kc)
