"""Checkpoint files in parts for remote clients (checkpoints/parts.py), their unverified header, and the client's
side (client/remote_checkpoints.py) against the kernel's PartStore, with no kernel in between."""

from __future__ import annotations

import asyncio
import base64
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import bounded_base64
from sandbox_kernel.checkpoints import file as checkpoint_file
from sandbox_kernel.checkpoints.cells import CheckpointFolder, MagicUsageError
from sandbox_kernel.checkpoints.client import MAX_LOAD_BYTES, Checkpoint
from sandbox_kernel.checkpoints.file import CheckpointError
from sandbox_kernel.checkpoints.parts import METADATA_KEY, PART_BYTES, PartCommand, PartStore, parse
from sandbox_kernel.client import remote_checkpoints


@pytest.fixture(autouse=True)
def own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(checkpoint_file.KEY_ENV, str(tmp_path / "keys" / "checkpoint.key"))


@pytest.fixture
def store(tmp_path: Path) -> PartStore:
    folder = tmp_path / "kernel"
    folder.mkdir()
    return PartStore(CheckpointFolder(folder, max_count=3), max_file_bytes=10 * PART_BYTES)


def part(data: bytes) -> dict[str, Any]:
    return {"sandbox_kernel": {METADATA_KEY: {"data": base64.b64encode(data).decode()}}}


def put(store: PartStore, name: str, offset: int, size: int, data: bytes) -> dict[str, Any]:
    return store.put(PartCommand("put", name, offset, size), part(data))


def test_part_cells_are_parsed_and_anything_else_is_left_to_the_guest() -> None:
    assert parse("%checkpoint_get cp-1 0") == PartCommand("get", "cp-1", 0)
    assert parse("  %checkpoint_put given-2 2097152 5000000\n") == PartCommand("put", "given-2", 2097152, 5000000)
    assert parse("%checkpoint_drop a.b") == PartCommand("drop", "a.b")
    for other in ("%checkpoint x", "%checkpointing 1", "x = 1\n%checkpoint_get a 0", "print('%checkpoint_get a 0')"):
        assert parse(other) is None


@pytest.mark.parametrize(
    "line",
    [
        "%checkpoint_get ../key 0",  # names, never paths
        "%checkpoint_get /etc/passwd 0",
        "%checkpoint_get a -1",
        "%checkpoint_get a 1e3",
        "%checkpoint_get a",
        "%checkpoint_put a 0",
        "%checkpoint_put a 0 \uff15",  # FULLWIDTH DIGIT FIVE: a digit, but not an ASCII one
        "%checkpoint_drop",
        "%checkpoint_get a 99999999999999999999",
    ],
)
def test_bad_part_cells_say_their_usage(line: str) -> None:
    with pytest.raises(MagicUsageError, match=r"usage: %checkpoint_|not a checkpoint name"):
        parse(line)


