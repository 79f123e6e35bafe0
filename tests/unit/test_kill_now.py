"""kill_now (do_shutdown's, on the control thread) removes a sandbox's files written aside only once the process is
dead and the `partial` events it sent are read (sandbox/process.py): never one it told of just before the kill."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import threading
from pathlib import Path

from sandbox_kernel.protocol import frames
from sandbox_kernel.sandbox import spawn
from sandbox_kernel.sandbox.mounts import Mount
from sandbox_kernel.sandbox.partials import PartialFiles
from sandbox_kernel.sandbox.process import SandboxProcess
from sandbox_kernel.sandbox.startup import SandboxOptions

TAG = "a1b2c3"


async def shut_down_from_another_thread(child: subprocess.Popen[bytes], rw: Path) -> int | None:
    """`child` as a sandbox process whose last frame, a `partial` event, is still in the socket when kill_now is
    called from another thread; returns its exit code as kill_now returns."""
    loop = asyncio.get_running_loop()
    sandbox = SandboxProcess(SandboxOptions(Path(), Path()), logging.getLogger("test"), lambda _: None)
    sandbox._loop, sandbox._loop_thread = loop, threading.get_ident()
    sandbox._proc, sandbox.pid = spawn.Child(child), child.pid
    sandbox._dead = loop.create_future()
    sandbox._partials = PartialFiles([Mount(rw, "/rw", True)], TAG)
    ours, theirs = socket.socketpair()
    reader, sandbox._writer = await asyncio.open_connection(sock=ours)
    sandbox._frames_task = loop.create_task(sandbox._read_frames(reader))
    sandbox._tasks.append(sandbox._frames_task)
    aside = rw / f"new.sandbox-partial-{TAG}-0.csv"
    aside.write_text("part")
    event = {"event": "partial", "mount": 0, "path": [aside.name]}
    theirs.sendall(frames.encode_frame(frames.HOST_EVENT, 0, json.dumps(event).encode()))
    theirs.close()  # as the process's end is when it dies
    return await asyncio.to_thread(lambda: (sandbox.kill_now(), child.returncode)[1])


def test_kill_now_waits_for_the_process_and_reads_its_last_partial_event(tmp_path):
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)  # its own group, as a sandbox's
    try:
        code = asyncio.run(shut_down_from_another_thread(child, tmp_path))
    finally:
        child.kill()
        child.wait()
    assert code == -9  # SIGKILLed, and waited for before kill_now returned
    assert list(tmp_path.iterdir()) == []  # the file it told of in its last frame went too
