"""Installable without PyPI's copy of this project: the built wheel carries every part, runs a cell from an
environment outside the repository, and `sandbox-kernel fetch --to DIR` makes a cache that kernels use offline and
read-only (as an image bakes it)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deno import find_deno_bin

from read_only_mount import read_only

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built once for the module."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("sandbox_kernel-*.whl")
    return built


def repo_files(folder: str) -> set[str]:
    """Every file of a top-level folder of the checkout, as the wheel names it (bytecode caches left out)."""
    root = REPO / folder
    return {
        f"sandbox_kernel/{folder}/{p.relative_to(root).as_posix()}"
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_the_wheel_carries_the_host_code_the_kernelspec_and_the_pinned_guest_wheels(wheel: Path) -> None:
    """Everything the kernel reads at run time; not the Deno tests or the guest glue's type stubs (development
    only: the next test runs a cell from the wheel without them)."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        requirements = zf.read("sandbox_kernel/sandbox/guest-requirements.txt").decode()
    host = repo_files("host_ts")
    development = {name for name in host if name.endswith("_test.ts") or "/host_ts/guest_stubs/" in name}
    assert development and not development & names, sorted(development & names)  # deno tests, mypy's stubs
    assert host - development <= names, sorted(host - development - names)
    assert repo_files("kernelspec") <= names, sorted(repo_files("kernelspec") - names)
    for part in (
        "sandbox_kernel/host_ts/guest/sandbox_guest/_protocol.py",  # generated from protocol.json
        "sandbox_kernel/host_ts/guest/stdlib/dbm/__init__.py",  # the stdlib modules Pyodide leaves out
        "sandbox_kernel/protocol/guest_messages.json",
        "sandbox_kernel/sandbox/oslayers/launch.py",
    ):
        assert part in names, part
    pins = [line for line in requirements.splitlines() if line.strip() and not line.startswith("#")]
    assert pins and all("==" in line and "--hash=sha256:" in line for line in pins), requirements


def outside_env(root: Path, wheel: Path) -> Path:
    """A new virtual environment outside the repository with only the wheel installed in it; its dependencies are
    seen from the test environment's site-packages (a path only: its editable install of this project is not)."""
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True,
                          capture_output=True, check=True).stdout.strip()  # fmt: skip
    Path(site, "_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python.parent


@pytest.fixture
def unreachable_registry() -> Iterator[str]:
    """An npm registry address that refuses every connection (a bound port nobody listens on), as offline."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"


def isolated_env(tmp: Path, **extra: str) -> dict[str, str]:
    """No Jupyter folder, cache or setting of the real user: only what the test makes under `tmp`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "SANDBOX_KERNEL_", "XDG_", "COV"))}
    (tmp / "home").mkdir(exist_ok=True)
    env.update(HOME=str(tmp / "home"), XDG_CACHE_HOME=str(tmp / "xdg-cache"), JUPYTER_PLATFORM_DIRS="0", **extra)
    env["SANDBOX_KERNEL_DENO"] = str(find_deno_bin())  # the deno package is the test environment's (outside_env)
    return env


def test_the_wheel_runs_a_cell_from_an_environment_outside_the_repository_with_a_cache_fetched_to_a_folder(
    wheel: Path, tmp_path: Path, unreachable_registry: str
) -> None:
    """Install the wheel outside the repository; `fetch --to` a folder; then, with the npm registry unreachable,
    a kernel of that environment runs a cell from the folder, started from its snapshot, and writes nothing there."""
    bin_dir = outside_env(tmp_path, wheel)
    env = isolated_env(tmp_path)

    def run(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "sandbox-kernel"), *argv], cwd=tmp_path, env={**env, **extra}, capture_output=True,
            text=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    where = subprocess.run(
        [bin_dir / "python", "-c", "import sandbox_kernel.paths as p; print(p.host_dir())"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(tmp_path / "venv"), where  # the wheel's host code, not the checkout's
    assert run("install", "--sys-prefix", "--no-fetch").returncode == 0
    cache = tmp_path / "baked cache"
    fetched = run("fetch", "--to", str(cache))
    assert fetched.returncode == 0, fetched.stderr
    assert f"use it with SANDBOX_KERNEL_CACHE={cache}" in fetched.stdout, fetched.stdout
    assert not (tmp_path / "xdg-cache").exists(), "fetch --to filled the user's cache too"
    unreadable = [p for p in cache.rglob("*") if not p.is_symlink() and not p.stat().st_mode & stat.S_IROTH]
    writable = [p for p in cache.rglob("*") if not p.is_symlink() and p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)]
    assert not unreadable and not writable, (unreadable[:5], writable[:5])  # read by others, written by none of them
    before = snapshot_of(cache)
    code = "import sandbox_guest.api as a; print(6 * 7, a.STARTED_FROM_SNAPSHOT)"
    done = run("run", "-c", code, SANDBOX_KERNEL_CACHE=str(cache), NPM_CONFIG_REGISTRY=unreachable_registry)
    assert (done.returncode, done.stdout) == (0, "42 True\n"), done.stderr
    assert "fetching" not in done.stderr and "downloading" not in done.stderr, done.stderr
    assert snapshot_of(cache) == before, "the kernel wrote into the cache"
    read_only_start(bin_dir, cache, env | {"NPM_CONFIG_REGISTRY": unreachable_registry}, code, tmp_path)


def snapshot_of(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


def read_only_start(bin_dir: Path, cache: Path, env: dict[str, str], code: str, cwd: Path) -> None:
    """The same run with the cache on a read-only mount."""
    done = subprocess.run(
        [*read_only(cache), str(bin_dir / "sandbox-kernel"), "run", "-c", code],
        cwd=cwd, env={**env, "SANDBOX_KERNEL_CACHE": str(cache)}, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "42 True\n"), done.stderr
    assert "cannot be kept in the cache" not in done.stderr, done.stderr  # fetch --to made the package folder