def test_a_file_put_in_parts_appears_whole_only_with_its_last_part(store: PartStore) -> None:
    data = bytes(range(256)) * (PART_BYTES // 128)  # two parts
    first = put(store, "given-1", 0, len(data), data[:PART_BYTES])
    assert first == {"name": "given-1", "received": PART_BYTES, "size": len(data), "complete": False}
    assert store.folder.names() == []  # the unfinished file is not a checkpoint yet
    assert put(store, "given-1", PART_BYTES, len(data), data[PART_BYTES:])["complete"]
    path = store.folder.path("given-1")
    assert path.read_bytes() == data and stat.S_IMODE(path.stat().st_mode) == 0o600
    got = [store.get("given-1", offset) for offset in (0, PART_BYTES, len(data))]
    assert b"".join(base64.b64decode(g["data"]) for g in got) == data
    assert [g["size"] for g in got] == [len(data)] * 3 and got[-1]["data"] == ""
    store.drop("given-1")
    assert not path.exists()


def test_parts_go_in_order_within_the_size_announced(store: PartStore) -> None:
    with pytest.raises(CheckpointError, match="no file of that name and size is being put"):
        put(store, "a", 10, 20, b"x" * 10)  # not from offset 0
    put(store, "a", 0, 20, b"x" * 10)
    with pytest.raises(CheckpointError, match="parts go in order"):
        put(store, "a", 15, 20, b"x" * 5)  # a gap
    with pytest.raises(CheckpointError, match="parts go in order, and not past the size"):
        put(store, "a", 10, 20, b"x" * 11)  # past the size
    with pytest.raises(CheckpointError, match="no file of that name and size"):
        put(store, "a", 10, 21, b"x" * 10)  # another size than announced
    assert put(store, "a", 10, 20, b"y" * 10)["complete"]


def test_a_new_file_put_drops_an_unfinished_one(store: PartStore) -> None:
    put(store, "a", 0, 20, b"x" * 10)
    put(store, "b", 0, 20, b"x" * 10)
    assert [p.name for p in store.folder.folder.iterdir()] == [".b.sbkcp.part"]
    with pytest.raises(CheckpointError, match="no file of that name"):
        put(store, "a", 10, 20, b"x" * 10)


def test_a_put_beyond_the_limits_is_refused_before_anything_is_written(store: PartStore) -> None:
    with pytest.raises(CheckpointError, match=r"cannot be put: at most 20971520 \(SandboxKernel.max_checkpoint_bytes"):
        put(store, "big", 0, 10 * PART_BYTES + 1, b"x")
    with pytest.raises(CheckpointError, match="cannot be put"):
        put(store, "empty", 0, 0, b"")
    for name in ("a", "b", "c"):  # max_count=3
        put(store, name, 0, 1, b"x")
    with pytest.raises(CheckpointError, match=r"already keeps 3 checkpoints \(this kernel has a, b, c"):
        put(store, "d", 0, 1, b"x")
    assert put(store, "a", 0, 1, b"y")["complete"]  # replacing one is allowed
    assert list(store.folder.folder.glob(".*")) == []


def test_a_part_is_checked_on_its_length_before_it_is_decoded(store: PartStore) -> None:
    too_long = "A" * (4 * ((PART_BYTES + 2) // 3) + 4)
    with pytest.raises(CheckpointError, match=r"^%checkpoint_put a: the part: 2796208 characters of base64, more "
                                              r"than the 2796204 that 2097152 bytes take; refused unread$"):  # fmt: skip
        store.put(PartCommand("put", "a", 0, 10), {"sandbox_kernel": {METADATA_KEY: {"data": too_long}}})
    with pytest.raises(CheckpointError, match="not base64"):
        store.put(PartCommand("put", "a", 0, 10), {"sandbox_kernel": {METADATA_KEY: {"data": "**"}}})
    for metadata in ({}, {"sandbox_kernel": []}, {"sandbox_kernel": {METADATA_KEY: {"data": 5}}}):
        with pytest.raises(CheckpointError, match=r"(NoneType|int) where base64 text was expected"):
            store.put(PartCommand("put", "a", 0, 10), metadata)
    assert bounded_base64.decode(base64.b64encode(b"abc").decode(), 3, "x", CheckpointError) == b"abc"
    with pytest.raises(OSError, match=r"^x: 3 bytes, more than the 2 asked for$"):
        bounded_base64.decode(base64.b64encode(b"abc").decode(), 2, "x", OSError)  # 4 characters: 2 or 3 bytes


def test_get_names_what_is_missing(store: PartStore) -> None:
    with pytest.raises(CheckpointError, match=r"no checkpoint named 'nope' \(this kernel has none\)"):
        store.get("nope", 0)
    put(store, "a", 0, 3, b"abc")
    with pytest.raises(CheckpointError, match="has 3 bytes; there is nothing at offset 4"):
        store.get("a", 4)


def test_a_header_is_read_without_the_key_that_sealed_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "remote.sbkcp"
    checkpoint_file.write(path, {"name": "remote", "summary": {"variable_count": 2}}, b"state")
    monkeypatch.setenv(checkpoint_file.KEY_ENV, str(tmp_path / "another.key"))  # as on another machine
    with pytest.raises(CheckpointError, match="under another checkpoint key"):
        Checkpoint.load(path)
    loaded = Checkpoint.load(path, verify=False)
    assert (loaded.name, loaded.contents) == ("remote", {"variable_count": 2})
    data = path.read_bytes()
    for broken in (data[:-40], data[:20] + b"\xff" * 8 + data[28:], b"SBKCKPT1" + bytes(40)):
        path.write_bytes(broken)
        with pytest.raises(CheckpointError, match="not a whole sandbox-kernel checkpoint"):
            Checkpoint.load(path, verify=False)


def test_the_client_takes_and_gives_back_a_checkpoint_part_by_part(store: PartStore, tmp_path: Path) -> None:
    """remote_checkpoints against the kernel's PartStore: what the kernel saved arrives whole in the client's own
    file and leaves the kernel's folder; given back, it arrives whole under another name."""
    saved = store.folder.path("cp")
    checkpoint_file.write(saved, {"name": "cp"}, bytes(range(256)) * (PART_BYTES // 100))
    sent: list[str] = []

    async def magic(line: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
        sent.append(line)
        command = parse(line)
        assert command is not None
        if command.command == "get":
            return {METADATA_KEY: store.get(command.name, command.offset)}
        if command.command == "put":
            return {METADATA_KEY: store.put(command, metadata or {})}
        store.drop(command.name)
        return {}

    size = saved.stat().st_size
    cp = asyncio.run(remote_checkpoints.take(magic, "cp", size))
    assert sent == ["%checkpoint_get cp 0", f"%checkpoint_get cp {PART_BYTES}", f"%checkpoint_get cp {2 * PART_BYTES}",
                    "%checkpoint_drop cp"]  # fmt: skip
    assert not saved.exists() and cp.size == size and stat.S_IMODE(cp.path.stat().st_mode) == 0o600
    asyncio.run(remote_checkpoints.give(magic, cp, "given-1"))
    assert store.folder.path("given-1").read_bytes() == cp.path.read_bytes()
    checkpoint_file.read(store.folder.path("given-1"), 1 << 30)  # the seal holds


def test_the_client_refuses_parts_it_did_not_ask_for(store: PartStore) -> None:
    checkpoint_file.write(store.folder.path("cp"), {"name": "cp"}, b"x" * 100)
    size = store.folder.path("cp").stat().st_size

    copies = Checkpoint.new_copy_path("cp").parent  # the client's folder of its own copies
    before = set(copies.glob("*"))

    async def lying(line: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
        got = store.get("cp", 0)
        return {METADATA_KEY: {**got, "data": base64.b64encode(b"y" * (size + 10)).decode()}}

    with pytest.raises(CheckpointError, match=f"a part of checkpoint 'cp': .* more than the .* that {size} bytes take"):
        asyncio.run(remote_checkpoints.take(lying, "cp", size))
    for said in ("many", True, 0, MAX_LOAD_BYTES + 1):
        with pytest.raises(CheckpointError, match=f"gave {said!r} as the size of checkpoint 'cp'; a checkpoint file "
                                                  f"has 1 to {MAX_LOAD_BYTES} bytes"):  # fmt: skip
            asyncio.run(remote_checkpoints.take(lying, "cp", said))
    assert set(copies.glob("*")) == before, "no copy is left on this side"


def test_a_failed_drop_or_an_answer_that_is_not_an_object_leaves_no_copy_and_says_what_came(
    store: PartStore,
) -> None:
    checkpoint_file.write(store.folder.path("cp"), {"name": "cp"}, b"x" * 100)
    size = store.folder.path("cp").stat().st_size
    copies = Checkpoint.new_copy_path("cp").parent  # the client's folder of its own copies
    before = set(copies.glob("*"))

    async def drop_fails(line: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
        command = parse(line)
        assert command is not None
        if command.command == "drop":
            raise CheckpointError("KernelDied: gone")
        return {METADATA_KEY: store.get(command.name, command.offset)}

    with pytest.raises(CheckpointError, match="KernelDied: gone"):
        asyncio.run(remote_checkpoints.take(drop_fails, "cp", size))
    assert set(copies.glob("*")) == before, "no copy is left on this side"

    for answer in ([1, 2], "part", {"offset": 0, "size": size, "data": ["AAAA"]}):

        async def odd(line: str, metadata: dict[str, Any] | None, answer: Any = answer) -> dict[str, Any]:
            return {METADATA_KEY: answer}

        with pytest.raises(CheckpointError, match=r"another part than the one asked for|list where base64"):
            asyncio.run(remote_checkpoints.take(odd, "cp", size))
    assert set(copies.glob("*")) == before
    cp = Checkpoint.load(store.folder.path("cp"), verify=False)
    for answer in ([], "complete", {"complete": 1}, None):

        async def incomplete(line: str, metadata: dict[str, Any] | None, answer: Any = answer) -> dict[str, Any]:
            return {METADATA_KEY: answer}

        with pytest.raises(CheckpointError, match=re.escape(f"after the last part it answered {answer!r}")):
            asyncio.run(remote_checkpoints.give(incomplete, cp, "given-1"))
