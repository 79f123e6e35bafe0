"""Framing of the private kernel <-> Deno host channel.

A frame is ``[length u32][kind u8][request id u32][payload]`` (big-endian), where
length counts kind, id and payload. The kinds are host_ts/protocol.json's (the host reads the same file).
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Any, Final

from sandbox_kernel.protocol.names import FRAME_KINDS

STDOUT: Final = FRAME_KINDS["STDOUT"]
STDERR: Final = FRAME_KINDS["STDERR"]
GUEST_EVENT: Final = FRAME_KINDS["GUEST_EVENT"]
HOST_EVENT: Final = FRAME_KINDS["HOST_EVENT"]
REQUEST: Final = FRAME_KINDS["REQUEST"]
REPLY: Final = FRAME_KINDS["REPLY"]  # the end of a request, sent by the supervisor only
BLOB: Final = FRAME_KINDS["BLOB"]  # opaque bytes the guest sends for the request it serves (a checkpoint's parts)
DATA: Final = FRAME_KINDS["DATA"]  # opaque bytes the kernel sends with its next request (a checkpoint to restore)

_HEAD = struct.Struct(">IBI")  # protocol.json's frameHeaderBytes


class FrameError(Exception):
    """The host sent something that is not a valid frame."""


@dataclass(frozen=True)
class Frame:
    kind: int
    request_id: int
    payload: bytes

    def json(self) -> Any:
        """The payload as JSON (events are JSON objects)."""
        try:
            value = json.loads(self.payload)
        except (ValueError, RecursionError) as exc:
            raise FrameError(f"invalid JSON in frame of kind {self.kind}: {exc}") from None
        if not isinstance(value, dict):
            raise FrameError(f"frame of kind {self.kind} is not a JSON object")
        return value


def encode_frame(kind: int, request_id: int, payload: bytes) -> bytes:
    return _HEAD.pack(5 + len(payload), kind, request_id) + payload


def encode_request(request_id: int, request: dict[str, Any]) -> bytes:
    return encode_frame(REQUEST, request_id, json.dumps(request).encode())


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> Frame:
    """Read one frame; its length and kind are checked before the payload is read."""
    head = await reader.readexactly(_HEAD.size)
    length, kind, request_id = _HEAD.unpack(head)
    if length < 5:
        raise FrameError(f"frame length {length} is shorter than its kind and request id (5 bytes)")
    if length - 5 > max_bytes:
        raise FrameError(f"frame of {length - 5} bytes exceeds the limit of {max_bytes} bytes")
    if kind not in (STDOUT, STDERR, GUEST_EVENT, HOST_EVENT, REPLY, BLOB):
        raise FrameError(f"unknown frame kind {kind}")
    payload = await reader.readexactly(length - 5)
    return Frame(kind, request_id, payload)
