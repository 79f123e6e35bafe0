"""The C library calls the layers need (Linux only), with errno turned into OSError."""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


def check(result: int, what: str) -> int:
    """`result` of a C call, or OSError with errno when it is -1."""
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def syscall(number: int, *args: object) -> int:
    """A raw system call; returns -1 with errno set on failure (use `check`)."""
    return int(_libc.syscall(ctypes.c_long(number), *args))


def prctl(option: int, arg2: int = 0, arg3: object = 0, arg4: int = 0, arg5: int = 0) -> int:
    return int(_libc.prctl(option, ctypes.c_ulong(arg2), arg3, ctypes.c_ulong(arg4), ctypes.c_ulong(arg5)))


def unshare(flags: int) -> None:
    check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _path(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> int:
    """mount(2); returns -1 with errno set on failure (use `check`)."""
    return int(_libc.mount(_path(source), _path(target), _path(fstype), ctypes.c_ulong(flags), _path(data)))


def umount2(target: str, flags: int) -> int:
    return int(_libc.umount2(_path(target), ctypes.c_int(flags)))


PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
