"""The kernel's side of %checkpoint / %restore: the magics' parsing, the collector of a checkpoint's parts, and
the kernel's folder of named checkpoints."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from sandbox_kernel.sandbox.process import GuestListener

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "letters, digits, '_', '.' and '-', at most 64, not starting with '.' or '-'"
SUFFIX = ".sbkcp"
_MAGIC = re.compile(r"%(checkpoint|restore)\b(.*)")
USAGE = {
    "checkpoint": "%checkpoint NAME  (save the session's state as NAME; %checkpoint alone lists the checkpoints)",
    "restore": "%restore NAME  (bring back the state saved as NAME, in a fresh sandbox)",
}


def name_problem(name: object) -> str | None:
    """Why `name` cannot name a checkpoint (None: it can): a name is one word of NAME_RULE, never a path, never
    more than one line (a client puts it into a magic's line)."""
    if isinstance(name, str) and NAME.fullmatch(name):
        return None
    shown = repr(name[:80]) if isinstance(name, str) else f"a {type(name).__name__}"
    return f"{shown} is not a checkpoint name: {NAME_RULE}"


class MagicUsageError(ValueError):
    """A %checkpoint / %restore line that cannot be run; the message shows the usage."""


@dataclass(frozen=True)
class KernelMagic:
    """A %checkpoint or %restore cell (the magic alone in its cell, comments and blank lines aside)."""

    command: str  # "checkpoint" | "restore"
    name: str | None


def parse(code: str) -> KernelMagic | None:
    """The kernel magic a cell is, or None when it is ordinary code for the guest."""
    lines = [line.strip() for line in code.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) != 1 or not (match := _MAGIC.fullmatch(lines[0])):
        return None
    command = match[1]
    try:
        words = shlex.split(match[2], comments=True)
    except ValueError as exc:
        raise MagicUsageError(f"{exc}; usage: {USAGE[command]}") from None
    if len(words) > 1 or (command == "restore" and not words):
        raise MagicUsageError(f"usage: {USAGE[command]}")
    name = words[0] if words else None
    problem = None if name is None else name_problem(name)
    if problem:
        raise MagicUsageError(problem)
    return KernelMagic(command, name)


class CheckpointCollector:
    """Listens to a checkpoint request: its parts (BLOB frames) are gathered up to `max_bytes`; everything else
    goes to `listener`."""

    def __init__(self, listener: GuestListener, max_bytes: int) -> None:
        self.listener = listener
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.too_large = False

    def on_stream(self, name: str, text: str) -> None:
        self.listener.on_stream(name, text)

    def on_event(self, payload: bytes) -> None:
        self.listener.on_event(payload)

    def on_blob(self, payload: bytes) -> None:
        self.size += len(payload)
        if self.size > self.max_bytes:
            self.too_large, self.parts = True, []
        elif not self.too_large:
            self.parts.append(payload)

    def payload(self) -> bytes:
        return b"".join(self.parts)


class CheckpointFolder:
    """The kernel's named checkpoints: files NAME.sbkcp in a private folder (clients of the same user may
    put files there to have them restored: every file is verified when it is read)."""

    def __init__(self, folder: Path, max_count: int) -> None:
        self.folder = folder
        self.max_count = max_count

    def path(self, name: str) -> Path:
        return self.folder / f"{name}{SUFFIX}"

    def names(self) -> list[str]:
        return sorted(p.name[: -len(SUFFIX)] for p in self.folder.glob(f"*{SUFFIX}") if NAME.fullmatch(p.stem))

    def room_for(self, name: str) -> bool:
        """Whether a checkpoint named `name` may be written (replacing one of that name is always allowed)."""
        return self.path(name).exists() or len(self.names()) < self.max_count
