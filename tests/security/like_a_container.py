"""Run a command the way a container's default seccomp profile runs it: a seccomp filter refuses the calls that
Docker's and Kubernetes' RuntimeDefault profiles refuse a process without CAP_SYS_ADMIN, and that older runtimes'
profiles refuse because they predate Landlock.

Used to show what os_sandbox reports in such a container, on a machine that has every layer.
Usage: python like_a_container.py [--mounts-only] COMMAND [ARGS...]
  default: unshare and the mount calls fail with EPERM, the Landlock calls with EPERM (the default action of an
  allow-list profile that does not name them);
  --mounts-only: only the mount calls fail (a profile that allows unshare but not mount, or an AppArmor profile
  that denies mount), so user namespaces are made but the private root cannot be built.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

EPERM = 1
UNSHARE = 272  # x86_64
MOUNT_CALLS = (165, 166, 155)  # mount, umount2, pivot_root (x86_64)
LANDLOCK_CALLS = (444, 445, 446)  # the same numbers on every architecture


def insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_for(numbers: tuple[int, ...]) -> bytes:
    program = [insn(0x20, 0)]  # load the syscall number
    for number in numbers:
        program += [insn(0x15, number, 0, 1), insn(0x06, 0x00050000 | EPERM)]
    program.append(insn(0x06, 0x7FFF0000))
    return b"".join(program)


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main(argv: list[str]) -> None:
    mounts_only = argv[:1] == ["--mounts-only"]
    command = argv[1:] if mounts_only else argv
    denied = MOUNT_CALLS if mounts_only else (UNSHARE, *MOUNT_CALLS, *LANDLOCK_CALLS)
    code = filter_for(denied)
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = Fprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(f"like_a_container: cannot install the filter (errno {ctypes.get_errno()})")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
