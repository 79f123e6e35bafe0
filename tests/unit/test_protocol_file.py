"""The protocol's names live in one file, host_ts/protocol.json; each side uses exactly those, and no test reads
anyone's source text.

The kernel and the guest's glue are held to the file here, by what their code does. The TypeScript is held to it by
its types (protocol.ts makes the file's names types: deno check, run by test_static_checks.py, fails on a name the
file lacks or on a handler table that misses one) and by host_ts/supervisor_test.ts and file_service_test.ts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import paths
from sandbox_kernel.jupyter.guest_services import GuestServiceDesk
from sandbox_kernel.protocol import dispatcher, frames, names
from sandbox_kernel.protocol import schema as guest_schema
from sandbox_kernel.sandbox.launch_plan import LaunchPlan
from sandbox_kernel.sandbox.mounts import Mount, supervisor_config
from sandbox_kernel.sandbox.partials import PartialFiles
from sandbox_kernel.sandbox.process import SandboxProcess, _Pending
from sandbox_kernel.sandbox.startup import SandboxOptions

GUEST_CODE = paths.host_dir() / "guest"


# ---- frame kinds ---------------------------------------------------------------------------------------------
def test_the_kernel_frames_with_the_files_kinds_and_header():
    assert {kind: getattr(frames, kind) for kind in names.FRAME_KINDS} == dict(names.FRAME_KINDS)
    values = list(names.FRAME_KINDS.values())
    assert len(set(values)) == len(values) and all(0 < v < 256 for v in values)
    assert len(frames.encode_frame(frames.STDOUT, 1, b"")) == names.FRAME_HEADER_BYTES


@pytest.mark.parametrize("kind", sorted(names.FRAME_KINDS))
def test_the_kernel_takes_from_the_host_every_kind_but_its_own(kind):
    """REQUEST and DATA go from the kernel to the host only: one coming back is a protocol violation."""

    async def read() -> frames.Frame:
        reader = asyncio.StreamReader()
        reader.feed_data(frames.encode_frame(names.FRAME_KINDS[kind], 7, b"{}"))
        return await frames.read_frame(reader, 100)

    if kind in ("REQUEST", "DATA"):
        with pytest.raises(frames.FrameError, match="unknown frame kind"):
            asyncio.run(read())
    else:
        assert asyncio.run(read()) == frames.Frame(names.FRAME_KINDS[kind], 7, b"{}")


# ---- the guest's glue ----------------------------------------------------------------------------------------
def test_the_guests_names_are_generated_from_the_file():
    assert names.GUEST_MODULE.read_text() == names.guest_module(), (
        f"{names.GUEST_MODULE} is out of date with {names.PROTOCOL_FILE}: run `python -m sandbox_kernel.protocol.names`"
    )


GUEST_PROBE = r"""
import asyncio, json, sys, types

# The worker's JS module, and what exists only in Pyodide, faked: the glue runs under plain CPython.
emitted = []
host = types.ModuleType("_sandbox_host")
host.emit = lambda text, request: emitted.append(json.loads(text)["type"]) or True
host.write = lambda kind, text, request: None
host.wait_reply = lambda n: '{"value": []}'
ffi = types.ModuleType("pyodide.ffi")
ffi.can_run_sync, ffi.run_sync = lambda: True, asyncio.run
micropip = types.ModuleType("micropip")
async def install(specs, **options): pass
micropip.install = install
micropip.uninstall = lambda name: None  # (nothing is removed: the probe's own environment stays as it is)
compat = types.ModuleType("micropip._compat")
compat.compatibility_layer = types.SimpleNamespace(lockfile_packages={}, loadPackage=None)
sys.modules.update({"_sandbox_host": host, "pyodide": types.ModuleType("pyodide"), "pyodide.ffi": ffi,
                    "micropip": micropip, "micropip._compat": compat})
