"""A damaged cache never hangs the kernel: it is repaired from the registry, or the first cell says what to do.

Each case starts a real kernel on its own copy of the cache (SANDBOX_KERNEL_CACHE) with one file damaged.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import execute, start_kernel, stop_kernel
from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision

REPAIR_BOUND = 60.0  # seconds from launch to the first cell's answer (measured: 1 to 5 s)
CLOSED_REGISTRY = "http://127.0.0.1:9/"  # nothing listens there: the npm registry is "unreachable"


def _pyodide(cache: Path) -> Path:
    return paths.pyodide_dir(cache / "deno")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100_000])


def _same_size_garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[5000:5100] = b"x" * 100
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated wasm": lambda cache: _truncate(_pyodide(cache) / "pyodide.asm.wasm"),
    "deleted wasm": lambda cache: (_pyodide(cache) / "pyodide.asm.wasm").unlink(),
    "deleted stdlib": lambda cache: (_pyodide(cache) / "python_stdlib.zip").unlink(),
    "garbled lock": lambda cache: (_pyodide(cache) / "pyodide-lock.json").write_text("{garbage"),
    "stdlib garbled in place": lambda cache: _same_size_garble(_pyodide(cache) / "python_stdlib.zip"),
    "garbled snapshot": lambda cache: _same_size_garble(next((cache / "snapshots").glob("*.bin"))),
}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A full copy of the real cache (real copies, never links: the damage must not reach the original)."""
    provision.snapshot_path()  # the real cache is complete once conftest's kernels ran; copy it
    copy = tmp_path / "cache"
    shutil.copytree(
        paths.cache_dir(), copy, copy_function=shutil.copy2, ignore=shutil.ignore_patterns("pyodide-packages")
    )
    return copy


def first_cell(cache: Path, extra_env: dict[str, str] | None = None):
    """Start a kernel on `cache`, run `1+1`; (the run, seconds from launch to its reply)."""
    t0 = time.monotonic()
    km, kc = start_kernel(env={"SANDBOX_KERNEL_CACHE": str(cache), **(extra_env or {})})
    try:
        run = execute(kc, "1+1", timeout=REPAIR_BOUND)
        took = time.monotonic() - t0
        kc.kernel_info(reply=True, timeout=30)  # the kernel still answers
        return run, took
    finally:
        stop_kernel(km, kc)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_cache_is_repaired_at_start(cache, damage, monkeypatch):
    DAMAGE[damage](cache)
    run, took = first_cell(cache)
    assert run.content["status"] == "ok" and run.of_type("execute_result"), run.outputs
    assert took < REPAIR_BOUND, took
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(cache))
    assert provision.pyodide_problems(thorough=True) == [], "the cache was not repaired"


def test_offline_a_damaged_cache_fails_the_first_cell_with_the_fix(cache):
    DAMAGE["truncated wasm"](cache)
    run, took = first_cell(cache, {"NPM_CONFIG_REGISTRY": CLOSED_REGISTRY})
    assert took < REPAIR_BOUND, took
    assert run.content["status"] == "error" and run.content["ename"] == "SandboxUnavailable", run.content
    message = run.content["evalue"]
    assert "could not fetch Pyodide" in message and "npm registry" in message, message
    assert "sandbox-kernel fetch" in message and str(cache) in message, message  # the fix and the folder
    assert "Traceback" not in message and "backtrace" not in message.lower(), message


def test_fetch_repairs_and_offline_says_one_line(cache, monkeypatch):
    from test_provision import sandbox_kernel_cli

    DAMAGE["stdlib garbled in place"](cache)
    offline = {"NPM_CONFIG_REGISTRY": CLOSED_REGISTRY}
    failed = sandbox_kernel_cli("fetch", cache=cache, env=offline)
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if line.startswith("sandbox-kernel: could not")]
    assert len(errors) == 1 and "sandbox-kernel fetch" in errors[0], failed.stderr
    assert "stack backtrace" not in failed.stderr and "Traceback" not in failed.stderr, failed.stderr
    fixed = sandbox_kernel_cli("fetch", cache=cache)
    assert fixed.returncode == 0, fixed.stderr
    assert "fetching Pyodide" in fixed.stderr
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(cache))
    assert provision.pyodide_problems(thorough=True) == []
