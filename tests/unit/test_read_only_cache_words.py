"""A cache the kernel may not write (baked into an image): what cannot be kept there is said with the folder, the
reason and the fix, once per kernel; `fetch --to` reads the kernel's settings as a kernel does. (A cache under a
regular file stands in for a read-only one here; tests/test_read_only_cache.py uses a real read-only mount.)"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandbox_kernel import paths
from sandbox_kernel.cli import doctor
from sandbox_kernel.cli.fetch import configured
from sandbox_kernel.packages.checks import PackageError
from sandbox_kernel.packages.index import preinstall_wheels
from sandbox_kernel.packages.wheelhouse import PipWheelhouse
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.launcher import LaunchSettings, SandboxLauncher
from sandbox_kernel.sandbox.startup import SandboxOptions

ABI = "2026_0"


@pytest.fixture
def unwritable(tmp_path, monkeypatch) -> Path:
    """A cache that cannot be written: its path goes through a regular file (ENOTDIR)."""
    (tmp_path / "file").write_text("")
    cache = tmp_path / "file" / "cache"
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(cache))
    return cache


def test_packages_the_cache_cannot_take_name_the_folder_the_reason_and_fetch_to(unwritable, tmp_path):
    with pytest.raises(PackageError) as caught:
        asyncio.run(preinstall_wheels(["sbk-demo"], tmp_path, print, ABI))
    assert str(caught.value) == (
        f"The wheels of SandboxKernel.packages ['sbk-demo'] (from the wheelhouse {tmp_path}) cannot be kept in the "
        f"cache {unwritable}: {unwritable}/packages cannot be written (Not a directory), as in a cache baked into an "
        "image by `sandbox-kernel fetch --to DIR`, which kernels only read. Run `sandbox-kernel fetch --to "
        f"{unwritable}` where the cache is made, with the kernel's settings (it reads sandbox_kernel_config.py, and "
        "takes --SandboxKernel.packages=... and --SandboxKernel.wheelhouse=... too): it resolves them into the cache; "
        "or point SANDBOX_KERNEL_CACHE at a writable folder"
    )


def test_pip_from_the_wheelhouse_into_a_cache_it_cannot_write_says_to_preinstall(unwritable, tmp_path):
    house = PipWheelhouse(tmp_path, ABI)
    with pytest.raises(PackageError) as caught:
        asyncio.run(house.wheels(["sbk-demo"]))
    words = str(caught.value)
    assert words.startswith(
        "The wheels %pip install sbk-demo takes from SandboxKernel.wheelhouse cannot be kept in the cache "
        f"{unwritable}: {house.folder} cannot be written (Not a directory)"
    ), words
    assert words.endswith(
        f"Preinstall them instead: SandboxKernel.packages, resolved into the cache by `sandbox-kernel fetch --to "
        f"{unwritable}` with that setting where the cache is made; or point SANDBOX_KERNEL_CACHE at a writable folder"
    ), words


def test_cache_writable_looks_at_the_nearest_folder_there_is(tmp_path, unwritable):
    assert paths.cache_writable(tmp_path / "not" / "yet" / "made")
    assert not paths.cache_writable(unwritable / "snapshots")  # under a regular file: nothing can be made


def launcher() -> SandboxLauncher:
    async def configure(_: object) -> None:
        return None

    settings = LaunchSettings(SandboxOptions(Path(), Path()), "https://example.org/index/")
    return SandboxLauncher(settings, configure, logging.getLogger("test-read-only"), print)


def test_without_a_snapshot_in_a_cache_it_cannot_write_a_kernel_says_so_once_and_builds_none(
    monkeypatch, caplog, tmp_path
):
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(paths, "cache_writable", lambda folder: False)
    monkeypatch.setattr(provision, "build_snapshot", lambda say: pytest.fail("a build was started"))
    starts = launcher()
    starts.guest_info = {"snapshot": False}
    with caplog.at_level(logging.WARNING, "test-read-only"):
        for _ in range(3):  # the first sandbox, the spare, a restart
            starts._check_snapshot(SimpleNamespace(snapshot=None))  # type: ignore[arg-type]
    (said,) = [r.getMessage() for r in caplog.records]
    snapshots = provision.snapshot_path().parent
    assert said.startswith(
        f"The start-up snapshot {provision.snapshot_path().name} cannot be kept in the cache {tmp_path}: {snapshots} "
        "cannot be written (this user may not write there)"
    ), said
    assert said.endswith("; sandboxes start without it (about 3 s instead of 0.7 s)"), said


def test_a_snapshot_that_cannot_be_built_is_said(monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path))

    async def fails(say: object) -> Path:
        raise provision.ProvisionError("could not build the start-up snapshot (exit 1)")

    monkeypatch.setattr(provision, "build_snapshot", fails)

    async def start() -> None:
        starts = launcher()
        starts.guest_info = {"snapshot": False}
        starts._check_snapshot(SimpleNamespace(snapshot=None))  # type: ignore[arg-type]
        assert starts._snapshot_task is not None
        await asyncio.wait([starts._snapshot_task])
        await asyncio.sleep(0)  # its done callback

    with caplog.at_level(logging.WARNING, "test-read-only"):
        asyncio.run(start())
    assert [r.getMessage() for r in caplog.records] == [
        "the start-up snapshot could not be built; sandboxes start without it: could not build the start-up snapshot "
        "(exit 1)"
    ]


def test_doctor_says_a_missing_snapshot_cannot_be_made_in_a_read_only_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(paths, "cache_writable", lambda folder: False)
    check = doctor._snapshot()
    assert (check.ok, check.essential) == (False, False)
    assert check.detail.startswith(f"missing. The start-up snapshot {provision.snapshot_path().name} cannot be kept")
    assert f"`sandbox-kernel fetch --to {tmp_path}`" in check.detail
    monkeypatch.setattr(paths, "cache_writable", lambda folder: True)
    assert doctor._snapshot().detail == "not built yet: the first start builds it (or `sandbox-kernel fetch`)"


def test_fetch_reads_the_kernels_settings_as_a_kernel_does(monkeypatch, tmp_path):
    """sandbox_kernel_config.py from Jupyter's configuration folders, under the command line's settings."""
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    (tmp_path / "sandbox_kernel_config.py").write_text(
        "c.SandboxKernel.packages = ['from-the-file']\nc.SandboxKernel.wheelhouse = '/from/the/file'\n"
    )
    settings = configured(['--SandboxKernel.packages=["from-the-command-line"]'])
    assert (list(settings.packages), settings.wheelhouse) == (["from-the-command-line"], "/from/the/file")


def test_a_pyodide_package_the_cache_cannot_take_is_refused_before_it_is_downloaded(tmp_path, monkeypatch):
    from sandbox_kernel.packages.index import PyodideIndex

    bundled = paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json"  # Pyodide's own, in the real cache
    if not bundled.is_file():
        pytest.skip("Pyodide is not cached here (a kernel start or `sandbox-kernel fetch` caches it)")
    (tmp_path / "file").write_text("")
    unwritable = tmp_path / "file" / "cache"  # as the fixture `unwritable`: ENOTDIR, for root too
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(unwritable))
    index = PyodideIndex("https://index.example/pyodide/", unwritable / "pyodide-packages", bundled)
    downloads: list[str] = []
    monkeypatch.setattr(index, "_download", lambda pkg: downloads.append(pkg["file_name"]) or b"")
    name = index.by_import["numpy"]
    with pytest.raises(PackageError) as caught:
        index.fetch([name])
    assert downloads == [], "nothing is downloaded into a cache that cannot keep it"
    assert str(caught.value).startswith(
        f"{index.closure([name])[0]} (from https://index.example/pyodide/) cannot be kept in the cache {unwritable}: "
        f"{unwritable}/pyodide-packages cannot be written (this user may not write there)"
    ), caught.value
    assert str(caught.value).endswith(
        f"`sandbox-kernel fetch --to {unwritable} --import NAME` (in an image: as root, e.g. USER root before that "
        "RUN); or point SANDBOX_KERNEL_CACHE at a writable copy of that folder"
    )
