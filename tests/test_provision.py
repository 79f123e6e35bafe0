"""The one-time fetch of Pyodide (through Deno, pinned by deno.lock) and of the guest wheels."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_kernel import paths


def sandbox_kernel_cli(*args: str, cache: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SANDBOX_KERNEL_CACHE": str(cache), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sandbox_kernel", *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_first_fetch_says_so_and_later_ones_use_the_cache(tmp_path):
    first = sandbox_kernel_cli("fetch", cache=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"fetching Pyodide {paths.pyodide_version()} through Deno" in first.stderr
    assert "downloading IPython wheels" in first.stderr
    pyodide = paths.pyodide_dir(tmp_path / "deno")
    assert (pyodide / "pyodide.asm.wasm").is_file()
    assert len(list((tmp_path / "guest-wheels").glob("*/ipython-*.whl"))) == 1
    # kernel_info's language version is known before any fetch: the manifest's must be the fetched Pyodide's.
    lock = json.loads((pyodide / "pyodide-lock.json").read_text())
    assert json.loads((paths.host_dir() / "pyodide-files.json").read_text())["python"] == lock["info"]["python"]
    again = sandbox_kernel_cli("fetch", cache=tmp_path)
    assert again.returncode == 0
    assert "fetching" not in again.stderr and "downloading" not in again.stderr
    shutil.rmtree(tmp_path)


def test_pyodide_is_pinned_by_the_lock_file():
    lock = (paths.host_dir() / "deno.lock").read_text()
    version = paths.pyodide_version()
    assert f'"npm:pyodide@{version}": "{version}"' in lock
    assert f'"pyodide@{version}"' in lock and '"integrity": "sha512-' in lock


@pytest.fixture
def unreachable_registry() -> Iterator[str]:
    """An npm registry address that refuses every connection (a bound port nobody listens on), as offline."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"


@pytest.mark.parametrize("command", [["run", "-c", "print(1)"], ["fetch"]])
def test_an_offline_first_start_says_fetching_once_and_that_the_registry_is_unreachable(
    tmp_path, unreachable_registry, command
):
    """Every sandbox the kernel tries (kernel_info, each cell, the retry of a failed start) provisions again: the
    line is said once, and the error says the registry could not be reached and what to do."""
    done = sandbox_kernel_cli(*command, cache=tmp_path, env={"NPM_CONFIG_REGISTRY": unreachable_registry})
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("fetching Pyodide") == 1, done.stderr
    assert f"the npm registry at {unreachable_registry}pyodide/" in done.stderr, done.stderr
    assert "could not be reached (Connection refused" in done.stderr
    assert "this machine seems to be offline. Run `sandbox-kernel fetch` where the npm registry" in done.stderr
    assert done.stderr.count("could not be reached") == 1, done.stderr
