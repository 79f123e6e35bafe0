"""Starting from the memory snapshot: clean state, `device` present, stale snapshots rebuilt."""

from __future__ import annotations

import asyncio
import time

import pytest

from conftest import execute, start_kernel, stop_kernel, value
from sandbox_kernel.sandbox import provision

VISIBLE = "sorted(n for n in dir() if not n.startswith('_'))"


@pytest.fixture(scope="module")
def snapshot():
    return provision.snapshot_if_ready() or asyncio.run(provision.build_snapshot(print))


def started_from_snapshot(kc) -> bool:
    return value(execute(kc, "import sandbox_guest.api as _a\n_a.STARTED_FROM_SNAPSHOT")) == "True"


def test_snapshot_start_is_as_clean_as_a_fresh_one(snapshot):
    states = []
    for use in (True, False):
        km, kc = start_kernel([f"--SandboxKernel.use_snapshot={use}", '--SandboxKernel.skills=["TimeSkill"]'])
        try:
            assert started_from_snapshot(kc) is use
            first = execute(kc, "x = 1")
            states.append((first.content["execution_count"], value(execute(kc, VISIBLE)), execute(kc, "%who").stream()))
            assert value(execute(kc, "device.TimeSkill.add_days('2024-01-01')")) == "'2024-01-02'"
            assert value(execute(kc, "import sys; type(sys.stdout).__name__")) == "'BridgeStream'"
        finally:
            stop_kernel(km, kc)
    assert states[0] == states[1]
    assert states[0][2] == "x\t \n"


def test_a_stale_snapshot_is_rebuilt(snapshot):
    good = snapshot.read_bytes()
    snapshot.write_bytes(b"not a snapshot" * 1000)
    try:
        km, kc = start_kernel()
        try:
            assert not started_from_snapshot(kc)  # fell back to a plain start
            assert value(execute(kc, "1+1")) == "2"
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and (not snapshot.is_file() or snapshot.stat().st_size < 1_000_000):
                time.sleep(0.5)
            assert snapshot.stat().st_size > 1_000_000, "the kernel rebuilt the snapshot in the background"
        finally:
            stop_kernel(km, kc)
        km, kc = start_kernel()
        try:
            assert started_from_snapshot(kc)
        finally:
            stop_kernel(km, kc)
    finally:
        if not snapshot.is_file() or snapshot.stat().st_size < 1_000_000:
            snapshot.write_bytes(good)


def test_the_snapshot_is_not_writable_by_the_guest(kc, snapshot):
    run = execute(kc, f"import js\njs.Deno.writeTextFileSync({str(snapshot)!r}, 'poisoned')")
    assert run.content["status"] == "error" and "NotCapable" in run.content["evalue"]
    assert snapshot.read_bytes()[:4] != b"pois"
