"""Host folders shown inside the sandbox: parsing and checking `SandboxKernel.mounts`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MAX_SCAN = 10_000  # entries the start-up symlink check looks at per mount
LIMIT_KEYS = ("suffixes", "max_file_bytes", "max_total_bytes", "max_growth_bytes", "host_writes")
HOST_WRITES = ("data", "any")  # host_ts/host_writes.json's allowlist, or every name (docs/security.md)

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
    max_total_bytes: int | None = None  # all regular files of the mount, together
    max_growth_bytes: int = 1 << 30  # net growth of the mount's apparent bytes per sandbox (host_writes.json)
    host_writes: str = "data"  # "data": only the allowlist reaches the host; "any": every name (the user's risk)


def split_spec(spec: str) -> tuple[str, str, str] | None:
    """`host:guest[:ro|rw]` as (host, guest, mode), the mode 'ro' when absent (not checked here); None for a spec
    with no ':'. The last two ':' split it, so a host path may contain ':'."""
    parts = spec.rsplit(":", 2) if spec.count(":") >= 2 else spec.split(":")
    if len(parts) == 2:
        return parts[0], parts[1], "ro"
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return None


def parse(spec: str, base: Path, limits: dict[str, dict[str, Any]] | None = None) -> Mount:
    """`host:guest[:ro|rw]` (default ro); host is relative to `base` unless absolute."""
    split = split_spec(spec)
    if split is None:
        raise MountError(f"mount {spec!r}: use 'host_folder:/guest/path[:ro|rw]'")
    host, guest, mode = split
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
    unknown = set(extra) - set(LIMIT_KEYS)
    if "allow_tool_files" in unknown:
        raise MountError(
            f"mount_limits[{str(guest_path)!r}]: 'allow_tool_files' was replaced by 'host_writes': \"data\" (the "
            "default: only data files reach the host) or \"any\" (see docs/security.md, 'Host folders are default-deny')"
        )
    if unknown:
        raise MountError(
            f"mount_limits[{str(guest_path)!r}]: unknown keys {sorted(unknown)}; use {', '.join(LIMIT_KEYS)}"
        )
    suffixes = _suffixes(str(guest_path), extra.get("suffixes", ()), extra.get("host_writes", "data"))
    sizes = {key: extra.get(key) for key in ("max_file_bytes", "max_total_bytes", "max_growth_bytes")}
    for key, value in sizes.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise MountError(f"mount_limits[{str(guest_path)!r}][{key!r}] must be a positive integer")
    host_writes = extra.get("host_writes", "data")
    if host_writes not in HOST_WRITES:
        raise MountError(
            f"mount_limits[{str(guest_path)!r}]['host_writes'] must be \"data\" (only data files reach the host) or "
            "\"any\" (every file name; see docs/security.md, 'Host folders are default-deny')"
        )
    growth = sizes["max_growth_bytes"] or default_max_growth_bytes()
    return Mount(
        host_path, str(guest_path), mode == "rw", suffixes, sizes["max_file_bytes"], sizes["max_total_bytes"],
        growth, host_writes,
    )  # fmt: skip


def _table() -> dict[str, Any]:
    from sandbox_kernel import paths

    return dict(json.loads((paths.host_dir() / "host_writes.json").read_text()))


def partial_prefix() -> str:
    """host_ts/host_writes.json's start of the names of files written aside (write_policy.ts PARTIAL_TAG)."""
    return str(_table()["partial_prefix"])


def default_max_growth_bytes() -> int:
    """host_ts/host_writes.json's default growth quota (the file the supervisor reads too)."""
    return int(_table()["default_max_growth_bytes"])


def _suffixes(guest: str, value: Any, host_writes: Any) -> tuple[str, ...]:
    """A mount's `suffixes` as ".csv" names. Under host_writes "data" they may only narrow host_writes.json's
    table, and they are the one way to let an opt-in suffix (".json", ".txt") reach the host."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise MountError(f"mount_limits[{guest!r}]['suffixes'] must be a list such as ['.csv', '.json']")
    names = []
    for item in value:
        text = str(item).strip().lower().lstrip(".")
        if not text or not text.isalnum():
            raise MountError(f"mount_limits[{guest!r}]['suffixes']: {item!r} is not a file suffix such as '.csv'")
        names.append(f".{text}")
    if host_writes == "data":
        table = _table()["suffixes"]
        unknown = [n for n in names if n[1:] not in table]
        if unknown:
            opt_in = sorted(f".{k}" for k, v in table.items() if v.get("opt_in"))
            raise MountError(
                f"mount_limits[{guest!r}]['suffixes']: {', '.join(unknown)} is not a data suffix of "
                "host_ts/host_writes.json; 'suffixes' only narrows that table (or adds an opt-in suffix: "
                f"{', '.join(opt_in)}); to take any file, set 'host_writes': 'any' (docs/security.md, "
                "'Host folders are default-deny')"
            )
    return tuple(names)


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


def parse_all(
    specs: list[str],
    base: Path,
    limits: dict[str, dict[str, Any]] | None = None,
    nested: tuple[str, str] | None = None,
) -> list[Mount]:
    """Every mount, checked; guest paths may not overlap, except `nested`: (outer, inner) guest paths, the
    working folder at its own place inside the project folder (`project_folder`)."""
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
            if nested is not None and {str(a), str(b)} == set(nested) and a != b:
                continue
            if a == b or a.is_relative_to(b) or b.is_relative_to(a):
                raise MountError(f"mounts {str(a)!r} and {str(b)!r} overlap; guest paths must be separate")
    for name in limits or {}:
        if name not in {m.guest for m in mounts}:
            raise MountError(f"mount_limits names {name!r}, which is not a mount's guest path")
    return mounts


def guest_config(mounts: list[Mount]) -> list[dict[str, Any]]:
    """What the guest learns about its mounts (guest paths and rules, never host paths)."""
    return [
        {
            "guest": m.guest,
            "writable": m.writable,
            "suffixes": list(m.suffixes),
            "max_file_bytes": m.max_file_bytes,
            "max_total_bytes": m.max_total_bytes,
            "max_growth_bytes": m.max_growth_bytes,
            "host_writes": m.host_writes,
            "limited": m.writable,  # the growth quota always applies: writes raise with the host's reason
        }
        for m in mounts
    ]


def supervisor_config(mounts: list[Mount]) -> list[dict[str, Any]]:
    """What the supervisor gets for each mount: where it is, and the rules for writes into it (messages.ts)."""
    from sandbox_kernel.sandbox import guarded_paths

    return [
        {
            "host": str(m.host),
            "guest": m.guest,
            "writable": m.writable,
            "suffixes": list(m.suffixes),
            "maxFileBytes": m.max_file_bytes,
            "maxTotalBytes": m.max_total_bytes,
            "maxGrowthBytes": m.max_growth_bytes,
            "hostWrites": m.host_writes,
            "hidden": [p.name for p in guarded_paths.hidden(m)],
        }
        for m in mounts
    ]
