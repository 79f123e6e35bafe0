"""glibc malloc settings of the kernel process."""

from __future__ import annotations

import ctypes

M_ARENA_MAX = -8  # glibc's mallopt(3) parameter


def one_malloc_arena() -> None:
    """One glibc malloc arena for all of the kernel process's threads (ZeroMQ's, ipykernel's), as the sandbox has:
    ~2.4 MiB less per kernel (bench/NOTES.md, issue 28). Set before any thread starts; a C library without mallopt
    (not glibc) is left as it is."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_ARENA_MAX, 1)
