"""A private file-system view: inside a new mount namespace, a root that holds only the allowed paths.

What bubblewrap would do, done by the launcher itself: a small tmpfs becomes the root, each allowed
path is bind-mounted at its real location (read-only unless it is writable), symlinks on the way
are recreated, the scratch folder becomes a size-capped tmpfs of its own, and the host's root is
detached. Everything else on the host (home folders, other kernels' files, `/etc`) does not exist
for the process. Needs a user namespace that owns the mount namespace (`namespaces.enter`).

Paths are never followed through a symlink while the view is built: sources are opened once and
mounted through their descriptor, and mount points are walked component by component with
O_NOFOLLOW, so a link that guest code planted in a writable folder cannot redirect a mount.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from sandbox_kernel.sandbox.oslayers.libc import check, mount, syscall, umount2

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME = 1024, 2048
# statvfs flags of a mount -> the MS_ flags a bind remount must keep (the kernel locks them).
KEPT_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME}
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
ROOT_OPTIONS = "size=1m,nr_inodes=4096,mode=0755"


@dataclass
class View:
    """What the process will see: every other path is absent."""

    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    root: str = ""  # an empty folder to build the view on (it is not part of the view)
    scratch: str = ""  # becomes a private tmpfs of `scratch_bytes`; its symlinks are copied in
    scratch_bytes: int = 16 << 20
    cwd: str = "/"
    hide: list[str] = field(default_factory=list)  # inside bound folders: shown empty, unreadable (`.ssh`, `.env`)


def supported() -> bool:
    return platform.machine() in PIVOT_ROOT


def plan(read: Iterable[str], write: Iterable[str]) -> tuple[dict[str, bool], dict[str, str]]:
    """({real path: writable} to bind, parents first; {path: real path} symlinks to recreate).

    A path inside a bound folder of the same mode is seen through it and needs no mount of its own.
    """
    wanted: dict[str, bool] = {}
    links: dict[str, str] = {}
    for path, writable in [*((p, False) for p in read), *((p, True) for p in write)]:
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue  # a dangling link: nothing to show
        if real != os.path.normpath(path):
            links[os.path.normpath(path)] = real
        wanted[real] = wanted.get(real, False) or writable
    binds: dict[str, bool] = {}
    for real in sorted(wanted, key=lambda p: (p.count("/"), p)):
        covering = [b for b in binds if real.startswith(b.rstrip("/") + "/")]
        if covering and binds[max(covering, key=len)] == wanted[real]:
            continue
        binds[real] = wanted[real]
    return binds, links


def build(view: View) -> None:
    """Make `view` this process's root (it must own its mount namespace)."""
    binds, links = plan(view.read, view.write)
    scratch_links = _links_in(view.scratch) if view.scratch else {}
    check(mount(None, "/", None, MS_REC | MS_PRIVATE), "make mounts private")
    check(mount("tmpfs", view.root, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_OPTIONS), "mount the view's root")
    root = os.open(view.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for real, writable in binds.items():
            _bind(root, view.root, real, writable)
        for path, real in links.items():
            _link(root, path, real)
        for path in view.hide:
            _hide(root, path)
        if view.scratch:
            _scratch(root, view.scratch, view.scratch_bytes, scratch_links)
        check(mount(None, view.root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV), "make the root read-only")
        os.fchdir(root)
    finally:
        os.close(root)
    check(syscall(PIVOT_ROOT[platform.machine()], b".", b"."), "pivot_root")
    check(umount2(".", MNT_DETACH), "detach the host's root")
    os.chdir(view.cwd)


def _bind(root: int, view_root: str, real: str, writable: bool) -> None:
    """Bind `real` at the same path in the view; read-only unless `writable`, never setuid; devices only where
    `real` is itself a device file (/dev/null, /dev/urandom)."""
    source = os.open(real, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.readlink(f"/proc/self/fd/{source}") != real:
            raise OSError(f"{real} changed while the view was built")
        directory = stat.S_ISDIR(os.fstat(source).st_mode)
        point = _mount_point(root, real, directory)
        try:
            what = (f"/proc/self/fd/{source}", f"/proc/self/fd/{point}", None)
            if mount(*what, MS_BIND) == -1:
                # EINVAL: mounts below it are locked to it (they came from the host): take them along.
                check(-1 if ctypes.get_errno() != errno.EINVAL else mount(*what, MS_BIND | MS_REC), f"bind {real}")
        finally:
            os.close(point)
    finally:
        os.close(source)
    below = [m for m in _mount_points() if m.startswith(f"{view_root}{real}/")]
    for path in [real, *(m[len(view_root) :] for m in below)]:
        _remount(root, path, writable)


def _remount(root: int, path: str, writable: bool) -> None:
    top = _mount_point(root, path, os.path.isdir(os.path.join("/proc/self/fd", str(root)) + path))
    try:
        kept = os.fstatvfs(top).f_flag
        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if writable else MS_RDONLY)
        flags |= 0 if stat.S_ISCHR(os.fstat(top).st_mode) else MS_NODEV
        flags |= sum(ms for st, ms in KEPT_FLAGS.items() if kept & st)
        check(mount(None, f"/proc/self/fd/{top}", None, flags), f"remount {path}")
    finally:
        os.close(top)


def _mount_points() -> list[str]:
    """Every mount point of this mount namespace (the fifth field of mountinfo, unescaped)."""
    with open("/proc/self/mountinfo", "rb") as f:
        fields = [line.split(b" ")[4] for line in f]
    return [
        re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), p).decode(errors="surrogateescape") for p in fields
    ]


