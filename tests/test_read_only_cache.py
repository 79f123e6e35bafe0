"""A cache that kernels only read (baked into an image by `sandbox-kernel fetch --to`, mounted read-only): what it
lacks is said once, in words that name the folder, the reason and the fix, where the user looks; `fetch --to` bakes
what the kernel's settings need (`packages`), so that such a kernel starts with them.

Each kernel is real, started through jupyter_client from a kernelspec that runs it with the cache on a read-only
mount (read_only_mount.py); the cache is a copy of the real one (copies, never links: nothing reaches the original).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from conftest import START_TIMEOUT, Run, execute
from read_only_mount import read_only
from sandbox_kernel import paths
from sandbox_kernel.jupyter.kernelspec import kernel_json
from sandbox_kernel.sandbox import provision
from test_packages import make_wheel
from test_pyodide_index import write_lock

pytestmark = pytest.mark.slow

SNAPSHOT_SAID = "The start-up snapshot"
BUILDING = "building the start-up snapshot"


@pytest.fixture(scope="module")
def real_cache() -> Path:
    """The real cache, complete (conftest's kernels made it; made here when this module runs alone)."""
    asyncio.run(provision.ensure_all(print))
    if provision.snapshot_if_ready() is None:
        asyncio.run(provision.build_snapshot(print))
    return paths.cache_dir()


def cache_copy(real: Path, target: Path, snapshot: str = "there") -> Path:
    """What a kernel start needs of the real cache (Pyodide, this version's guest wheels and snapshot), copied;
    `snapshot`: "there", "cut short" (Pyodide cannot restore it), "missing", or "no folder" (no snapshots/)."""
    shutil.copytree(real / "deno", target / "deno", symlinks=True)
    wheels = provision.wheels_dir().relative_to(real)
    shutil.copytree(real / wheels, target / wheels, symlinks=True)
    if snapshot != "no folder":
        (target / "snapshots").mkdir()
    if snapshot in ("there", "cut short"):
        data = provision.snapshot_path().read_bytes()
        (target / "snapshots" / provision.snapshot_path().name).write_bytes(
            data if snapshot == "there" else data[: 1 << 20]
        )
    return target


@pytest.fixture
def house(tmp_path: Path) -> Path:
    folder = tmp_path / "house"
    folder.mkdir()
    make_wheel(folder, "sbk_demo")
    return folder


def contents(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `folder` with its size, mtime and mode: what a kernel must not change."""
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns, p.lstat().st_mode)
            for p in folder.rglob("*")}  # fmt: skip


class ReadOnlyKernel:
    """A kernel whose cache is `cache`, mounted read-only; its own stderr (the kernel's log) is kept."""

    def __init__(self, tmp: Path, cache: Path, settings: list[str]) -> None:
        specs = tmp / "kernels"
        spec = specs / "read-only-cache"
        spec.mkdir(parents=True, exist_ok=True)
        argv = kernel_json(sys.executable)["argv"]
        assert isinstance(argv, list)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [*read_only(cache), *argv, *settings], "display_name": "read-only cache", "language": "python",
        }))  # fmt: skip
        self.log = tmp / "kernel.log"
        self.km = KernelManager(
            kernel_name="read-only-cache", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)])
        )
        self._log_file = self.log.open("w")
        self.km.start_kernel(env={**os.environ, "SANDBOX_KERNEL_CACHE": str(cache)}, stderr=self._log_file)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=START_TIMEOUT)

    def run(self, code: str) -> Run:
        return execute(self.kc, code, timeout=120)

    def said(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        self._log_file.close()


def fetch(*words: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`sandbox-kernel fetch WORDS`, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "sandbox_kernel", "fetch", *words],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def imports_sbk_demo_and_writes_nothing(
    tmp_path: Path, cache: Path, settings: list[str], kernels: list[ReadOnlyKernel]
) -> ReadOnlyKernel:
    """A kernel on the read-only `cache` with `settings` imports sbk_demo, and the cache is unchanged after it."""
    before = contents(cache)
    kernels.append(kernel := ReadOnlyKernel(tmp_path, cache, settings))
    run = kernel.run("import sbk_demo\nsbk_demo.VALUE")
    assert run.content["status"] == "ok", run.content
    assert run.of_type("execute_result")[0]["data"]["text/plain"] == "'sbk_demo 1.0'"
    assert contents(cache) == before
    return kernel


@pytest.fixture
def kernels() -> Iterator[list[ReadOnlyKernel]]:
    started: list[ReadOnlyKernel] = []
    yield started
    for kernel in started:
        kernel.close()


def test_packages_a_read_only_cache_lacks_fail_each_cell_with_the_folder_and_the_fix(
    real_cache, tmp_path, house, kernels
):
    cache = cache_copy(real_cache, tmp_path / "cache")
    settings = ['--SandboxKernel.packages=["sbk-demo"]', f"--SandboxKernel.wheelhouse={house}"]
    kernels.append(kernel := ReadOnlyKernel(tmp_path, cache, settings))
    for _ in range(2):  # every cell says it, not only the first
        run = kernel.run("1 + 1")
        assert run.content["ename"] == "SandboxUnavailable", run.content
        evalue = run.content["evalue"]
        for words in (
            f"The wheels of SandboxKernel.packages ['sbk-demo'] (from the wheelhouse {house}) cannot be kept in the "
            f"cache {cache}: {cache}/packages cannot be written (Read-only file system)",
            f"Run `sandbox-kernel fetch --to {cache}` where the cache is made, with the kernel's settings",
        ):
            assert words in evalue, evalue
        assert "PermissionError" not in evalue and "preparing the sandbox failed" not in evalue, evalue


def test_fetch_to_bakes_the_settings_packages_and_a_read_only_kernel_imports_them(real_cache, tmp_path, house, kernels):
    """`fetch --to` over a cache that has the rest (nothing to download) resolves `packages` from the wheelhouse into
    it; a kernel with those settings then starts from it read-only, imports them, and writes nothing there."""
    cache = cache_copy(real_cache, tmp_path / "cache")
    settings = ['--SandboxKernel.packages=["sbk-demo"]', f"--SandboxKernel.wheelhouse={house}"]
    done = fetch("--to", str(cache), *settings)
    assert done.returncode == 0, done.stderr
    assert "SandboxKernel.packages ['sbk-demo'], unpacked in" in done.stdout, done.stdout
    kernel = imports_sbk_demo_and_writes_nothing(tmp_path, cache, settings, kernels)
    assert "cannot be kept in the cache" not in kernel.said(), kernel.said()


@pytest.fixture
def demo_index(tmp_path: Path) -> Path:
    """A Pyodide index folder with its own lock: one package, sbk-demo (import sbk_demo)."""
    folder = tmp_path / "index"
    folder.mkdir()
    make_wheel(folder, "sbk_demo")
    write_lock(folder)
    return folder


def test_fetch_to_with_import_bakes_pyodide_packages_that_a_read_only_kernel_then_imports(
    real_cache, tmp_path, demo_index, kernels
):
    """Without them, the import in a read-only cache fails naming `fetch --to ... --import`; with `fetch --to DIR
    --import NAME`, the same kernel imports it and writes nothing."""
    cache = cache_copy(real_cache, tmp_path / "cache")
    settings = [f"--SandboxKernel.pyodide_index={demo_index}"]
    kernels.append(kernel := ReadOnlyKernel(tmp_path, cache, settings))
    run = kernel.run("import sbk_demo")
    assert run.content["status"] == "error", run.content
    said = run.content["evalue"] + run.stream("stderr")
    assert f"sbk-demo (from {demo_index}) cannot be kept in the cache {cache}: {cache}/pyodide-packages/" in said, said
    assert "cannot be written (this user may not write there)" in said, said
    assert f"`sandbox-kernel fetch --to {cache} --import NAME` (in an image: as root" in said, said
    kernel.close()
    kernels.remove(kernel)

    done = fetch("--to", str(cache), "--import", "sbk_demo", *settings)
    assert done.returncode == 0, done.stderr
    assert "the Pyodide packages of --import sbk_demo: sbk-demo" in done.stdout, done.stdout
    imports_sbk_demo_and_writes_nothing(tmp_path, cache, settings, kernels)

    unknown = fetch("--to", str(cache), "--import", "nope", *settings)
    assert unknown.returncode == 1
    assert f"--import nope: no package of the Pyodide index {demo_index} provides it" in unknown.stderr


@pytest.mark.parametrize("words", [['--SandboxKernel.packages=["sbk-demo"]'], ["--import", "numpy"]])
def test_kernel_settings_and_imports_for_fetch_need_to(tmp_path, words):
    done = fetch(*words, timeout=120)
    assert (done.returncode, done.stderr) == (
        2,
        "sandbox-kernel fetch: kernel settings and --import apply with --to only (the user's cache gets them at a "
        "kernel's first start, or first import)\n",
    )


def wait_for(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("snapshot", ["missing", "no folder", "cut short"])
def test_a_read_only_cache_without_a_usable_snapshot_says_so_once_and_builds_none(
    real_cache, tmp_path, kernels, snapshot
):
    cache = cache_copy(real_cache, tmp_path / "cache", snapshot)
    before = contents(cache)
    kernels.append(kernel := ReadOnlyKernel(tmp_path, cache, []))
    assert kernel.run("x = 6 * 7").content["status"] == "ok"
    assert wait_for(lambda: SNAPSHOT_SAID in kernel.said()), kernel.said()
    crash = kernel.run("import os\nos._exit(1)")  # a second sandbox starts without a snapshot too
    assert crash.content["ename"] == "SandboxRestarted", crash.content
    assert kernel.run("print(6 * 7)").stream() == "42\n"
    said = kernel.said()
    assert said.count(SNAPSHOT_SAID) == 1, said
    snapshots = cache / "snapshots"
    expected = (
        f"{SNAPSHOT_SAID} {provision.snapshot_path().name}"
        + (" (the one there could not be restored)" if snapshot == "cut short" else "")
        + f" cannot be kept in the cache {cache}: {snapshots} cannot be written (this user may not write "
        f"there), as in a cache baked into an image by `sandbox-kernel fetch --to DIR`, which kernels only read. Make "
        f"it there with `sandbox-kernel fetch --to {cache}` where the cache is made, or point SANDBOX_KERNEL_CACHE at "
        "a writable copy of that folder; sandboxes start without it (about 3 s instead of 0.7 s)"
    )
    assert expected in said, said
    assert BUILDING not in said and "rebuilding it" not in said, said
    assert contents(cache) == before
    if snapshot == "missing":  # (doctor does not read a snapshot that is there)
        doctor = subprocess.run(
            [*read_only(cache), sys.executable, "-m", "sandbox_kernel", "doctor"],
            env={**os.environ, "SANDBOX_KERNEL_CACHE": str(cache)}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        (line,) = [line for line in doctor.stdout.splitlines() if "] snapshot:" in line]
        assert line.startswith(f"[warn] snapshot: missing. {SNAPSHOT_SAID} {provision.snapshot_path().name} cannot "
                               f"be kept in the cache {cache}: {snapshots} cannot be written"), line  # fmt: skip
