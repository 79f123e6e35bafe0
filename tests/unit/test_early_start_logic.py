"""The early start (jupyter/early_start.py): which settings it reads, when it spawns, and what the launcher takes."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel.jupyter import early_start, settings
from sandbox_kernel.sandbox import launcher as launcher_module
from sandbox_kernel.sandbox.launcher import LaunchSettings, SandboxLauncher
from sandbox_kernel.sandbox.startup import SandboxOptions


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The only Jupyter config folder (JUPYTER_CONFIG_DIR, no user or system ones)."""
    folder = tmp_path / "config"
    folder.mkdir()
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(folder))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    monkeypatch.setattr("jupyter_core.paths.SYSTEM_CONFIG_PATH", [])
    monkeypatch.setattr("jupyter_core.paths.ENV_CONFIG_PATH", [])
    return folder


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> list[SandboxOptions]:
    """What begin() spawns, recorded instead of started."""
    made: list[SandboxOptions] = []
    monkeypatch.setattr("sandbox_kernel.sandbox.spawn.spawn", lambda options: made.append(options) or FakeSpawned())
    monkeypatch.setattr(SandboxLauncher, "cached_options", lambda self: self.settings.options)
    yield made
    early_start.discard()


class FakeSpawned:
    def __init__(self, options: SandboxOptions | None = None) -> None:
        self.options = options
        self.discarded = False

    def discard(self) -> None:
        self.discarded = True


def test_only_the_kernels_own_settings_are_taken_from_its_command_line() -> None:
    argv = ["-f", "/tmp/k.json", "--SandboxKernel.cell_timeout=5", "--SandboxKernel.mounts", "['/d:/d']", "--ip=x"]
    assert early_start.setting_words(argv) == ["--SandboxKernel.cell_timeout=5", "--SandboxKernel.mounts", "['/d:/d']"]


def test_the_command_line_wins_over_the_config_file(config_dir: Path) -> None:
    (config_dir / "sandbox_kernel_config.py").write_text(
        "c.SandboxKernel.memory_limit_mb = 700\nc.SandboxKernel.cell_timeout = 9\n"
    )
    config, files = early_start.read_config(["-f", "k.json", "--SandboxKernel.cell_timeout=5"])
    values = early_start.settings_class()(config=config)
    assert (values.memory_limit_mb, values.cell_timeout) == (700, 5)
    assert files == [str(config_dir / "sandbox_kernel_config.py")]


def test_valid_settings_spawn_with_the_options_the_kernel_computes(config_dir: Path, spawns: list[Any]) -> None:
    early_start.begin(["-f", "k.json", "--SandboxKernel.memory_limit_mb=600", "--SandboxKernel.allow_net=['a.b:443']"])
    assert len(spawns) == 1
    values = settings.SandboxSettings(memory_limit_mb=600, allow_net=["a.b:443"])
    resolved = settings.resolve(values, Path.cwd(), [])
    assert spawns[0] == settings.launch_settings(values, resolved, lambda: "").options
    assert early_start.take() is not None
    assert early_start.take() is None  # once


@pytest.mark.parametrize(
    "argv",
    [
        ["--SandboxKernel.no_such_setting=1"],  # unknown: the kernel will say so
        ["--SandboxKernel.memory_limit_mb=lots"],  # not a number
        ["--SandboxKernel.mounts=['/nowhere/at/all:/data']"],  # a problem resolve() finds
        ["--SandboxKernel.early_start=False"],  # turned off
    ],
)
def test_nothing_is_spawned_when_the_settings_are_wrong_or_say_no(
    config_dir: Path, spawns: list[Any], argv: list[str]
) -> None:
    early_start.begin(["-f", "k.json", *argv])
    assert spawns == []
    assert early_start.take() is None


def test_a_broken_config_file_spawns_nothing_and_raises_nothing(config_dir: Path, spawns: list[Any]) -> None:
    (config_dir / "sandbox_kernel_config.py").write_text("c.SandboxKernel.memory_limit_mb = (\n")
    early_start.begin(["-f", "k.json"])
    assert spawns == []


def launch_settings(**changes: Any) -> LaunchSettings:
    options = SandboxOptions(Path(), Path())
    return LaunchSettings(replace(options, **changes), "https://example.invalid/index/")


