"""Linux namespaces for the Deno process: its own user, mount, IPC, UTS and (without network) network.

The mount namespace carries a private file-system view (`fsview`) when one is asked for.
"""

from __future__ import annotations

import os

from sandbox_kernel.sandbox.oslayers import diagnose, fsview
from sandbox_kernel.sandbox.oslayers.libc import (
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    check,
    prctl,
    unshare,
)

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


class NotAllowed(Exception):
    """This system does not let an unprivileged process make namespaces (nothing was changed); the message says
    why and what would allow it (`diagnose.user_namespace`)."""


def enter(network: bool, view: fsview.View | None, missing: dict[str, str]) -> list[str]:
    """Move this process into new namespaces; returns their names. Needs a single-threaded process.

    The user namespace maps only our own uid and gid, so files keep their owners and nothing
    gains privileges on the host; a new network namespace has no interfaces up: no network at all.
    With `view`, the mount namespace's root holds only the view's paths; where mounts are refused
    (a container's AppArmor or seccomp profile), "private root" goes into `missing` with the reason and the
    process keeps the host's root. Last, the capability bounding set is emptied, so that the program exec'd
    next holds no capability even in here.
    """
    uid, gid = os.getuid(), os.getgid()
    with open("/proc/sys/kernel/cap_last_cap") as f:  # read while /proc is there
        last_cap = int(f.read())
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (0 if network else CLONE_NEWNET)
    try:
        unshare(flags)
    except OSError as exc:
        raise NotAllowed(diagnose.user_namespace(exc.errno or 0)) from None
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    names = ["user", "mount", "ipc", "uts"] + ([] if network else ["net"])
    if view is not None:
        try:
            fsview.build(view)
            names.append("private root")
        except OSError as exc:  # before pivot_root the host's root is still this process's: the other layers hold
            missing["private root"] = diagnose.private_root(exc)
    for cap in range(last_cap + 1):
        check(prctl(PR_CAPBSET_DROP, cap), "drop capabilities")
    check(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL), "clear ambient capabilities")
    return names


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