from sandbox_guest import _host, api, device, pipcmds, pkgs
pipcmds.not_importable = lambda specs: {}  # (the fake micropip installs nothing)
pipcmds._left_behind = lambda project, files: ""  # (and removes nothing)
from sandbox_guest.shell import SandboxShell
shown_interrupt = SandboxShell.showtraceback

def served(op):
    try:
        reply = json.loads(asyncio.run(api.handle(json.dumps({"op": op}), 1)))
    except Exception:  # a handler ran and failed on the empty request (no shell here): the op is served
        return True
    return reply.get("evalue") != f"unknown request {op!r}"

_host.attach()
_host.iopub("display_data", {"data": {}, "metadata": {}})
api._allow_stdin = True
for call in (
    lambda: api._input("name? "),
    lambda: device.Device({"S": {"methods": {"m": {"signature": "()", "doc": ""}}}}, 1 << 20).S.m(),
    lambda: asyncio.run(pkgs.load_packages({"imports": ["numpy"]})),
    lambda: asyncio.run(pkgs.install_from_wheelhouse(["six"])),
    lambda: pkgs.SETTINGS.update(allow_net=["pypi.org:443", "files.pythonhosted.org:443"]),
    lambda: pkgs.PipMagics(None).pip("install six"),
    lambda: pkgs.PipMagics(None).pip("uninstall -y pip"),  # a distribution this Python has
    lambda: shown_interrupt(types.SimpleNamespace(interrupt_requested=False), (KeyboardInterrupt, None, None)),
):
    try:
        call()
    except Exception as exc:  # the fake host's answers need not please the glue: what it sent counts
        print(repr(exc), file=sys.stderr)
print(json.dumps({"served": [op for op in json.loads(sys.argv[1]) if served(op)], "emitted": emitted}))
"""


@pytest.fixture(scope="module")
def guest() -> dict[str, list[str]]:
    """What the guest's glue does under plain CPython with a fake host (in a process of its own): the ops its
    dispatch (api.handle) serves among a few asked, and the types of the events its requests and output send."""
    asked = sorted(names.GUEST_OPS | names.SUPERVISOR_OPS | {"nonsense", "__class__", "Execute"})
    env = {**os.environ, "PYTHONPATH": str(GUEST_CODE)}
    done = subprocess.run(
        [sys.executable, "-c", GUEST_PROBE, json.dumps(asked)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout.splitlines()[-1])  # after what the glue printed
    return result


def test_the_guest_serves_exactly_the_files_guest_ops(guest):
    assert set(guest["served"]) == names.GUEST_OPS


def test_the_guest_sends_exactly_the_files_guest_events(guest):
    """input(), a skill call, a package load, wheels from the wheelhouse, %pip install and uninstall, output and an
    interrupt the cell got: each sends its event, by the file's name."""
    assert sorted(guest["emitted"]) == sorted(
        [
            "iopub",
            "input_request",
            "skill_call",
            "load_packages",
            "wheelhouse_wheels",
            "load_packages",
            "pip_installed",
            "pip_uninstalled",
            "interrupt_taken",
        ]
    )  # %pip install asks for the package from Pyodide's lock file first
    assert set(guest["emitted"]) == names.GUEST_EVENTS


# ---- the schema of what the sandbox sends, and the kernel's handlers ---------------------------------------------
def test_the_schema_has_a_reply_for_each_guest_op_and_nothing_else():
    assert guest_schema.names("replies") == names.GUEST_OPS


def test_the_schema_declares_each_guest_event_and_nothing_else():
    assert guest_schema.names("events") == names.GUEST_EVENTS


def test_the_kernel_serves_each_guest_request_event():
    """Every guest event but iopub and interrupt_taken is a request that the kernel's service desk answers (the
    dispatcher's table)."""
    assert set(dispatcher.REQUEST_TYPES) == names.GUEST_EVENTS - {"iopub", "interrupt_taken"}
    for name in dispatcher.REQUEST_TYPES:
        assert callable(getattr(GuestServiceDesk, name, None)), f"GuestServiceDesk has no {name}()"


