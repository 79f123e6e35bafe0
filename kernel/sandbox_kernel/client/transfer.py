"""Moving files out of the sandbox for the agent API: the host decides how much it reads, never the guest."""

from __future__ import annotations

from sandbox_kernel import bounded_base64

CHUNK = 1 << 20  # bytes per upload/download step


def reported_size(text: str, guest_path: str) -> int:
    """The size the guest gave for `guest_path`, if it is a plain number of bytes; else OSError."""
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise OSError(f"the sandbox gave {text[:40]!r} as the size of {guest_path}, not a number of bytes")
    return int(text)


def chunk_bytes(text: str, asked: int, guest_path: str) -> bytes:
    """The bytes of the guest's base64 answer to a read of `asked` bytes; OSError if it holds more than that
    (checked on its length before anything is decoded) or is not base64."""
    return bounded_base64.decode(
        text, asked, f"the sandbox's answer to a read of {asked} bytes of {guest_path}", OSError
    )
