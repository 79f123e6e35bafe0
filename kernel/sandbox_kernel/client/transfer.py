"""Moving files out of the sandbox for the agent API: the host decides how much it reads, never the guest."""

from __future__ import annotations

import base64
import binascii

CHUNK = 1 << 20  # bytes per upload/download step


def reported_size(text: str, guest_path: str) -> int:
    """The size the guest gave for `guest_path`, if it is a plain number of bytes; else OSError."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise OSError(f"the sandbox gave {text[:40]!r} as the size of {guest_path}, not a number of bytes")
    return int(text)


def chunk_bytes(text: str, asked: int, guest_path: str) -> bytes:
    """The bytes of the guest's base64 answer to a read of `asked` bytes; OSError if it holds more than that
    (checked on its length before anything is decoded) or is not base64."""
    most = 4 * ((asked + 2) // 3)  # characters of `asked` bytes in base64
    if len(text) > most:
        raise OSError(
            f"the sandbox answered a read of {asked} bytes of {guest_path} with {len(text)} characters of base64, "
            f"more than the {most} that many bytes take; refused unread"
        )
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise OSError(f"the sandbox answered a read of {guest_path} with text that is not base64 ({exc})") from None
    if len(data) > asked:
        raise OSError(f"the sandbox answered a read of {asked} bytes of {guest_path} with {len(data)} bytes")
    return data
