"""`sandbox-kernel mcp`, driven by the MCP SDK's own client: over stdio, and over streamable HTTP behind its token."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import queue
import re
import secrets
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import BlobResourceContents, CallToolResult, EmbeddedResource, ImageContent, TextContent

from sandbox_kernel.client.agent import AsyncSandbox
from sandbox_kernel.client.mcp import MAX_FILE_BYTES
from sandbox_kernel.client.mcp_http import TOKEN_ENV

FIXTURES = Path(__file__).parent / "skill_fixtures"
WAIT = 120  # seconds for one tool call (the first one waits for the sandbox to start)


def server_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "sandbox_kernel", "mcp", *arguments]


class Client:
    """One MCP ClientSession, held open by a task on a thread of its own, for synchronous tests."""

    def __init__(self, connect: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ready: concurrent.futures.Future[ClientSession] = concurrent.futures.Future()
        self.stop: asyncio.Event | None = None
        self.held = asyncio.run_coroutine_threadsafe(self._hold(connect), self.loop)
        self.session = self.ready.result(timeout=WAIT)

    async def _hold(self, connect: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        """Enter and leave the transport and the session in one task, as anyio requires."""
        self.stop = asyncio.Event()
        try:
            async with connect() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self.ready.set_result(session)
                await self.stop.wait()
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=WAIT)

    def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return self._run(self.session.call_tool(tool, arguments))

    def text(self, tool: str, **arguments: Any) -> str:
        """The text of a call that must have succeeded with one text block."""
        result = self.call(tool, **arguments)
        assert not result.is_error, result.content
        [block] = result.content
        assert isinstance(block, TextContent)
        return block.text

    def error(self, tool: str, **arguments: Any) -> str:
        """The text of a call that must have failed."""
        result = self.call(tool, **arguments)
        assert result.is_error, result.content
        assert isinstance(result.content[0], TextContent)
        return result.content[0].text

    def list_tools(self) -> Any:
        return self._run(self.session.list_tools())

    def close(self) -> None:
        assert self.stop is not None
        self.loop.call_soon_threadsafe(self.stop.set)
        self.held.result(timeout=WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def stdio(*arguments: str, env: dict[str, str] | None = None) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=server_command(*arguments)[1:], env=env or dict(os.environ)
    )
    return Client(lambda: stdio_client(params))


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A read-write folder (/data in the guest) and a read-only one (/ro) holding table.csv."""
    rw, ro = tmp_path_factory.mktemp("rw"), tmp_path_factory.mktemp("ro")
    (ro / "table.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    return rw, ro


@pytest.fixture(scope="module")
def mcp(folders: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    rw, ro = folders
    client = stdio(
        f"--SandboxKernel.mounts={json.dumps([f'{rw}:/data:rw', f'{ro}:/ro:ro'])}",
        f"--SandboxKernel.skills_path={FIXTURES}",
        '--SandboxKernel.skill_policy={"GuardedSkill": "ask", "GuardedSkill.other": "deny"}',
        f"--SandboxKernel.audit_log={tmp_path_factory.mktemp('audit') / 'calls.jsonl'}",
        "--SandboxKernel.cell_timeout=60",
    )
    yield client
    client.close()


def tiny_png() -> bytes:
    """A valid 1x1 red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0"))
        + chunk(b"IEND", b"")
    )


def schema(properties: dict[str, Any], required: list[str], title: str) -> dict[str, Any]:
    found = {"properties": properties, "type": "object", "title": title}
    return {**found, "required": required} if required else found


def test_tools_and_their_input_schemas(mcp: Client) -> None:
    def text(title: str, description: str) -> dict[str, Any]:
        return {"description": description, "title": title, "type": "string"}

    tools = {tool.name: tool for tool in mcp.list_tools().tools}
    assert {name: tool.input_schema for name, tool in tools.items()} == {
        "run_python": schema({"code": text("Code", "Python (IPython) code to run")}, ["code"], "run_pythonArguments"),
        "restart": schema({}, [], "restartArguments"),
        "checkpoint": schema({"name": text("Name", "the checkpoint's name")}, ["name"], "checkpointArguments"),
        "restore": schema({"name": text("Name", "a name given to checkpoint")}, ["name"], "restoreArguments"),
        "upload_file": schema(
            {
                "path": text("Path", "absolute guest path inside a writable mount"),
                "content": text("Content", "the file's content: text, or base64 with encoding='base64'"),
                "encoding": {
                    "default": "utf-8",
                    "description": "how content is given",
                    "enum": ["utf-8", "base64"],
                    "title": "Encoding",
                    "type": "string",
                },
            },
            ["path", "content"],
            "upload_fileArguments",
        ),
        "download_file": schema(
            {"path": text("Path", "absolute guest path inside a mount")}, ["path"], "download_fileArguments"
        ),
        "list_skills": schema({}, [], "list_skillsArguments"),
    }
    assert all(tool.output_schema is None and tool.description for tool in tools.values())


def test_state_persists_across_calls(mcp: Client) -> None:
    assert mcp.text("run_python", code="kept = 41\nprint('set')") == "set"
    assert mcp.text("run_python", code="kept + 1") == "Out: 42"


def test_each_run_says_what_it_cost(mcp: Client) -> None:
    cost = mcp.call("run_python", code="import time\ntime.sleep(0.2)\nprint('x' * 99)").structured_content
    assert (cost["timed_out"], cost["restarted"]) == (False, False)
    metrics = cost["metrics"]
    assert sorted(metrics) == ["cpu_s", "output_bytes", "peak_memory_bytes", "skill_calls", "wall_s"]
    assert metrics["wall_s"] >= 0.2 and metrics["skill_calls"] == 0 and metrics["output_bytes"] >= 100


def test_displayed_and_returned_images_are_image_content(mcp: Client) -> None:
    png, jpeg = tiny_png(), b"\xff\xd8\xff\xe0 not really a jpeg"
    code = (
        f"from IPython.display import Image, display\ndisplay(Image(data={png!r}))\nImage(data={jpeg!r}, format='jpeg')"
    )
    result = mcp.call("run_python", code=code)
    assert not result.is_error
    text, first, second = result.content
    assert isinstance(text, TextContent) and isinstance(first, ImageContent) and isinstance(second, ImageContent)
    assert text.text == "[image/png image displayed]\nOut: <IPython.core.display.Image object>"
    assert (first.mime_type, base64.b64decode(first.data)) == ("image/png", png)
    assert (second.mime_type, base64.b64decode(second.data)) == ("image/jpeg", jpeg)


def test_a_cell_error_is_a_tool_error_with_the_to_llm_text(mcp: Client) -> None:
    result = mcp.call("run_python", code="print('before')\nraise ValueError('bad value')")
    assert result.is_error
    [block] = result.content
    assert isinstance(block, TextContent)
    expected = (
        r"before\n\[error\] ValueError: bad value\n-{75}\nValueError +Traceback \(most recent call last\)\n"
        r"Cell In\[\d+\], line 2\n      1 print\('before'\)\n----> 2 raise ValueError\('bad value'\)\n"
        r"ValueError: bad value"
    )
    assert re.fullmatch(expected, block.text), block.text


def test_upload_and_download_inside_the_mounts(mcp: Client, folders: tuple[Path, Path]) -> None:
    rw, _ = folders
    assert mcp.text("upload_file", path="/data/notes.csv", content="héllo\n") == "Wrote 7 bytes to /data/notes.csv."
    assert (rw / "notes.csv").read_bytes() == "héllo\n".encode()
    assert mcp.text("run_python", code="open('/data/notes.csv').read()") == "Out: 'héllo\\n'"
    assert mcp.text("download_file", path="/data/notes.csv") == "héllo\n"
    assert mcp.text("download_file", path="/ro/table.csv") == "a,b\n1,2\n"

    blob = bytes(range(256))
    encoded = base64.b64encode(blob).decode()
    assert mcp.text("upload_file", path="/data/sub/blob.bin", content=encoded, encoding="base64") == (
        "Wrote 256 bytes to /data/sub/blob.bin."
    )
    [block] = mcp.call("download_file", path="/data/sub/../sub/blob.bin").content
    assert isinstance(block, EmbeddedResource) and isinstance(block.resource, BlobResourceContents)
    assert (block.resource.uri, block.resource.mime_type) == ("file:///data/sub/blob.bin", "application/octet-stream")
    assert base64.b64decode(block.resource.blob) == blob

    mcp.text("upload_file", path="/data/dot.png", content=base64.b64encode(tiny_png()).decode(), encoding="base64")
    [image] = mcp.call("download_file", path="/data/dot.png").content
    assert isinstance(image, ImageContent) and base64.b64decode(image.data) == tiny_png()
    # the transfers' helper code leaves nothing in the user's variables (a checkpoint would list it)
    assert mcp.text("run_python", code="[n for n in ('base64', 'os', '_f', '_chunk') if n in dir()]") == "Out: []"


def test_files_outside_the_mounts_are_refused(mcp: Client, folders: tuple[Path, Path]) -> None:
    mounts = "/data (read-write), /ro (read-only)"
    for path in ("/etc/passwd", "/data/../etc/passwd", "data/notes.txt", "/data", "/database.txt", "//data/x"):
        assert mcp.error("download_file", path=path) == (
            f"Error executing tool download_file: {path!r} is not a file path inside a mount; files move only in "
            f"the mounts: {mounts}"
        )
    assert mcp.error("upload_file", path="/tmp/x.txt", content="x") == (
        "Error executing tool upload_file: '/tmp/x.txt' is not a file path inside a mount; files move only in "
        "the mounts: /data (read-write)"
    )  # an upload is told of the mounts it may write to
    assert mcp.error("upload_file", path="/ro/x.txt", content="x") == (
        "Error executing tool upload_file: /ro is mounted read-only; writable mounts: /data (read-write)"
    )
    assert mcp.error("upload_file", path="/data/x.bin", content="not base64!", encoding="base64").startswith(
        "Error executing tool upload_file: content is not valid base64: "
    )
    rw, _ = folders
    (rw / "big.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    assert mcp.error("download_file", path="/data/big.bin") == (
        f"Error executing tool download_file: OSError: /data/big.bin has {MAX_FILE_BYTES + 1} bytes, "
        f"more than the {MAX_FILE_BYTES} allowed"
    )
    assert mcp.error("download_file", path="/data/missing.txt") == (
        "Error executing tool download_file: no such file in the sandbox: /data/missing.txt"
    )


LIAR = """
import base64, os
_honest_getsize, _honest_b64encode = os.path.getsize, base64.b64encode
os.path.getsize = lambda path: {claimed}
base64.b64encode = {encode}
"""
HONEST = "os.path.getsize, base64.b64encode = _honest_getsize, _honest_b64encode"


def base64_length(size: int) -> int:
    """Characters of `size` bytes in base64."""
    return 4 * ((size + 2) // 3)


def test_download_refuses_a_guest_that_sends_more_than_it_was_asked(mcp: Client, folders: tuple[Path, Path]) -> None:
    """The guest says the file has 1 byte, then answers the read of its first MiB with 5 MiB: refused unread."""
    (folders[0] / "liar.bin").write_bytes(b"tiny")
    mcp.text("run_python", code=LIAR.format(claimed=1, encode="lambda data: _honest_b64encode(bytes(5 << 20))"))
    try:
        assert mcp.error("download_file", path="/data/liar.bin") == (
            "Error executing tool download_file: OSError: the sandbox's answer to a read of 1048576 bytes of "
            "/data/liar.bin: 6990508 characters of base64, more than the 1398104 that 1048576 bytes take; "
            "refused unread"
        )
    finally:
        mcp.text("run_python", code=HONEST)
    assert mcp.text("download_file", path="/data/liar.bin") == "tiny"


def test_download_stops_one_byte_past_the_cap_whatever_size_the_guest_claims(
    mcp: Client, folders: tuple[Path, Path]
) -> None:
    """The guest says a file of 5 MiB has 1 byte: the host reads on, and stops at the cap plus one byte."""
    (folders[0] / "long.txt").write_bytes(b"x" * (MAX_FILE_BYTES + (1 << 20)))
    mcp.text("run_python", code=LIAR.format(claimed=1, encode="_honest_b64encode"))
    try:
        assert mcp.error("download_file", path="/data/long.txt") == (
            f"Error executing tool download_file: OSError: /data/long.txt has more than the {MAX_FILE_BYTES} bytes "
            f"allowed (the sandbox said 1); the read stopped at {MAX_FILE_BYTES + 1} bytes"
        )
    finally:
        mcp.text("run_python", code=HONEST)


def test_download_takes_in_at_most_the_cap_plus_one_byte_from_a_lying_guest(tmp_path: Path) -> None:
    """What the host side (AsyncSandbox.download, under download_file) receives from the kernel, counted as it
    arrives: a guest claiming 1 byte for 5 MiB gets the cap plus one byte across; one answering a read with
    5 MiB gets that one answer refused, and no read follows."""
    (tmp_path / "long.txt").write_bytes(b"x" * (MAX_FILE_BYTES + (1 << 20)))
    received: list[tuple[str | None, int]] = []  # ("read" for a read, characters of its answer) per helper call

    async def scenario() -> tuple[OSError, OSError]:
        async with AsyncSandbox(mounts=[f"{tmp_path}:/data:ro"], cell_timeout=60) as sandbox:
            honest_evaluate = sandbox._evaluate

            async def counting(expression: str) -> str:
                answer = await honest_evaluate(expression)
                received.append(("read" if "f.read(" in expression else None, len(answer)))
                return answer

            sandbox._evaluate = counting  # type: ignore[method-assign]
            await sandbox.run(LIAR.format(claimed=1, encode="_honest_b64encode"))
            with pytest.raises(OSError) as long:
                await sandbox.download("/data/long.txt", MAX_FILE_BYTES)
            await sandbox.run("base64.b64encode = lambda data: _honest_b64encode(bytes(5 << 20))")
            with pytest.raises(OSError) as flooded:
                await sandbox.download("/data/long.txt", MAX_FILE_BYTES)
            return long.value, flooded.value

    long, flooded = asyncio.run(asyncio.wait_for(scenario(), WAIT))
    chunks = [length for kind, length in received if kind == "read"]
    # the lying size: four reads of a whole MiB, then one of one byte (4 base64 characters), then refused
    assert chunks[:5] == [base64_length(1 << 20)] * 4 + [base64_length(1)]
    assert str(long).endswith(f"the read stopped at {MAX_FILE_BYTES + 1} bytes")
    # the flood: one read, its 5 MiB answer refused before decoding, and no other read
    assert chunks[5:] == [base64_length(5 << 20)]
    assert str(flooded).startswith("the sandbox's answer to a read of 1048576 bytes of /data/long.txt: 6990508 ")


def test_list_skills_gives_methods_and_policies(mcp: Client) -> None:
    result = mcp.call("list_skills")
    assert not result.is_error
    skills = result.structured_content["skills"]
    policies = {name: {m: info["policy"] for m, info in s["methods"].items()} for name, s in skills.items()}
    assert policies == {
        "GuardedSkill": {"other": "deny", "touch": "ask"},
        "ProbeSkill": {m: "allow" for m in ("big", "echo", "echo_async", "fail_with_path", "not_data", "slow")},
    }
    assert skills["ProbeSkill"]["methods"]["echo"] == {
        "signature": "(*args: 'Any', **kwargs: 'Any') -> 'dict[str, Any]'",
        "doc": "Return what was passed.",
        "policy": "allow",
    }
    [block] = result.content
    assert isinstance(block, TextContent)
    lines = block.text.splitlines()
    assert lines[:4] == [
        "Call them in run_python as device.Skill.method(...).",
        "GuardedSkill: Policies in the tests: deny, ask.",
        "  other() -> 'str' [deny] Return 'other'.",
        "  touch() -> 'str' [ask (refused: no skill_approver is set)] Return 'touched'.",
    ]


def test_ask_and_deny_skills_are_refused_without_an_approver(mcp: Client) -> None:
    assert mcp.error("run_python", code="device.GuardedSkill.touch()").startswith(
        "[error] SkillRefused: GuardedSkill.touch was not approved (policy 'ask'): the MCP server has nobody to ask; "
        'allow it in skill_policy to run it without asking (add {"GuardedSkill.touch": "allow"} to '
        "SandboxKernel.skill_policy), or set SandboxKernel.skill_approver\n"
    )
    assert mcp.error("run_python", code="device.GuardedSkill.other()").startswith(
        "[error] SkillRefused: GuardedSkill.other is denied by SandboxKernel.skill_policy\n"
    )
    assert mcp.text("run_python", code="device.ProbeSkill.echo(1)") == "Out: {'args': [1], 'kwargs': {}}"


def test_a_cancelled_call_interrupts_its_cell(mcp: Client, folders: tuple[Path, Path]) -> None:
    """The client gives up on a cell that runs forever: the server interrupts it, so the next call runs at once,
    long before the cell_timeout (60 s) would have stopped it."""
    started = folders[0] / "started.csv"  # a data file: it reaches the host
    code = "open('/data/started.csv', 'w').close()\nwhile True:\n    pass"
    call = asyncio.run_coroutine_threadsafe(mcp.session.call_tool("run_python", {"code": code}), mcp.loop)
    deadline = time.monotonic() + WAIT
    while not started.exists():  # the cell is running
        assert time.monotonic() < deadline and not call.done(), "the cell did not start"
        time.sleep(0.01)
    call.cancel()
    sent = time.monotonic()
    assert mcp.text("run_python", code="'next'") == "Out: 'next'"
    assert time.monotonic() - sent < 20


def test_a_time_limit_is_said_once() -> None:
    """The kernel's notice of the time limit (on stderr) and the error say the same: the result says it once."""
    client = stdio("--SandboxKernel.cell_timeout=2")
    try:
        text = client.error("run_python", code="while True: pass")
    finally:
        client.close()
    said = "SandboxTimeout: the cell ran past cell_timeout=2s and was interrupted; variables were kept."
    assert text.startswith(f"[error] {said}\n") and text.endswith("\n[the cell was stopped: time limit]"), text
    assert text.count("the cell ran past") == 1, text


def test_restart_drops_state(mcp: Client) -> None:
    mcp.text("run_python", code="doomed = 1")
    assert mcp.text("restart") == "The sandbox was restarted: every variable is gone."
    assert mcp.error("run_python", code="doomed").startswith("[error] NameError: name 'doomed' is not defined\n")
    assert mcp.text("run_python", code="open('/ro/table.csv').read()") == "Out: 'a,b\\n1,2\\n'"  # mounts remain


def test_checkpoint_and_restore(mcp: Client) -> None:
    mcp.text("restart")  # a known state: only what this test defines
    mcp.text("run_python", code="saved = 'first'\nwith open('/tmp/note.txt', 'w') as f:\n    f.write('kept')")
    summary = mcp.text("checkpoint", name="one")
    assert re.fullmatch(r"checkpoint 'one': 1 variables, 1 files, \d+\.\d MB; not kept: f", summary), summary
    mcp.text("run_python", code="saved = 'second'\nimport os\nos.remove('/tmp/note.txt')")
    assert mcp.text("restore", name="one") == "Restored checkpoint 'one': what ran since is gone."
    assert mcp.text("run_python", code="saved, open('/tmp/note.txt').read()") == "Out: ('first', 'kept')"
    assert mcp.error("restore", name="two") == (
        "Error executing tool restore: there is no checkpoint 'two'; known checkpoints: 'one'"
    )
    assert mcp.error("checkpoint", name="no good") == (
        "Error executing tool checkpoint: 'no good' is not a checkpoint name: letters, digits, '_', '.' and '-', "
        "at most 64, not starting with '.' or '-'"
    )


def test_checkpoints_are_kept_up_to_max_checkpoints() -> None:
    client = stdio("--SandboxKernel.max_checkpoints=2")
    try:
        for name in ("a", "b"):
            client.text("run_python", code=f"last = {name!r}")
            client.text("checkpoint", name=name)
        assert client.error("checkpoint", name="c") == (
            "Error executing tool checkpoint: at most 2 checkpoints are kept (SandboxKernel.max_checkpoints); "
            "reuse a name to replace that checkpoint: 'a', 'b'"
        )
        client.text("run_python", code="last = 'a again'")
        client.text("checkpoint", name="a")
        client.text("restore", name="b")
        assert client.text("run_python", code="last") == "Out: 'b'"
        client.text("restore", name="a")
        assert client.text("run_python", code="last") == "Out: 'a again'"
    finally:
        client.close()


def test_a_configured_approver_decides_ask_calls() -> None:
    client = stdio(
        f"--SandboxKernel.skills_path={FIXTURES}",
        '--SandboxKernel.skill_policy={"GuardedSkill": "ask"}',
        "--SandboxKernel.skill_approver=approvers.approve",
        env={**os.environ, "PYTHONPATH": str(FIXTURES)},
    )
    try:
        assert "  touch() -> 'str' [ask (SandboxKernel.skill_approver decides)] Return 'touched'." in (
            client.text("list_skills").splitlines()
        )
        assert client.text("run_python", code="device.GuardedSkill.touch()") == "Out: 'touched'"
        assert client.error("run_python", code="device.GuardedSkill.other()").startswith(
            "[error] SkillRefused: GuardedSkill.other was not approved (policy 'ask'): SandboxKernel.skill_approver "
            "said no\n"
        )
    finally:
        client.close()


def test_bad_settings_are_reported_by_every_tool() -> None:
    client = stdio('--SandboxKernel.mounts=["/no/such/folder:/data"]', env=dict(os.environ))
    try:
        for tool, arguments in (("run_python", {"code": "1"}), ("list_skills", {})):
            text = client.error(tool, **arguments)
            assert text.startswith(
                f"Error executing tool {tool}: the kernel's settings are wrong, so no code runs until they are "
                "fixed and the kernel is restarted:\n- --SandboxKernel.mounts: mount '/no/such/folder:/data': host folder "
                "'/no/such/folder' does not exist or is not a folder (given as --SandboxKernel.mounts of sandbox-kernel "
                "mcp)"
            ), text
    finally:
        client.close()


def test_only_kernel_settings_pass_through() -> None:
    done = subprocess.run(server_command("--SandboxKernel.cell_timeout=3", "--bogus"), capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "sandbox-kernel: error: unrecognized arguments: --bogus"


def refusal(url: str, headers: dict[str, str]) -> tuple[int, str, str | None]:
    """The HTTP status, body and WWW-Authenticate header with which the server refuses a ping sent with
    `headers`."""
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    accept = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    request = urllib.request.Request(url, data=ping, headers={**accept, **headers}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    return refused.value.code, refused.value.read().decode(), refused.value.headers.get("WWW-Authenticate")


@asynccontextmanager
async def http_transport(url: str, headers: dict[str, str], statuses: list[int] | None = None) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP client transport, sending `headers` with every request (and noting in
    `statuses` the HTTP status of each response)."""

    async def note(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    timeout = httpx2.Timeout(30, read=WAIT)
    hooks = {"response": [note]}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http,
        streamable_http_client(url, http_client=http) as wire,
    ):
        yield wire


ANNOUNCEMENT = (
    r"sandbox-kernel mcp: serving streamable HTTP at (?P<url>http://127\.0\.0\.1:(?P<port>\d+)/mcp)",
    r"sandbox-kernel mcp: every request needs the header  Authorization: Bearer (?P<token>.+)",
    r"sandbox-kernel mcp: for a client's configuration: (?P<config>\{.*\})",
)


class HttpServer:
    """`sandbox-kernel mcp --http --port 0` in a process of its own, and the lines it printed at start."""

    def __init__(self, *arguments: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            server_command("--http", "--port", "0", *arguments),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.stderr: list[str] = []  # every line so far
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        try:
            self.printed = self._announcement()
        except BaseException:
            self.process.kill()
            self.process.wait(timeout=30)
            raise
        self.url, self.port = self.printed["url"], int(self.printed["port"])

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)
        self.lines.put("")  # the end

    def _next_line(self) -> str:
        line = self.lines.get(timeout=WAIT)
        assert line, f"the server ended before it was ready: {''.join(self.stderr)}"
        return line.removesuffix("\n")

    def _announcement(self) -> dict[str, str]:
        """The named parts of the three lines printed, together, once the server listens."""
        while not (first := re.fullmatch(ANNOUNCEMENT[0], self._next_line())):
            pass  # e.g. a warning of a library's
        printed = first.groupdict()
        for pattern in ANNOUNCEMENT[1:]:
            line = self._next_line()
            found = re.fullmatch(pattern, line)
            assert found, line
            printed.update(found.groupdict())
        return printed

    def client(self, headers: dict[str, str], statuses: list[int] | None = None) -> Client:
        return Client(lambda: http_transport(self.url, headers, statuses))

    def stop(self) -> None:
        """SIGINT, as a person's Ctrl-C: the server must end cleanly."""
        try:
            self.process.send_signal(signal.SIGINT)
            assert self.process.wait(timeout=30) == 0
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def http() -> Iterator[HttpServer]:
    """A server started with no token given: it makes one and prints it."""
    server = HttpServer()
    yield server
    server.stop()


def test_http_prints_a_fresh_token_once_with_a_client_configuration(http: HttpServer) -> None:
    token = http.printed["token"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # secrets.token_urlsafe(32): 256 random bits
    assert json.loads(http.printed["config"]) == {
        "type": "http",
        "url": http.url,
        "headers": {"Authorization": f"Bearer {token}"},
    }
    assert sum(line.count(token) for line in http.stderr) == 2  # the header line and the configuration line


def test_http_refuses_every_request_without_the_token(http: HttpServer) -> None:
    token = http.printed["token"]
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")  # as long as the token, one character off
    for headers in (
        {},
        {"Authorization": f"Bearer {wrong}"},
        {"Authorization": f"Bearer {token[:-1]}"},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": token},
        {"Authorization": f"Bearer  {token}"},
        {"Cookie": f"token={token}"},
    ):
        assert refusal(http.url, headers) == (401, "", "Bearer"), headers
    assert refusal(f"{http.url}?token={token}", {}) == (401, "", "Bearer")
    assert refusal(f"http://127.0.0.1:{http.port}/", {}) == (401, "", "Bearer")  # every path, not only /mcp
    statuses: list[int] = []  # the SDK's own client, without the header, cannot even initialize
    with pytest.raises(Exception):  # noqa: B017 (an ExceptionGroup of the SDK's task groups)
        http.client({}, statuses)
    assert set(statuses) == {401}


def test_http_with_the_printed_token_serves_the_tools(http: HttpServer) -> None:
    config = json.loads(http.printed["config"])
    listening = {c.laddr for c in psutil.Process(http.process.pid).net_connections("tcp") if c.status == "LISTEN"}
    assert listening == {("127.0.0.1", http.port)}
    authorised = config["headers"]
    for header, value, status, text in (
        ("Host", "evil.example", 421, "Invalid Host header"),  # DNS rebinding, even with the token
        ("Origin", "http://evil.example", 403, "Invalid Origin header"),  # a web page's request
    ):
        assert refusal(http.url, {**authorised, header: value}) == (status, text, None)
    client = http.client(config["headers"])
    try:
        assert client.text("run_python", code="kept = 6 * 7") == "[no output]"
        assert client.text("run_python", code="kept") == "Out: 42"
    finally:
        client.close()
    lowercase = {"Authorization": f"bearer {http.printed['token']}"}  # the scheme's case does not matter (RFC 9110)
    client = http.client(lowercase)
    try:
        assert client.text("run_python", code="kept") == "Out: 42"  # one sandbox for every session
    finally:
        client.close()


def test_http_takes_a_given_token_from_a_private_file_without_printing_it(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    path = tmp_path / "token"
    path.write_text(f"{token}\n", encoding="ascii")
    path.chmod(0o600)
    server = HttpServer("--token-file", str(path))
    try:
        assert server.printed["token"] == f"<the token in --token-file {path}>"
        assert not any(token in line for line in server.stderr)
        assert refusal(server.url, {}) == (401, "", "Bearer")
        client = server.client({"Authorization": f"Bearer {token}"})
        try:
            assert client.text("run_python", code="'in'") == "Out: 'in'"
        finally:
            client.close()
    finally:
        server.stop()


def test_http_takes_a_given_token_from_the_environment_and_keeps_it_from_the_kernel() -> None:
    token = secrets.token_urlsafe(32)
    server = HttpServer(env={**os.environ, TOKEN_ENV: token})
    try:
        assert server.printed["token"] == f"<the token in {TOKEN_ENV}>"
        assert not any(token in line for line in server.stderr)
        assert refusal(server.url, {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}) == (401, "", "Bearer")
        client = server.client({"Authorization": f"Bearer {token}"})
        try:
            assert client.text("run_python", code="'in'") == "Out: 'in'"
        finally:
            client.close()
        [kernel] = psutil.Process(server.process.pid).children()  # the kernel process, started by now
        assert "sandbox_kernel" in " ".join(kernel.cmdline())
        assert TOKEN_ENV not in kernel.environ()
    finally:
        server.stop()


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_token_file_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text(secrets.token_urlsafe(32), encoding="ascii")
    path.chmod(mode)
    done = subprocess.run(
        server_command("--http", "--port", "0", "--token-file", str(path)), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"sandbox-kernel mcp: --token-file {path}: mode {mode:04o} lets group or others read or change the token; "
        f"only its owner may (chmod 600 {path})"
    ]


def test_a_short_token_in_the_environment_is_refused() -> None:
    done = subprocess.run(
        server_command("--http", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, TOKEN_ENV: "letmein"},
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"sandbox-kernel mcp: {TOKEN_ENV}: the token must be 32 to 512 characters of letters, digits and -._~+/ "
        "(make one with python -c 'import secrets; print(secrets.token_urlsafe(32))'); this one has 7 characters"
    ]
