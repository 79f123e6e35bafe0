"""Base64 from the other side (a guest's answer, a client's checkpoint part, a kernel's reply), decoded only when
its length says it can hold no more bytes than were asked for."""

from __future__ import annotations

import base64
import binascii


def most_characters(size: int) -> int:
    """Characters of `size` bytes in base64."""
    return 4 * ((size + 2) // 3)


def decode(text: object, most: int, what: str, error: type[Exception]) -> bytes:
    """The bytes of base64 `text`, which may stand for at most `most` bytes: its type and length are checked before
    it is decoded, its bytes after; otherwise `error` with a message that starts with `what`."""
    if not isinstance(text, str):
        raise error(f"{what}: {type(text).__name__} where base64 text was expected")
    if len(text) > most_characters(most):
        raise error(
            f"{what}: {len(text)} characters of base64, more than the {most_characters(most)} that {most} bytes "
            "take; refused unread"
        )
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise error(f"{what}: not base64 ({exc})") from None
    if len(data) > most:
        raise error(f"{what}: {len(data)} bytes, more than the {most} asked for")
    return data
