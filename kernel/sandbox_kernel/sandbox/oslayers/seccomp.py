"""seccomp-bpf: deny the system calls a Deno process never needs and attackers love.

A deny-list filter (x86_64 only for now): calls that debug or read other processes, make
namespaces or mounts, load kernel code, reach kernel keyrings, BPF or perf, or start processes
(fork, vfork, clone without CLONE_THREAD) fail with EPERM; clone3 fails with ENOSYS so that the C
library falls back to clone, whose flags the filter can see. Packet and netlink sockets always fail,
and without network access those of the internet families too.
"""

from __future__ import annotations

import ctypes
import platform
import struct

from sandbox_kernel.sandbox.oslayers.libc import PR_SET_SECCOMP, SECCOMP_MODE_FILTER, check, prctl

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_THREAD = 0x00010000
AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 2, 10, 16, 17
EPERM, ENOSYS = 1, 38

# BPF opcodes
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16

X86_64_DENIED = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179,
    "quotactl_fd": 443, "syslog": 103, "iopl": 172, "ioperm": 173, "modify_ldt": 154, "uselib": 134,
    "lookup_dcookie": 212, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305,
    "fanotify_init": 300, "vhangup": 153, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "fork": 57, "vfork": 58,
}  # fmt: skip
X86_64_CLONE, X86_64_CLONE3, X86_64_SOCKET = 56, 435, 41


def supported() -> bool:
    """Whether this module has a syscall table for this machine."""
    return platform.machine() == "x86_64"


def _insn(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(allow_inet: bool) -> bytes:
    """The BPF program (x86_64): deny-list, thread-only clone, and sockets per `allow_inet`."""
    deny = _insn(RET_K, RET_ERRNO | EPERM)
    body: list[bytes] = []
    for number in sorted(X86_64_DENIED.values()):
        body += [_insn(JEQ_K, number, 0, 1), deny]
    body += [_insn(JEQ_K, X86_64_CLONE3, 0, 1), _insn(RET_K, RET_ERRNO | ENOSYS)]
    # clone: a thread (CLONE_THREAD set) may be made; a process may not.
    body += [
        _insn(JEQ_K, X86_64_CLONE, 0, 4),
        _insn(LD_W_ABS, OFFSET_ARG0),
        _insn(JSET_K, CLONE_THREAD, 0, 1),
        _insn(RET_K, RET_ALLOW),
        deny,
    ]
    families = [AF_PACKET, AF_NETLINK] + ([] if allow_inet else [AF_INET, AF_INET6])
    checks = [_insn(JEQ_K, family, len(families) - i, 0) for i, family in enumerate(families)]
    body += [_insn(JEQ_K, X86_64_SOCKET, 0, 1 + len(families)), _insn(LD_W_ABS, OFFSET_ARG0), *checks]
    body += [_insn(RET_K, RET_ALLOW), deny]
    head = [
        _insn(LD_W_ABS, OFFSET_ARCH),
        _insn(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        _insn(RET_K, RET_KILL_PROCESS),
        _insn(LD_W_ABS, OFFSET_NR),
        _insn(JGE_K, X32_SYSCALL_BIT, 0, 1),  # the x32 ABI: another syscall table, never needed
        deny,
    ]
    return b"".join(head + body)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(allow_inet: bool) -> None:
    """Load the filter into this process (needs no_new_privs); it is inherited across exec."""
    program = build_filter(allow_inet)
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    check(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog)), "seccomp")
