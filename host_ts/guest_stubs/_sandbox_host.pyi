"""The worker's JS functions for the guest (the `host` object in worker.ts, registered as `_sandbox_host`).

`rid` is the kernel request the output belongs to (0: the one being served). JS `undefined` arrives as None.
"""

from collections.abc import Awaitable

def write(kind: int, text: str, rid: int = ..., /) -> None:
    """Stream text (kind 1: stdout, 2: stderr)."""

def emit(json: str, rid: int = ..., /) -> bool:
    """One JSON event; False when it is larger than the kernel's event limit (nothing sent)."""

def send_blob(buffer: memoryview | bytes, rid: int = ..., /) -> bool:
    """Bytes, unparsed (a checkpoint's part); False when larger than the event limit (nothing sent)."""

def wait_reply(n: int, /) -> str | None:
    """Block until the kernel answers request `n` (its JSON); None when interrupted."""

def file_room(fd: int, /) -> float | None:
    """Bytes the host file open as `fd` may still grow by before a mount limit refuses a write."""

def take_refusal() -> str | None:
    """Why the supervisor refused the last change to a read-write mount (once), or None."""

def files_full() -> str | None:
    """Why the memory budget refused the last change to the in-memory files (once), or None."""

def files_mib() -> int:
    """The MiB the in-memory files hold now, counted exactly (0: no budget)."""

def sleep(ms: float, /) -> bool:
    """Sleep without spinning; True when an interrupt cut it short."""

shell_limit_bytes: int  # the most bytes the shell takes or holds at once (host_ts/shell_limits.ts)

def shell(request: str, python: object, write_refusal: object, /) -> Awaitable[str]:
    """Run a shell script (just-bash): a JS Promise of the result's JSON; `python` runs `python3 ...` here."""
