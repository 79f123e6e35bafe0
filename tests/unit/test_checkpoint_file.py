"""Checkpoint files (seal, limits, refusals), the %checkpoint / %restore parser and the parts' collector."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sandbox_kernel.checkpoints import file as checkpoint_file
from sandbox_kernel.checkpoints.cells import CheckpointCollector, CheckpointFolder, KernelMagic, MagicUsageError, parse
from sandbox_kernel.checkpoints.file import CheckpointError


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    monkeypatch.setenv(checkpoint_file.KEY_ENV, str(tmp_path / "keys" / "checkpoint.key"))


def saved(tmp_path: Path, payload: bytes = b"guest bytes" * 100, name: str = "a") -> Path:
    path = tmp_path / f"{name}.sbkcp"
    checkpoint_file.write(path, {"name": "a", "pyodide": "314.0.7"}, payload)
    return path


def test_a_written_checkpoint_reads_back(tmp_path):
    header, payload = checkpoint_file.read(saved(tmp_path), 1 << 20, "314.0.7")
    assert payload == b"guest bytes" * 100
    assert header == {"name": "a", "pyodide": "314.0.7", "format": 1}
    key = checkpoint_file.key_path()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32


@pytest.mark.parametrize("where", ["magic", "payload length", "payload", "header", "seal"])
def test_any_changed_byte_is_refused(tmp_path, where):
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    offset = {"magic": 3, "payload length": 12, "payload": 500, "header": len(data) - 40, "seal": len(data) - 1}
    data[offset[where]] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="not a sandbox-kernel checkpoint" if where == "magic" else "seal"):
        checkpoint_file.read(path, 1 << 20)


def test_another_users_key_is_refused(tmp_path, monkeypatch):
    path = saved(tmp_path)
    monkeypatch.setenv(checkpoint_file.KEY_ENV, str(tmp_path / "other.key"))
    with pytest.raises(CheckpointError, match="under another checkpoint key"):
        checkpoint_file.read(path, 1 << 20)


def test_limits_and_versions(tmp_path):
    path = saved(tmp_path, bytes(5000))
    with pytest.raises(CheckpointError, match=r"holds 5000 bytes .* SandboxKernel\.max_checkpoint_bytes=4000"):
        checkpoint_file.read(path, 4000)
    big = saved(tmp_path, bytes(2 << 20), "big")
    with pytest.raises(
        CheckpointError, match=r"more than a checkpoint may be \(SandboxKernel\.max_checkpoint_bytes=10\)"
    ):
        checkpoint_file.read(big, 10)  # refused by its size, before it is read
    with pytest.raises(CheckpointError, match=r"made with Pyodide 314\.0\.7; this sandbox runs Pyodide 315\.0\.0"):
        checkpoint_file.read(path, 1 << 20, "315.0.0")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        checkpoint_file.read(tmp_path / "missing.sbkcp", 1 << 20)


@pytest.mark.parametrize(
    ("cell", "magic"),
    [
        ("%checkpoint first", KernelMagic("checkpoint", "first")),
        ("# a note\n\n  %restore v1.2-b  \n", KernelMagic("restore", "v1.2-b")),
        ("%checkpoint", KernelMagic("checkpoint", None)),
        ("%checkpoint a  # why", KernelMagic("checkpoint", "a")),
        ("x = 1\n%checkpoint a", None),  # not alone: the guest says so
        ("%checkpointer a", None),
        ("print('%restore a')", None),
    ],
)
def test_the_magics_are_recognised_alone_in_a_cell(cell, magic):
    assert parse(cell) == magic


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("%restore", "usage: %restore NAME"),
        ("%checkpoint a b", "usage: %checkpoint NAME"),
        ("%checkpoint ../x", "is not a checkpoint name"),
        ("%restore .hidden", "is not a checkpoint name"),
        ("%checkpoint " + "a" * 65, "is not a checkpoint name"),
        ("%checkpoint 'a", "No closing quotation"),
    ],
)
def test_bad_magic_lines_say_how_to_use_them(cell, message):
    with pytest.raises(MagicUsageError, match=message):
        parse(cell)


class Sink:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def on_stream(self, name: str, text: str) -> None:
        self.seen.append((name, text))

    def on_event(self, payload: bytes) -> None:
        self.seen.append(payload)

    def on_blob(self, payload: bytes) -> None:
        raise AssertionError("blobs go to the collector")


def test_the_collector_keeps_parts_up_to_its_limit_and_passes_the_rest_on():
    sink = Sink()
    collector = CheckpointCollector(sink, 10)
    collector.on_blob(b"12345")
    collector.on_stream("stdout", "hi")
    collector.on_event(b"{}")
    collector.on_blob(b"67890")
    assert collector.payload() == b"1234567890" and not collector.too_large
    collector.on_blob(b"x")
    assert collector.too_large and collector.payload() == b""
    assert sink.seen == [("stdout", "hi"), b"{}"]


def test_the_folder_keeps_at_most_its_count_but_a_name_may_be_replaced(tmp_path):
    folder = CheckpointFolder(tmp_path, 2)
    for name in ("a", "b"):
        folder.path(name).write_bytes(b"")
    (tmp_path / "stray.txt").write_bytes(b"")
    assert folder.names() == ["a", "b"]
    assert folder.room_for("a") and not folder.room_for("c")