def test_guest_ops_and_supervisor_ops_are_apart():
    """The supervisor serves its own ops and passes every other to the guest: a shared name would be shadowed."""
    assert not names.GUEST_OPS & names.SUPERVISOR_OPS


# ---- the kernel's side of the supervisor ---------------------------------------------------------------------
class Writer:
    """Collects the frames the kernel writes to the host."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, dict[str, Any]]] = []

    def write(self, data: bytes) -> None:
        head = frames._HEAD
        length, kind, request_id = head.unpack_from(data)
        assert len(data) == 4 + length
        self.sent.append((kind, request_id, json.loads(data[head.size :])))


class Listener:
    def on_stream(self, name: str, text: str) -> None: ...

    def on_event(self, payload: bytes) -> None: ...

    def on_blob(self, payload: bytes) -> None: ...


def running(loop: asyncio.AbstractEventLoop) -> tuple[SandboxProcess, Writer]:
    """A SandboxProcess as it is once started, without a process behind it: it reads frames given to _dispatch and
    writes to a Writer."""
    options = SandboxOptions(pyodide_dir=Path("/nowhere"), guest_site=Path("/nowhere"))
    sandbox = SandboxProcess(options, logging.getLogger("test"), say=lambda _: None)
    sandbox._dead = loop.create_future()
    sandbox._ready = loop.create_future()
    writer = Writer()
    sandbox._writer = writer  # type: ignore[assignment]
    return sandbox, writer


def host_event(event: dict[str, Any]) -> frames.Frame:
    return frames.Frame(frames.HOST_EVENT, 0, json.dumps(event).encode())


def test_the_kernel_reads_each_host_event_of_the_file():
    async def go() -> None:
        sandbox, _ = running(asyncio.get_running_loop())
        sandbox._pending[1] = _Pending("execute", asyncio.get_running_loop().create_future(), Listener(), {})
        sandbox._partials = PartialFiles([Mount(Path("/nowhere"), "/out", True)], "a1")

        def noted() -> bool:
            return sandbox._partials is not None and bool(sandbox._partials.places)

        effects = {
            "started": ({"event": "started", "id": 1}, lambda: sandbox._pending[1].started),
            "memory": ({"event": "memory", "id": 1, "bytes": 12345}, lambda: sandbox.wasm_bytes == 12345),
            "fatal": ({"event": "fatal", "message": "boom"}, lambda: "boom" in (sandbox._fatal or "")),
            "partial": ({"event": "partial", "mount": 0, "path": ["t.sandbox-partial-a1-0.csv"]}, noted),
        }
        # "hello" is the first frame: the kernel checks its token when the sandbox starts.
        assert set(effects) | {"hello"} == names.HOST_EVENTS
        for name, (event, seen) in effects.items():
            assert not seen(), name
            sandbox._dispatch(host_event(event))
            assert seen(), f"the kernel ignored the host event {name!r}"

    asyncio.run(go())


def test_the_kernel_takes_the_workers_ready_event_by_the_files_name():
    async def go() -> None:
        sandbox, _ = running(asyncio.get_running_loop())
        sandbox._dispatch(frames.Frame(frames.GUEST_EVENT, 0, b'{"type": "readyish"}'))
        assert not sandbox._ready.done()  # type: ignore[union-attr]
        (ready,) = names.WORKER_EVENTS
        sandbox._dispatch(frames.Frame(frames.GUEST_EVENT, 0, json.dumps({"type": ready, "x": 1}).encode()))
        assert sandbox._ready.result() == {"type": ready, "x": 1}  # type: ignore[union-attr]

    asyncio.run(go())


def test_the_kernel_sends_the_supervisor_exactly_the_files_supervisor_ops():
    async def go() -> list[tuple[int, int, dict[str, Any]]]:
        sandbox, writer = running(asyncio.get_running_loop())
        sandbox._pending[3] = _Pending("execute", asyncio.get_running_loop().create_future(), Listener(), {})
        sandbox.interrupt()
        sandbox.answer(9, {"value": "typed"})
        return writer.sent

    interrupt, reply = asyncio.run(go())
    assert interrupt[:2] == (frames.REQUEST, 3) and reply[:2] == (frames.REQUEST, 0)
    assert reply[2]["n"] == 9 and reply[2]["content"] == {"value": "typed"}
    assert {interrupt[2]["op"], reply[2]["op"]} == names.SUPERVISOR_OPS


def test_the_kernel_refuses_to_send_a_request_the_file_does_not_declare():
    async def go(op: str) -> Writer:
        sandbox, writer = running(asyncio.get_running_loop())
        with pytest.raises(names.UnknownName) as refused:
            await sandbox.request(op, {}, Listener())
        assert str(refused.value) == (
            f"{op!r} is not among the guestOps of {names.PROTOCOL_FILE}: {', '.join(json.loads(names.PROTOCOL_FILE.read_text())['guestOps'])}"
        )
        return writer

    for op in ("completion", "interrupt", "reply"):  # the supervisor's own ops are not requests to the guest
        assert asyncio.run(go(op)).sent == []


def test_declared_names_a_section_and_what_it_holds():
    assert names.declared("hostEvents", "fatal") == "fatal"
    with pytest.raises(names.UnknownName, match=r"'fatal' is not among the guestOps of .*protocol\.json: execute, "):
        names.declared("guestOps", "fatal")


# ---- the init message ----------------------------------------------------------------------------------------
def test_the_launch_plan_renders_the_init_message_with_the_files_keys(tmp_path):
    mounts = [Mount(tmp_path / "data", "/data", False), Mount(tmp_path / "out", "/out", True)]
    plan = LaunchPlan(
        host=tmp_path / "host_ts",
        pyodide=tmp_path / "pyodide",
        wheels=tmp_path / "wheels",
        snapshots=tmp_path / "snapshots",
        extra_read=[],
        mounts=mounts,
        allow_net=["pypi.org:443"],
        private=tmp_path / "sbk",
        shared_deno_dir=tmp_path / "deno",
        guest_site=tmp_path / "site",
        snapshot=tmp_path / "snapshots" / "s.bin",
        packages_site=tmp_path / "w" / "site",
        pyodide_lock='{"lock": 1}',
        pyodide_packages=tmp_path / "pkgs",
        ring_bytes=1 << 16,
        reply_bytes=1 << 10,
        max_frame_bytes=1 << 20,
        max_event_bytes=1 << 19,
        deno_checks_off=False,
    )
    init = plan.init_message("secret", "a1b2")
    assert set(init) == names.INIT_KEYS
    assert init == {
        "socket": str(tmp_path / "sbk" / "host.sock"),
        "token": "secret",
        "partialTag": "a1b2",
        "workerNet": ["pypi.org:443"],
        "workerInherits": False,
        "mounts": supervisor_config(mounts),
        "guestSite": str(tmp_path / "site"),
        "snapshot": str(tmp_path / "snapshots" / "s.bin"),
        "packagesSite": str(tmp_path / "w" / "site"),
        "pyodideLock": '{"lock": 1}',
        "pyodidePackages": str(tmp_path / "pkgs"),
        "guestDir": str(tmp_path / "host_ts" / "guest"),
        "ringBytes": 1 << 16,
        "replyBytes": 1 << 10,
        "maxFrameBytes": 1 << 20,
        "maxEventBytes": 1 << 19,
        "memoryLimitMb": 1024,
    }
    assert json.loads(json.dumps(init)) == init


def test_an_init_message_without_a_snapshot_or_pyodide_packages_says_null(tmp_path):
    plan = LaunchPlan(
        **{name: tmp_path / name for name in ("host", "pyodide", "wheels", "snapshots", "private", "shared_deno_dir")},
        extra_read=[],
        mounts=[],
        allow_net=[],
    )
    init = plan.init_message("t")
    assert (init["snapshot"], init["pyodidePackages"], init["pyodideLock"], init["packagesSite"]) == (None,) * 4
    assert init["workerNet"] == [] and init["mounts"] == []
