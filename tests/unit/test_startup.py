"""The pieces of a sandbox's start (sandbox/startup.py): its one connection, and the words for a failed start."""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import stat
from pathlib import Path

from sandbox_kernel.sandbox.startup import OneConnection, describe_exit, drain_output, exit_reason, layers_refusal


def test_the_socket_takes_one_connection_is_private_and_goes_away(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, bytes, bool]:
        socket = tmp_path / "s"
        async with OneConnection(socket) as connection:
            mode = stat.S_IMODE(socket.stat().st_mode)
            _, first = await asyncio.open_unix_connection(str(socket))
            reader, _ = await connection.accepted
            second_reader, _ = await asyncio.open_unix_connection(str(socket))
            later = await asyncio.wait_for(second_reader.read(), 10)  # closed by the socket at once: EOF
            first.write(b"hello")
            await first.drain()
            got = await asyncio.wait_for(reader.readexactly(5), 10)
            assert later == b""
        return mode, got, socket.exists()

    mode, got, still_there = asyncio.run(scenario())
    assert mode == 0o600
    assert got == b"hello"
    assert not still_there


def test_an_unused_socket_is_removed_and_its_wait_cancelled(tmp_path: Path) -> None:
    async def scenario() -> tuple[bool, bool]:
        async with OneConnection(tmp_path / "s") as connection:
            pass
        return connection.accepted.cancelled(), (tmp_path / "s").exists()

    assert asyncio.run(scenario()) == (True, False)


def test_a_refused_layer_names_the_settings_to_change() -> None:
    assert layers_refusal({"applied": ["landlock"]}, "auto") is None
    required = layers_refusal({"refused": "seccomp is not available"}, "required")
    assert str(required) == (
        "seccomp is not available. Set SandboxKernel.os_sandbox='auto' to run with the layers this system has, or "
        "leave the missing one out of SandboxKernel.os_layers."
    )
    auto = layers_refusal({"refused": "userns is not available"}, "auto")
    assert str(auto) == (
        "userns is not available. Leave that layer out of SandboxKernel.os_layers, or set SandboxKernel.os_sandbox='off'."
    )


def test_an_exit_is_described_in_words() -> None:
    assert describe_exit(3) == "the sandbox process exited with code 3"
    assert describe_exit(-signal.SIGKILL) == "the sandbox process was killed by SIGKILL (likely out of memory)"
    assert describe_exit(-signal.SIGSEGV) == "the sandbox process was killed by SIGSEGV"
    assert describe_exit(-200) == "the sandbox process was killed by signal 200"


def test_deno_out_of_memory_lines_word_the_reason() -> None:
    assert exit_reason(1, ["...", "Fatal JavaScript out of memory: Reached heap limit"], 256) == (
        "the sandbox ran out of memory (SandboxKernel.memory_limit_mb=256; raise it to allow more)"
    )
    assert exit_reason(1, ["an ordinary line"], 256) == "the sandbox process exited with code 1"


def test_deno_output_is_drained_in_bounded_lines_whatever_their_length() -> None:
    async def scenario() -> list[str]:
        stream = asyncio.StreamReader()
        stream.feed_data(b"first\n" + b"x" * 300_000 + b"\nlast without newline")
        stream.feed_eof()
        tail: collections.deque[str] = collections.deque(maxlen=20)
        await asyncio.wait_for(drain_output(stream, tail, logging.getLogger("test")), 10)
        return list(tail)

    assert asyncio.run(scenario()) == ["first", "x" * 4096]  # a partial last line is not a line


def test_deno_output_reaches_the_kernel_log_escaped(caplog) -> None:
    """Guest code can write to Deno's stdout and stderr: in the kernel's log that is one line per line, with
    terminal escapes, carriage returns and bidi overrides written out, not acted on by whoever reads the log."""

    async def scenario() -> None:
        stream = asyncio.StreamReader()
        stream.feed_data(b"\x1b[2J\x1b[31mfake\rkernel: all fine \xe2\x80\xae\n")
        stream.feed_eof()
        await asyncio.wait_for(drain_output(stream, collections.deque(maxlen=2), logging.getLogger("drain")), 10)

    with caplog.at_level(logging.DEBUG, logger="drain"):
        asyncio.run(scenario())
    (record,) = caplog.records
    assert record.getMessage() == "sandbox: \\x1b[2J\\x1b[31mfake\\rkernel: all fine \\u202e"
