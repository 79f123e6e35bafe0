"""SandboxKernel.packages without a start-up tax: unpacked once on the host into a folder every sandbox mounts
read-only; reused by the next kernel, never writable by a guest, unpacked again when damaged, left out of
checkpoints; `%pip uninstall` of one says what to change."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from conftest import execute, start_kernel, stop_kernel, value
from sandbox_kernel.client.sync_sandbox import Sandbox
from sandbox_kernel.packages import index, unpacked
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.launch_plan import TEST_DENO_ALL
from test_early_start import NOT_USED as EARLY_NOT_USED
from test_early_start import USED as EARLY_USED
from test_early_start import run_kernel
from test_packages import make_wheel

pytestmark = pytest.mark.slow
GUEST_SITE = "/lib/sandbox-packages"
MODULES = 150  # sbk_many's modules: more files than a checkpoint of a fresh session holds
SPECS = ["sbk-pre==1.0", "sbk-many"]
FIRST = 180  # seconds for the first cell of the first kernel: it resolves, unpacks and compiles the packages


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """A wheelhouse of its own (a new path: a new cache folder for this run's `packages`)."""
    folder = tmp_path_factory.mktemp("preinstalled-wheelhouse")
    make_wheel(folder, "sbk_pre")
    many = make_wheel(folder, "sbk_many")
    with zipfile.ZipFile(many) as zf:  # sbk_many with MODULES modules, each in the wheel's RECORD
        files = {info.filename: zf.read(info) for info in zf.infolist()}
    record_name = "sbk_many-1.0.dist-info/RECORD"
    record = files.pop(record_name).decode().splitlines()[:-1]
    for i in range(MODULES):
        data = f"N = {i}\n".encode()
        files[f"sbk_many/m{i}.py"] = data
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"sbk_many/m{i}.py,sha256={digest},{len(data)}")
    files[record_name] = ("\n".join([*record, f"{record_name},,"]) + "\n").encode()
    with zipfile.ZipFile(many, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return folder


def arguments(wheelhouse: Path) -> list[str]:
    return [f"--SandboxKernel.packages={SPECS!r}", f"--SandboxKernel.wheelhouse={wheelhouse}"]


def cache_folder(wheelhouse: Path) -> Path:
    """Where the kernel resolves and unpacks SPECS (the cache folder of this request)."""
    from sandbox_kernel import paths

    bundled = json.loads((paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json").read_text())
    return index.resolution_folder(SPECS, wheelhouse, bundled["info"]["abi_version"])


def fingerprint(site: Path) -> tuple[int, int, int]:
    """What unpacking again would change: the folder's inode, a module's and the manifest's modification times."""
    return (
        site.stat().st_ino,
        (site / "sbk_pre" / "__init__.py").stat().st_mtime_ns,
        (site.parent / unpacked.MANIFEST).stat().st_mtime_ns,
    )


@pytest.fixture(scope="module")
def first(wheelhouse):
    """The first kernel with these packages: its first cell waits while they are resolved, unpacked and compiled."""
    km, kc = start_kernel(arguments(wheelhouse))
    assert value(execute(kc, "import sbk_pre\nsbk_pre.VALUE", timeout=FIRST)) == "'sbk_pre 1.0'"
    yield kc
    stop_kernel(km, kc)


def test_packages_are_imported_from_the_read_only_folder_and_a_second_kernel_unpacks_nothing(wheelhouse, first):
    code = "import sbk_pre, sbk_many.m7\n(sbk_pre.VALUE, sbk_many.m7.N, sbk_pre.__file__)"
    answer = value(execute(first, code))
    assert answer == f"('sbk_pre 1.0', 7, '{GUEST_SITE}/sbk_pre/__init__.py')"
    # Not copied into the sandbox's own site-packages; listed where pip lists it, after site-packages on sys.path.
    code = "import os, site, sys\n(os.listdir(site.getsitepackages()[0]), sys.path.index(site.getsitepackages()[0]) + 1 == sys.path.index('/lib/sandbox-packages'))"
    assert value(execute(first, code)) == "([], True)"
    # Compiled once on the host by the guest's own Python: no sandbox compiles these modules again.
    code = "import os\n(sbk_pre.__cached__, os.path.isfile(sbk_pre.__cached__))"
    assert value(execute(first, code)) == f"('{GUEST_SITE}/sbk_pre/__pycache__/__init__.cpython-314.pyc', True)"
    assert "sbk-pre==1.0" in execute(first, "%pip list --format freeze").stream().split()
    assert f"Location: {GUEST_SITE}\n" in execute(first, "%pip show sbk-pre").stream()

    site = cache_folder(wheelhouse) / unpacked.SITE
    before = fingerprint(site)
    km, kc = start_kernel(arguments(wheelhouse))
    try:
        assert value(execute(kc, "import sbk_pre\nsbk_pre.VALUE", timeout=120)) == "'sbk_pre 1.0'"
    finally:
        stop_kernel(km, kc)
    assert fingerprint(site) == before, "the second kernel unpacked the packages again"


def test_a_kernel_with_packages_made_before_spawns_its_sandbox_early(wheelhouse, first, tmp_path):
    """Packages already resolved and unpacked need nothing from the network: the kernel's first sandbox is spawned
    as its process begins (jupyter/early_start.py) with the packages' folder, and the kernel uses it."""
    answer, log, _ = run_kernel(tmp_path, arguments(wheelhouse))
    assert answer == "2"
    assert EARLY_USED in log and EARLY_NOT_USED not in log, log


WRITES = {
    "open for writing": "open('{module}', 'w').write('VALUE = 1')",
    "replace a module with os.replace": "open('/tmp/m.py', 'w').write('VALUE = 1')\nimport os\nos.replace('/tmp/m.py', '{module}')",
    "remove a module": "import os\nos.remove('{module}')",
    "a new module": "open('{folder}/planted.py', 'w').write('VALUE = 1')",
    "a new folder": "import os\nos.mkdir('{folder}/planted')",
    "Emscripten's FS, past Python's checks": "import pyodide_js\npyodide_js.FS.writeFile('{module}', 'VALUE = 1')",
    "a rename in Emscripten's FS": "import pyodide_js\npyodide_js.FS.writeFile('/tmp/m.py', 'VALUE = 1')\npyodide_js.FS.rename('/tmp/m.py', '{module}')",
    "Deno, on the host path": "import js\njs.Deno.writeTextFileSync('{host_module}', 'VALUE = 1')",
    "Deno, a new file on the host": "import js\njs.Deno.writeTextFileSync('{host_folder}/planted.py', 'VALUE = 1')",
    "the shell: >": "!echo 'VALUE = 1' > {module}",
    "the shell: >>": "!echo 'VALUE = 1' >> {module}",
    "the shell: cp over a module": "!echo 'VALUE = 1' > /tmp/m.py && cp /tmp/m.py {module}",
    "the shell: mv over a module": "!echo 'VALUE = 1' > /tmp/m.py && mv /tmp/m.py {module}",
    "the shell: rm": "!rm {module}",
    "the shell: a new file": "!touch {folder}/planted.py",
}


def test_guest_code_cannot_change_the_unpacked_packages(wheelhouse, first):
    folder = cache_folder(wheelhouse)
    site = folder / unpacked.SITE
    places = {
        "module": f"{GUEST_SITE}/sbk_pre/__init__.py",
        "folder": f"{GUEST_SITE}/sbk_pre",
        "host_module": str(site / "sbk_pre" / "__init__.py"),
        "host_folder": str(site / "sbk_pre"),
    }
    for what, code in WRITES.items():
        run = execute(first, code.format(**places), timeout=60)
        if code.startswith("!"):  # the shell says why, in Python's words (the Emscripten FS cases prove the mount)
            said = f"Read-only file system: {GUEST_SITE} holds SandboxKernel.packages, unpacked once"
            assert said in run.stream("stderr"), (what, run.outputs)
        else:
            assert run.content["status"] == "error", (what, run.content)
        answer = value(execute(first, f"open('{places['module']}').read()"))
        assert answer == repr("VALUE = 'sbk_pre 1.0'\n"), f"{what}: {answer}"
    manifest = json.loads((folder / unpacked.MANIFEST).read_text())["files"]
    assert unpacked.folder_problems(site, manifest, thorough=True) == []
    run = execute(first, f"open('{places['module']}', 'w')")
    assert run.content["ename"] == "OSError"  # as Linux says on a read-only file system (EROFS)
    assert run.content["evalue"].startswith(
        f"[Errno 69] Read-only file system: {GUEST_SITE} holds SandboxKernel.packages, unpacked once on the host and "
        "read-only"
    ), run.content
    assert value(execute(first, "import sbk_pre\nsbk_pre.VALUE")) == "'sbk_pre 1.0'"


def test_pip_uninstall_of_a_preinstalled_package_says_what_to_change(first):
    run = execute(first, "%pip uninstall -y sbk-pre")
    assert run.content.get("ename") == "UsageError", run.content
    assert run.content["evalue"] == (
        f"%pip uninstall: sbk-pre 1.0 is preinstalled by SandboxKernel.packages, read-only in {GUEST_SITE} (shared "
        "by every sandbox with these packages): remove it from SandboxKernel.packages (and start the kernel again) "
        "to go without it"
    )
    assert value(execute(first, "import importlib.metadata as m\nm.version('sbk-pre')")) == "'1.0'"


def change_a_module(site: Path) -> None:
    module = site / "sbk_pre" / "__init__.py"
    module.write_text(module.read_text().replace("sbk_pre 1.0", "damaged!!!!"))
    assert module.stat().st_size == len("VALUE = 'sbk_pre 1.0'\n")  # same size: only its contents tell


def plant_a_module(site: Path) -> None:
    (site / "sbk_pre" / "planted.py").write_text("VALUE = 'planted'\n")


@pytest.mark.parametrize("damage", [change_a_module, plant_a_module], ids=["changed", "planted"])
def test_a_damaged_unpacked_folder_is_unpacked_again_not_trusted(wheelhouse, first, damage):
    site = cache_folder(wheelhouse) / unpacked.SITE
    damage(site)
    km, kc = start_kernel(arguments(wheelhouse))
    try:
        assert value(execute(kc, "import sbk_pre\nsbk_pre.VALUE", timeout=120)) == "'sbk_pre 1.0'"
        assert execute(kc, "import sbk_pre.planted").content["ename"] == "ModuleNotFoundError"
    finally:
        stop_kernel(km, kc)
    assert (site / "sbk_pre" / "__init__.py").read_text() == "VALUE = 'sbk_pre 1.0'\n"
    assert not (site / "sbk_pre" / "planted.py").exists()


def test_checkpoints_leave_the_packages_out_and_restore(wheelhouse):
    with Sandbox(packages=SPECS, wheelhouse=wheelhouse) as sb:
        assert sb.run("from sbk_many import m3\nx = m3.N").ok
        cp = sb.checkpoint("with-packages")
        assert cp.contents["files"] < MODULES, cp.contents  # the preinstalled folder is not in it
        assert sb.run("x = 0").ok
        sb.restore(cp)
        assert sb.run("(x, m3.N, m3.__file__)").text == f"(3, 3, '{GUEST_SITE}/sbk_many/m3.py')"


@pytest.mark.parametrize("layer", ["none", "landlock", "namespaces"])
def test_each_os_layer_alone_keeps_the_folder_read_only(wheelhouse, first, layer):
    """The second wall: with Deno's checks off (the guest may call any Deno API), Landlock alone and the namespaces'
    private root alone refuse a write into the unpacked folder; the control, with no layer, shows the write is real."""
    site = cache_folder(wheelhouse) / unpacked.SITE
    planted = site / "sbk_pre" / "planted.py"
    layers = (
        ["--SandboxKernel.os_sandbox=off"]
        if layer == "none"
        else ["--SandboxKernel.os_sandbox=required", f"--SandboxKernel.os_layers={layer}"]
    )
    km, kc = start_kernel([*arguments(wheelhouse), *layers], env={TEST_DENO_ALL: "1"})
    try:
        run = execute(kc, f"import js\njs.Deno.writeTextFileSync({str(planted)!r}, 'VALUE = 1')", timeout=120)
        if layer == "none":
            assert run.content["status"] == "ok" and planted.exists(), run.content  # the attack, unhindered
        else:
            assert run.content["status"] == "error" and not planted.exists(), run.content
    finally:
        stop_kernel(km, kc)
        planted.unlink(missing_ok=True)
