"""The seccomp program, run on a small BPF interpreter: what each system call gets."""

from __future__ import annotations

import struct

import pytest

from sandbox_kernel.sandbox.oslayers import seccomp

ALLOW, KILL = seccomp.RET_ALLOW, seccomp.RET_KILL_PROCESS
EPERM, ENOSYS = seccomp.RET_ERRNO | seccomp.EPERM, seccomp.RET_ERRNO | seccomp.ENOSYS
X86_64 = seccomp.AUDIT_ARCH_X86_64
NR = {"read": 0, "openat": 257, "execve": 59, "mmap": 9, "socket": 41, "clone": 56, "clone3": 435, "ptrace": 101}


def run_filter(program: bytes, nr: int, arch: int = X86_64, args: tuple[int, ...] = ()) -> int:
    """Evaluate a classic BPF seccomp program on one seccomp_data."""
    full = (*args, 0, 0, 0, 0, 0, 0)[:6]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *full)
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == seccomp.LD_W_ABS:
            (acc,) = struct.unpack_from("=I", data, k)
        elif code == seccomp.RET_K:
            return k
        elif code in (seccomp.JEQ_K, seccomp.JGE_K, seccomp.JSET_K):
            hit = acc == k if code == seccomp.JEQ_K else acc >= k if code == seccomp.JGE_K else bool(acc & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unknown opcode {code:#x}")
        pc += 1


@pytest.mark.parametrize(
    ("call", "args", "allow_inet", "expected"),
    [
        ("read", (), False, ALLOW),
        ("openat", (), False, ALLOW),
        ("mmap", (), False, ALLOW),
        ("execve", (), False, ALLOW),  # Landlock limits it to the Deno binary
        ("ptrace", (), False, EPERM),
        ("clone", (0x3D0F00,), False, ALLOW),  # pthread_create's flags (CLONE_THREAD among them)
        ("clone", (0x01200011,), False, EPERM),  # fork()'s flags
        ("clone", (0x4111,), False, EPERM),  # posix_spawn: CLONE_VM | CLONE_VFORK
        ("clone3", (), False, ENOSYS),
        ("socket", (1,), False, ALLOW),  # AF_UNIX: the kernel's private socket
        ("socket", (2,), False, EPERM),  # AF_INET without allow_net
        ("socket", (10,), False, EPERM),  # AF_INET6
        ("socket", (2,), True, ALLOW),
        ("socket", (17,), True, EPERM),  # AF_PACKET, always
        ("socket", (16,), True, EPERM),  # AF_NETLINK, always
    ],
)
def test_each_call_gets_what_the_policy_says(call, args, allow_inet, expected):
    assert run_filter(seccomp.build_filter(allow_inet), NR[call], args=args) == expected


@pytest.mark.parametrize("name", sorted(seccomp.X86_64_DENIED))
def test_every_denied_call_is_denied(name):
    assert run_filter(seccomp.build_filter(False), seccomp.X86_64_DENIED[name]) == EPERM


def test_other_architectures_and_x32_are_refused():
    program = seccomp.build_filter(False)
    assert run_filter(program, 0, arch=0x40000003) == KILL  # i386 system calls from an x86_64 process
    assert run_filter(program, 0x40000000 | 0) == EPERM  # the x32 ABI
    assert len(program) % 8 == 0 and len(program) // 8 < 4096
