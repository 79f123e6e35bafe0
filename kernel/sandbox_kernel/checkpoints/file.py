"""Checkpoint files: the guest's bytes and the kernel's header, sealed with an HMAC under a per-user key.

Layout: MAGIC, payload length (u64), payload (made by the guest, opaque to the host), header length (u32),
header (JSON), then HMAC-SHA256 of everything before it. The host never interprets the payload: it reads it
back only to hand it to a sandbox. A file is refused before its header is parsed when it is too large, not a
checkpoint, or its HMAC does not match (changed since it was saved, or saved by another user's key).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import struct
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir

from sandbox_kernel import private_files

MAGIC = b"SBKCKPT1"
FORMAT = 1
TAG_BYTES = 32
MAX_HEADER_BYTES = 1 << 20
_PAYLOAD_LENGTH = struct.Struct(">Q")
_HEADER_LENGTH = struct.Struct(">I")
KEY_ENV = "SANDBOX_KERNEL_CHECKPOINT_KEY"  # a key file to use instead of the default one (tests, shared setups)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says what was wrong and what to do."""


def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or Path(jupyter_data_dir()) / "sandbox-kernel" / "checkpoint.key")


def key() -> bytes:
    """This user's checkpoint key (32 random bytes, made on first use, readable by the user only)."""
    path = key_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        private_files.make_folders(path.parent)  # 0700 where it creates them
        fresh = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        try:
            os.link(fresh, path)  # the first writer wins; every process then reads the same key
        except FileExistsError:
            pass
        finally:
            fresh.unlink()
        data = path.read_bytes()
    if len(data) < 32:
        raise CheckpointError(f"the checkpoint key {path} is shorter than 32 bytes; remove it to make a new one")
    return data


def write(path: Path, header: dict[str, Any], payload: bytes) -> int:
    """Write a sealed checkpoint file (atomically: a temporary file renamed); returns its size."""
    head = json.dumps({**header, "format": FORMAT}).encode()
    sealer = hmac.new(key(), digestmod=hashlib.sha256)
    parts = [MAGIC, _PAYLOAD_LENGTH.pack(len(payload)), payload, _HEADER_LENGTH.pack(len(head)), head]
    for part in parts:
        sealer.update(part)
    temporary = path.with_name(f".{path.name}.part")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        for part in (*parts, sealer.digest()):
            f.write(part)
    temporary.replace(path)
    return sum(map(len, parts)) + TAG_BYTES


def max_file_bytes(max_payload_bytes: int) -> int:
    """The largest checkpoint file that may hold `max_payload_bytes` of session state (with its header and seal)."""
    return max_payload_bytes + MAX_HEADER_BYTES + 64


def _contents(path: Path, max_payload_bytes: int) -> bytes:
    """The bytes of a file that may be a checkpoint: not larger than one may be, starting with MAGIC."""
    try:
        size = path.stat().st_size
        if size > max_file_bytes(max_payload_bytes):
            raise CheckpointError(
                f"{path} is {size} bytes, more than a checkpoint may be (SandboxKernel.max_checkpoint_bytes="
                f"{max_payload_bytes})"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _PAYLOAD_LENGTH.size + TAG_BYTES:
        raise CheckpointError(f"{path} is not a sandbox-kernel checkpoint (it does not start with {MAGIC.decode()})")
    return data


def _unpack(body: memoryview, path: Path) -> tuple[dict[str, Any], bytes]:
    """(header, payload) of a checkpoint's bytes without their seal; CheckpointError if they do not fit together."""
    try:
        offset = len(MAGIC)
        (payload_length,) = _PAYLOAD_LENGTH.unpack_from(body, offset)
        offset += _PAYLOAD_LENGTH.size
        payload = bytes(body[offset : offset + payload_length])
        offset += payload_length
        (header_length,) = _HEADER_LENGTH.unpack_from(body, offset)
        start = offset + _HEADER_LENGTH.size
        if header_length > MAX_HEADER_BYTES or start + header_length != len(body):
            raise ValueError("its parts do not add up")
        header = json.loads(bytes(body[start : start + header_length]))
    except (struct.error, ValueError) as exc:  # json's errors, UnicodeDecodeError included, are ValueErrors
        raise CheckpointError(f"{path} is not a whole sandbox-kernel checkpoint ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else None
        raise CheckpointError(f"{path} has checkpoint format {found!r}; this version reads {FORMAT}")
    return header, payload


def read(path: Path, max_payload_bytes: int, pyodide_version: str | None = None) -> tuple[dict[str, Any], bytes]:
    """(header, payload) of a checkpoint file, verified; CheckpointError says why one is refused."""
    data = _contents(path, max_payload_bytes)
    body, tag = memoryview(data)[:-TAG_BYTES], data[-TAG_BYTES:]
    expected = hmac.new(key(), body, hashlib.sha256).digest()
    if not hmac.compare_digest(tag, expected):
        raise CheckpointError(
            f"{path} was refused: its contents do not match its seal (HMAC-SHA256), so it was changed after it "
            f"was saved, or saved under another checkpoint key than {key_path()}"
        )
    header, payload = _unpack(body, path)
    if len(payload) > max_payload_bytes:
        raise CheckpointError(
            f"{path} holds {len(payload)} bytes of session state, more than SandboxKernel.max_checkpoint_bytes="
            f"{max_payload_bytes}"
        )
    if pyodide_version is not None and header.get("pyodide") != pyodide_version:
        raise CheckpointError(
            f"{path} was made with Pyodide {header.get('pyodide')}; this sandbox runs Pyodide {pyodide_version}, "
            "whose Python may not read its pickles"
        )
    return header, payload


def read_header(path: Path, max_payload_bytes: int) -> dict[str, Any]:
    """The header of a checkpoint file sealed under a key this process does not hold (a remote kernel's): its
    layout is checked, not its seal, which only a kernel with that key can check (it does, at %restore)."""
    data = _contents(path, max_payload_bytes)
    header, _ = _unpack(memoryview(data)[:-TAG_BYTES], path)
    return header
