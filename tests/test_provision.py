"""The one-time fetch of Pyodide (through Deno, pinned by deno.lock) and of the guest wheels."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
    again = sandbox_kernel_cli("fetch", cache=tmp_path)
    assert again.returncode == 0
    assert "fetching" not in again.stderr and "downloading" not in again.stderr
    shutil.rmtree(tmp_path)


def test_pyodide_is_pinned_by_the_lock_file():
    lock = (paths.host_dir() / "deno.lock").read_text()
    version = paths.pyodide_version()
    assert f'"npm:pyodide@{version}": "{version}"' in lock
    assert f'"pyodide@{version}"' in lock and '"integrity": "sha512-' in lock
