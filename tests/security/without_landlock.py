"""Run a command on a "kernel without Landlock": a seccomp filter makes every Landlock call fail with ENOSYS.

Used to show what os_sandbox does when a layer is missing, on a machine that has it.
Usage: python without_landlock.py COMMAND [ARGS...]
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

LANDLOCK_CALLS = (444, 445, 446)  # the same numbers on every architecture
ENOSYS = 38


def insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


program = [insn(0x20, 0)]  # load the syscall number
for number in LANDLOCK_CALLS:
    program += [insn(0x15, number, 0, 1), insn(0x06, 0x00050000 | ENOSYS)]
program.append(insn(0x06, 0x7FFF0000))
code = b"".join(program)
buffer = ctypes.create_string_buffer(code, len(code))


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


libc = ctypes.CDLL(None, use_errno=True)
if (
    libc.prctl(38, 1, 0, 0, 0) != 0
    or libc.prctl(22, 2, ctypes.byref(Fprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))), 0, 0) != 0
):
    sys.exit(f"without_landlock: cannot install the filter (errno {ctypes.get_errno()})")
os.execvp(sys.argv[1], sys.argv[1:])
