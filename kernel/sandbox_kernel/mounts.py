"""Host folders shown inside the sandbox: parsing and checking `SandboxKernel.mounts`."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_SCAN = 10_000  # files looked at per mount
UNSAFE_MODE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH

# Guest folders that belong to Pyodide itself; a mount may not hide them.
RESERVED = ("/lib", "/dev", "/proc", "/home/pyodide", "/tmp", "/bin", "/usr")


class MountError(ValueError):
    """A mount specification that cannot be used; the message says what is allowed."""


@dataclass(frozen=True)
class Mount:
    host: Path  # absolute, symlinks resolved
    guest: str  # absolute path inside the sandbox
    writable: bool
    suffixes: tuple[str, ...] = ()  # allowed file suffixes when writing ('' = any)
    max_file_bytes: int | None = None


def parse(spec: str, base: Path, limits: dict[str, dict] | None = None) -> Mount:
    """`host:guest[:ro|rw]` (default ro); host is relative to `base` unless absolute."""
    parts = spec.rsplit(":", 2) if spec.count(":") >= 2 else spec.split(":")
    if len(parts) == 2:
        host, guest, mode = parts[0], parts[1], "ro"
    elif len(parts) == 3:
        host, guest, mode = parts
    else:
        raise MountError(f"mount {spec!r}: use 'host_folder:/guest/path[:ro|rw]'")
    if mode not in ("ro", "rw"):
        raise MountError(f"mount {spec!r}: the mode must be 'ro' or 'rw', not {mode!r}")
    host_path = Path(os.path.realpath(base / os.path.expanduser(host)))
    if not host_path.is_dir():
        raise MountError(f"mount {spec!r}: host folder {str(host_path)!r} does not exist or is not a folder")
    guest_path = PurePosixPath(guest)
    if not guest_path.is_absolute() or ".." in guest_path.parts or str(guest_path) == "/":
        raise MountError(f"mount {spec!r}: the guest path must be absolute, below '/', without '..'")
    for reserved in RESERVED:
        if (
            str(guest_path) == reserved
            or guest_path.is_relative_to(reserved)
            or PurePosixPath(reserved).is_relative_to(guest_path)
        ):
            raise MountError(
                f"mount {spec!r}: {reserved} belongs to the sandbox itself; pick another guest path (e.g. /data)"
            )
    extra = (limits or {}).get(str(guest_path), {})
    unknown = set(extra) - {"suffixes", "max_file_bytes"}
    if unknown:
        raise MountError(
            f"mount_limits[{str(guest_path)!r}]: unknown keys {sorted(unknown)}; use suffixes, max_file_bytes"
        )
    suffixes = tuple(str(s).lower() for s in extra.get("suffixes", ()))
    max_bytes = extra.get("max_file_bytes")
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes <= 0):
        raise MountError(f"mount_limits[{str(guest_path)!r}]['max_file_bytes'] must be a positive integer")
    return Mount(host_path, str(guest_path), mode == "rw", suffixes, max_bytes)


def escaping_symlinks(mount: Mount) -> list[str]:
    """Symlinks in a mount whose targets lie outside it.

    Deno checks permissions on the path it is given, not on a symlink's target, so JS file
    APIs in the guest could follow such a link out of the mount.
    """
    found = []
    for count, path in enumerate(mount.host.rglob("*")):
        if count >= MAX_SCAN:
            break
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if target != mount.host and not target.is_relative_to(mount.host):
                found.append(f"{path} -> {target}")
    return found


def parse_all(specs: list[str], base: Path, limits: dict[str, dict] | None = None) -> list[Mount]:
    mounts = [parse(spec, base, limits) for spec in specs]
    for mount in mounts:
        links = escaping_symlinks(mount)
        if links:
            raise MountError(
                f"mount {mount.guest}: {str(mount.host)!r} holds symlinks that lead outside it ({'; '.join(links[:3])}). "
                "The sandbox could follow them; remove them or mount a folder without them."
            )
    guests = [PurePosixPath(m.guest) for m in mounts]
    for i, a in enumerate(guests):
        for b in guests[i + 1 :]:
            if a == b or a.is_relative_to(b) or b.is_relative_to(a):
                raise MountError(f"mounts {str(a)!r} and {str(b)!r} overlap; guest paths must be separate")
    for name in limits or {}:
        if name not in {m.guest for m in mounts}:
            raise MountError(f"mount_limits names {name!r}, which is not a mount's guest path")
    return mounts


def guest_config(mounts: list[Mount]) -> list[dict]:
    """What the guest learns about its mounts (guest paths and rules, never host paths)."""
    return [
        {"guest": m.guest, "writable": m.writable, "suffixes": list(m.suffixes), "max_file_bytes": m.max_file_bytes}
        for m in mounts
    ]


def enforce_limits(mount: Mount) -> list[str]:
    """Remove files in a writable mount that break its limits; returns notices for the user.

    The guest's own checks give friendly errors first; this is the host's backstop for
    anything written around them (e.g. through JS file APIs).
    """
    if not mount.writable:
        return []
    notices: list[str] = []
    scrubbed: list[str] = []
    for count, path in enumerate(mount.host.rglob("*")):
        if count >= MAX_SCAN:
            break
        guest = f"{mount.guest}/{path.relative_to(mount.host).as_posix()}"
        try:  # files may come and go while we look (another host process, or the guest's leftovers)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                continue
            if info.st_mode & UNSAFE_MODE_BITS:  # no setuid/setgid or world-writable files left for others
                path.chmod(stat.S_IMODE(info.st_mode) & ~UNSAFE_MODE_BITS)
                scrubbed.append(guest)
            if not stat.S_ISREG(info.st_mode):
                continue
            if mount.suffixes and not path.name.lower().endswith(mount.suffixes):
                why = f"files there must end in {', '.join(mount.suffixes)}"
            elif mount.max_file_bytes and info.st_size > mount.max_file_bytes:
                why = f"files there may be at most {mount.max_file_bytes} bytes"
            else:
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        notices.append(f"removed {guest}: {why} (SandboxKernel.mount_limits[{mount.guest!r}])")
    if scrubbed:
        more = f" and {len(scrubbed) - 3} more" if len(scrubbed) > 3 else ""
        notices.append(f"cleared setuid/setgid/world-writable bits of {', '.join(scrubbed[:3])}{more}")
    if len(notices) > 10:
        notices = [*notices[:9], f"... and {len(notices) - 9} more files removed"]
    return notices
