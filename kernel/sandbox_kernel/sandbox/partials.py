"""Files a sandbox writes aside (host_ts/file_service.ts `aside`), removed by the kernel when the sandbox ends.

While a host file is open for writing, its bytes go to `<stem>.sandbox-partial-<tag>-<n><suffix>` beside it, renamed
over it when its last handle closes. The supervisor tells the kernel each such place before it makes the file (a
`partial` host event); when the process ends for any reason (a crash, SIGKILL, a restart, shutdown) the kernel
removes what is left, so a killed process leaves no part-written file in a host folder.

A new file (`open(p, "w")` of a name that was not there) is made empty at its name first (mknod); its event then says
so (`made`: the name, and the dev/ino the supervisor made there). When such an aside file is still there at the end,
that name goes too if it is still that file, empty: so a new file reaches the host folder whole or not at all.

What the Deno process says is untrusted: a place is removed only if it is a regular file (not followed if a link)
below a read-write mount, reached through real folders only, named with THIS sandbox's tag; a name made new only if
its aside file was just removed, it is exactly the name that aside file's name is made from (`<stem><suffix>`
beside `<stem>.sandbox-partial-<tag>-<n><suffix>`; never for the bare `sandbox-partial-...` fallback or a
`.partial` suffix, which more than one name maps to), not a name guarded_paths protects or hides (which Deno itself
may not change), and it is a regular file of size 0 with the dev and ino told. So at worst a hostile process has
the kernel remove an empty file of the one name its own aside file derives from, which it could write itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import threading
from typing import Any, NamedTuple

from sandbox_kernel.sandbox import guarded_paths
from sandbox_kernel.sandbox.mounts import Mount, partial_prefix

PRUNE_FROM = 256  # places remembered before those already renamed away are forgotten


def new_tag() -> str:
    """A fresh tag for one sandbox process ([0-9a-z]+, as write_policy.ts partialName takes)."""
    return secrets.token_hex(6)


class Made(NamedTuple):
    """A name this sandbox made new, empty (a `partial` event's `made`): in the folder of its file written aside."""

    name: str
    dev: int
    ino: int


def _made(told: object) -> Made | None:
    """A `made` field as told, if well formed (a plain file name, two non-negative ints), else None."""
    if not isinstance(told, dict):
        return None
    name, dev, ino = told.get("name"), told.get("dev"), told.get("ino")
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**64 for n in (dev, ino)):
        return None
    return Made(name, dev, ino)  # type: ignore[arg-type]


class PartialFiles:
    """The places one sandbox said it writes aside in, and their removal once it has ended."""

    def __init__(self, mounts: list[Mount], tag: str) -> None:
        self.mounts = mounts
        prefix = re.escape(partial_prefix())
        self.name = re.compile(rf"(?:^|\.){prefix}-{re.escape(tag)}-[0-9a-z]+\.[^./]+\Z")
        self._beside = re.compile(rf"(.+)\.{prefix}-{re.escape(tag)}-[0-9a-z]+(\.[^./]+)\Z")
        self.places: dict[tuple[int, tuple[str, ...]], Made | None] = {}
        self._prune_at = PRUNE_FROM
        self._lock = threading.Lock()  # note() on the loop thread, remove() maybe on the control thread (kill_now)

    def note(self, event: dict[str, Any]) -> None:
        """Remember a `partial` host event's place, if it is one this sandbox may have made."""
        mount, path = event.get("mount"), event.get("path")
        if not isinstance(mount, int) or not 0 <= mount < len(self.mounts) or not self.mounts[mount].writable:
            return
        if not isinstance(path, list) or not path or len(path) > 256:
            return
        if not all(isinstance(p, str) and p not in ("", ".", "..") and "/" not in p and "\0" not in p for p in path):
            return
        if not self.name.search(path[-1]):
            return
        made = _made(event.get("made"))
        if made is not None and made.name != self._made_from(path[-1]):
            made = None
        if made is not None and guarded_paths.guarded_name(self.mounts[mount], made.name):
            made = None
        with self._lock:
            self.places[(mount, tuple(path))] = made
            if len(self.places) > self._prune_at:  # a long session: forget those renamed over their name already
                self.places = {p: m for p, m in self.places.items() if self._exists(*p)}
                self._prune_at = max(PRUNE_FROM, 2 * len(self.places))

    def _made_from(self, aside: str) -> str | None:
        """The one name write_policy.ts partialName turns into `aside`, or None when that is not one name."""
        found = self._beside.match(aside)
        if found is None or found.group(2) == ".partial":  # "x" and "x.partial" both give "x.<...>.partial"
            return None
        return found.group(1) + found.group(2)

    def remove(self) -> list[str]:
        """Remove every remembered place that is still this sandbox's file written aside; returns their host paths."""
        with self._lock:
            places, self.places = self.places, {}
        removed = []
        for (mount, path), made in sorted(places.items()):
            with contextlib.suppress(OSError):
                if self._unlink(mount, path):
                    removed.append(os.path.join(self.mounts[mount].host, *path))
                    if made is not None and self._unlink(mount, (*path[:-1], made.name), made):
                        removed.append(os.path.join(self.mounts[mount].host, *path[:-1], made.name))
        return removed

    def _exists(self, mount: int, path: tuple[str, ...]) -> bool:
        try:
            folder = self._folder(mount, path[:-1])
        except OSError:
            return False
        try:
            os.lstat(path[-1], dir_fd=folder)
            return True
        except OSError:
            return False
        finally:
            os.close(folder)

    def _folder(self, mount: int, folders: tuple[str, ...]) -> int:
        """An fd of the folder `folders` below the mount, opened one real folder at a time (no link followed)."""
        fd = os.open(self.mounts[mount].host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in folders:
                below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = below
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _unlink(self, mount: int, path: tuple[str, ...], made: Made | None = None) -> bool:
        """Remove a regular file (with `made`: only if it is still that empty file); whether it was."""
        folder = self._folder(mount, path[:-1])
        try:
            info = os.lstat(path[-1], dir_fd=folder)
            if not stat.S_ISREG(info.st_mode):
                return False
            if made is not None and (info.st_size, info.st_dev, info.st_ino) != (0, made.dev, made.ino):
                return False
            os.unlink(path[-1], dir_fd=folder)
            return True
        finally:
            os.close(folder)
