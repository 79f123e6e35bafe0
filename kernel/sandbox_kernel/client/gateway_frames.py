"""Jupyter messages on a gateway's websocket (Jupyter Server's default protocol, which Kernel Gateway 3 and
Enterprise Gateway speak): one JSON text frame per message with a "channel" key, or, for a message with binary
buffers, a binary frame: the count of parts, their offsets (big-endian u32), the JSON, then the buffers."""

from __future__ import annotations

import json
import struct
from itertools import pairwise
from typing import Any

from jupyter_client.jsonutil import json_default

_U32 = struct.Struct("!I")


def encode(msg: dict[str, Any], channel: str) -> str:
    """A message to send, as its text frame."""
    return json.dumps({**msg, "channel": channel}, default=json_default)


def decode(frame: str | bytes) -> dict[str, Any] | None:
    """The message of a frame the gateway sent (its "channel" key says where it came from), or None for a frame
    that is not a Jupyter message (nothing downstream sees it): the header, the content, and a str msg_type and
    msg_id are required; a parent_header or metadata that is not an object becomes {}."""
    buffers: list[bytes] = []
    try:
        if isinstance(frame, bytes):
            text, buffers = _unpack(frame)
        else:
            text = frame
        msg = json.loads(text)
    except (ValueError, struct.error):
        return None
    if not (isinstance(msg, dict) and isinstance(msg.get("header"), dict) and isinstance(msg.get("content"), dict)):
        return None
    msg_type, msg_id = msg["header"].get("msg_type"), msg["header"].get("msg_id")
    if not isinstance(msg_type, str) or not isinstance(msg_id, str):
        return None
    for key in ("parent_header", "metadata"):
        if not isinstance(msg.get(key), dict):
            msg[key] = {}
    msg["msg_type"], msg["msg_id"] = msg_type, msg_id
    msg["buffers"] = buffers
    return msg


def _unpack(frame: bytes) -> tuple[str, list[bytes]]:
    """The JSON and the buffers of a binary frame; ValueError if its offsets do not fit it."""
    (count,) = _U32.unpack_from(frame, 0)
    if not 1 <= count <= (len(frame) - 4) // 4:
        raise ValueError("a binary frame with a bad part count")
    offsets = [_U32.unpack_from(frame, 4 * (i + 1))[0] for i in range(count)] + [len(frame)]
    if offsets[0] != 4 * (count + 1) or any(b < a for a, b in pairwise(offsets)) or offsets[-2] > len(frame):
        raise ValueError("a binary frame with bad offsets")
    parts = [frame[a:b] for a, b in pairwise(offsets)]
    return parts[0].decode("utf-8"), parts[1:]
