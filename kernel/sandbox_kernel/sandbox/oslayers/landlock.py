"""Landlock: limit the process's file access, TCP ports and scopes to an allow-list (Linux ≥ 5.13).

Rules are checked by the kernel on the real file, so a symlink cannot lead out of an allowed folder.
The syscall numbers are the same on every architecture.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from sandbox_kernel.sandbox.oslayers.libc import check, syscall

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

# File access rights, by the ABI version that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
FS_ALL_LATEST = (1 << 16) - 1
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights a rule on a file may carry

READ = READ_FILE | READ_DIR
WRITE = (  # never MAKE_CHAR or MAKE_BLOCK: handled, so denied everywhere
    WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE
)

NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def abi_version() -> int:
    """The Landlock ABI this kernel offers; OSError when Landlock cannot be used (its errno says why:
    `diagnose.landlock`)."""
    return check(
        syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)),
        "landlock_create_ruleset",
    )


@dataclass
class Rules:
    """What the confined process may touch; everything else of each handled kind is denied."""

    read: list[str] = field(default_factory=list)  # read files and list folders beneath
    write: list[str] = field(default_factory=list)  # read, create, change and remove beneath
    execute: list[str] = field(default_factory=list)  # files that may be run with exec (and read)
    tcp_connect: list[int] = field(default_factory=list)  # ports; ABI ≥ 4 (no port may be bound)


def restrict_self(rules: Rules, abi: int, tcp_any_port: bool = False) -> list[str]:
    """Apply `rules` to this process and its future children; returns what was enforced.

    Needs no_new_privs (or CAP_SYS_ADMIN). Paths that do not exist are skipped. With
    `tcp_any_port`, TCP connect is left to the other layers (binding a port stays denied).
    """
    fs_rights = FS_BY_ABI.get(abi, FS_ALL_LATEST)
    attr = _RulesetAttr(handled_access_fs=fs_rights)
    size = 8
    enforced = ["files"]
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | (0 if tcp_any_port else NET_CONNECT_TCP)
        size = 16
        enforced.append("tcp-bind" if tcp_any_port else "tcp")
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
        enforced.append("scopes")
    fd = check(syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock")
    try:
        _add_paths(fd, rules.read, READ & fs_rights)
        _add_paths(fd, rules.write, (READ | WRITE) & fs_rights)
        _add_paths(fd, rules.execute, (EXECUTE | READ_FILE) & fs_rights)
        if abi >= 4 and not tcp_any_port:
            for port in rules.tcp_connect:
                net = _NetPort(allowed_access=NET_CONNECT_TCP, port=port)
                check(
                    syscall(ADD_RULE, ctypes.c_int(fd), ctypes.c_int(RULE_NET_PORT), ctypes.byref(net), 0),
                    "landlock port",
                )
        check(syscall(RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(fd)
    return enforced


def _add_paths(ruleset: int, paths: Iterable[str], rights: int) -> None:
    for path in paths:
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # nothing there: nothing to allow
        try:
            allowed = rights if stat.S_ISDIR(os.fstat(target).st_mode) else rights & FILE_ONLY
            beneath = _PathBeneath(allowed_access=allowed, parent_fd=target)
            check(
                syscall(ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(beneath), 0),
                f"landlock rule for {path}",
            )
        finally:
            os.close(target)