def _mount_point(root: int, path: str, directory: bool) -> int:
    """An O_PATH descriptor of `path` under `root`, made if missing, never through a symlink."""
    names = [n for n in path.split("/") if n]
    fd = os.dup(root)
    try:
        for i, name in enumerate(names):
            last = i == len(names) - 1
            make_dir = directory or not last
            try:
                if make_dir:
                    os.mkdir(name, 0o755, dir_fd=fd)
                else:
                    os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644, dir_fd=fd))
            except OSError:
                pass  # there already (or in a read-only bind, where it must already be)
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if make_dir else 0)
            nxt = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(f"{path} is a symlink in the view")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _hide(root: int, path: str) -> None:
    """Cover `path` (a folder or file inside a bound folder) with an empty one that no one may read.

    A symlink or anything else that is not a plain folder or file is left alone (Deno's --deny-read still names it).
    """
    try:
        info = os.lstat(path)
    except OSError:
        return  # gone since the kernel looked
    if stat.S_ISDIR(info.st_mode):
        point = _mount_point(root, path, True)
        try:
            what = f"/proc/self/fd/{point}"
            check(mount("tmpfs", what, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,nr_inodes=2,mode=000"), f"hide {path}")
        finally:
            os.close(point)
    elif stat.S_ISREG(info.st_mode):
        empty = os.open(".hidden", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o000, dir_fd=root)
        os.close(empty)
        source = os.open(".hidden", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root)
        point = _mount_point(root, path, False)
        try:
            check(mount(f"/proc/self/fd/{source}", f"/proc/self/fd/{point}", None, MS_BIND), f"hide {path}")
        finally:
            os.close(point)
            os.close(source)
    else:
        return
    _remount(root, path, False)


def _link(root: int, path: str, target: str) -> None:
    parent, name = os.path.split(path)
    fd = _mount_point(root, parent, True)
    try:
        os.symlink(target, name, dir_fd=fd)
    except FileExistsError:
        pass  # something is bound there already
    finally:
        os.close(fd)


def _links_in(folder: str) -> dict[str, str]:
    return {entry.name: os.readlink(entry.path) for entry in os.scandir(folder) if entry.is_symlink()}


def _scratch(root: int, folder: str, size: int, links: dict[str, str]) -> None:
    point = _mount_point(root, folder, True)
    try:
        options = f"size={size},nr_inodes=16384,mode=0700"
        check(mount("tmpfs", f"/proc/self/fd/{point}", "tmpfs", MS_NOSUID | MS_NODEV, options), "mount scratch")
    finally:
        os.close(point)
    inside = _mount_point(root, folder, True)
    try:
        for name, target in links.items():
            os.symlink(target, name, dir_fd=inside)
    finally:
        os.close(inside)