def test_a_sandbox_needing_a_download_or_the_network_is_not_spawned_early(monkeypatch: pytest.MonkeyPatch) -> None:
    def launcher(**fields: Any) -> SandboxLauncher:
        made = LaunchSettings(SandboxOptions(Path(), Path()), "https://cdn.example/", **fields)
        return SandboxLauncher(made, configure=None, log=logging.getLogger("t"), say=print)  # type: ignore[arg-type]

    assert launcher().cached_options() is None  # a remote index: its lock comes over the network
    monkeypatch.setattr(launcher_module.packages, "offline_index", lambda value: True)
    monkeypatch.setattr(launcher_module.provision, "pyodide_problems", lambda thorough=False: ["gone"])
    assert launcher().cached_options() is None  # Pyodide is not (all) cached


class FakeIndex:
    abi_version = "2026_0"
    lock_text = "{}"

    def __init__(self, cache: Path) -> None:
        self.cache = cache


@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pyodide, the guest's wheels and the Pyodide index all on this machine, in a cache of the test's own."""
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(launcher_module.packages, "offline_index", lambda value: True)
    monkeypatch.setattr(launcher_module.provision, "pyodide_problems", lambda thorough=False: [])
    guest_site = tmp_path / "guest-site"
    guest_site.mkdir()
    (guest_site / ".complete").touch()
    monkeypatch.setattr(launcher_module.provision, "guest_site_dir", lambda: guest_site)
    monkeypatch.setattr(SandboxLauncher, "_make_index", lambda self: FakeIndex(tmp_path / "index-cache"))
    return tmp_path


def early_launcher(**fields: Any) -> SandboxLauncher:
    made = LaunchSettings(SandboxOptions(Path(), Path()), "/index", **fields)
    return SandboxLauncher(made, configure=None, log=logging.getLogger("t"), say=print)  # type: ignore[arg-type]


def test_packages_unpacked_before_are_spawned_early_with_their_folder(cached: Path) -> None:
    from sandbox_kernel.packages import index, unpacked

    assert early_launcher().cached_options() is not None  # the control: nothing to resolve
    specs, wheelhouse = ["attrs", "six==1.17"], cached / "wheels"
    assert early_launcher(packages=specs, wheelhouse=str(wheelhouse)).cached_options() is None  # not resolved yet
    folder = index.resolution_folder(specs, wheelhouse, FakeIndex.abi_version)
    (folder / unpacked.SITE).mkdir(parents=True)
    (folder / ".complete").touch()
    (folder / unpacked.WHEEL_HASHES).write_text("{}")
    assert early_launcher(packages=specs).cached_options() is None  # resolved, not unpacked
    (folder / unpacked.MANIFEST).write_text("{}")
    folder = index.resolution_folder(specs, None, FakeIndex.abi_version)
    (folder / unpacked.SITE).mkdir(parents=True)
    for name in (".complete", unpacked.WHEEL_HASHES, unpacked.MANIFEST):
        (folder / name).write_text("{}")
    options = early_launcher(packages=specs).cached_options()
    assert options is not None
    assert options.packages_site == folder / unpacked.SITE
    assert options.extra_read == [folder / unpacked.SITE, cached / "index-cache"]  # as _provisioned lists them
    assert early_launcher(packages=["not a requirement!"]).cached_options() is None  # the kernel says what is wrong


def test_a_wheelhouse_is_spawned_early_once_its_folder_exists(cached: Path) -> None:
    from sandbox_kernel.packages.wheelhouse import PipWheelhouse

    assert early_launcher(wheelhouse=str(cached / "wheels")).cached_options() is None
    folder = PipWheelhouse(cached / "wheels", FakeIndex.abi_version).folder
    folder.mkdir(parents=True)
    options = early_launcher(wheelhouse=str(cached / "wheels")).cached_options()
    assert options is not None and options.extra_read == [cached / "index-cache", folder]


def test_the_launcher_takes_the_early_sandbox_only_with_its_own_options() -> None:
    options = SandboxOptions(Path("/p"), Path("/s"), memory_limit_mb=512)
    log = logging.getLogger("t")
    same = FakeSpawned(replace(options))
    taker = SandboxLauncher(launch_settings(), None, log, print, early=same)  # type: ignore[arg-type]
    assert taker._take_early(options) is same
    assert taker._take_early(options) is None  # once
    other = FakeSpawned(replace(options, memory_limit_mb=1024))
    taker = SandboxLauncher(launch_settings(), None, log, print, early=other)  # type: ignore[arg-type]
    assert taker._take_early(options) is None
    assert other.discarded
    unused = FakeSpawned(options)
    taker = SandboxLauncher(launch_settings(), None, log, print, early=unused)  # type: ignore[arg-type]
    taker.discard_early("a test")
    assert unused.discarded
