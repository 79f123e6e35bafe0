"""Checkpoints as the agent API hands them out: a sealed file the client owns, saved and loaded anywhere.

cp = sb.checkpoint()          # the session's state, now
sb.run("x = 'oops'")
sb.restore(cp)                # back to it, in a fresh sandbox
cp.save("before.sbkcp")       # later, in another process:
sb2 = Sandbox.from_checkpoint(Checkpoint.load("before.sbkcp"))
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import count
from pathlib import Path
from typing import Any

from sandbox_kernel import private_files
from sandbox_kernel.checkpoints.file import CheckpointError, read, read_header
from sandbox_kernel.jupyter.output import guest_text

MAX_LOAD_BYTES = 4 << 30  # what Checkpoint.load reads at most; the kernel applies SandboxKernel.max_checkpoint_bytes

__all__ = ["Checkpoint", "CheckpointError"]
_numbers = count(1)  # of the client's copies in this process


@cache
def _client_folder() -> Path:
    """Where this process keeps the checkpoints it was handed (removed when it exits)."""
    folder = Path(tempfile.mkdtemp(prefix="sandbox-checkpoints-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _link_or_copy(source: Path, target: Path) -> None:
    """`target` gets `source`'s bytes: a hard link when both are on one file system (the kernel's files are 0600),
    else a copy, 0600."""
    partial = target.with_name(f".{target.name}.part")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:
        private_files.copy(source, target)
        return
    partial.replace(target)


class _OwnedCopy:
    """The client's copy of a checkpoint file, deleted once nothing refers to this object."""

    def __init__(self, path: Path) -> None:
        self.path = path
        weakref.finalize(self, path.unlink, missing_ok=True)


@dataclass(frozen=True)
class Checkpoint:
    """A saved session state: a file sealed by the kernel that made it (read back only by a kernel)."""

    path: Path
    name: str
    size: int  # bytes of the file
    header: dict[str, Any] = field(repr=False)
    _owned: _OwnedCopy | None = field(default=None, repr=False, compare=False)  # shared by copies of this one

    def __deepcopy__(self, memo: dict[int, Any]) -> Checkpoint:
        return self  # immutable; and a deep copy of `_owned` would not keep the file (shallow copies share it)

    @property
    def contents(self) -> dict[str, Any]:
        """What it holds: variables (names), variable_count, files, not_kept (name: why)."""
        return dict(self.header.get("summary") or {})

    def summary(self) -> str:
        """One line for people and language models."""
        s = self.contents
        left_out = "; not kept: " + ", ".join(map(guest_text, s["not_kept"])) if s.get("not_kept") else ""  # guest's
        return (
            f"checkpoint {self.name!r}: {s.get('variable_count', '?')} variables, {s.get('files', '?')} files, "
            f"{self.size / 1e6:.1f} MB{left_out}"
        )

    def save(self, path: str | Path) -> Checkpoint:
        """A copy at `path` (any folder; readable by you only, 0600), to load in a later process with
        Checkpoint.load. A file already at `path` is replaced."""
        target = Path(path)
        private_files.copy(self.path, target)
        return Checkpoint(target, self.name, self.size, self.header)

    @classmethod
    def load(cls, path: str | Path, verify: bool = True) -> Checkpoint:
        """A checkpoint file, verified now under this user's key (CheckpointError: not one, changed since it was
        saved, another key). `verify=False` for one taken from a kernel on another machine (a gateway's): sealed
        under that machine's key, it is checked by the kernel it is restored into."""
        source = Path(path)
        header = read(source, MAX_LOAD_BYTES)[0] if verify else read_header(source, MAX_LOAD_BYTES)
        return cls(source, str(header.get("name") or source.stem), source.stat().st_size, header)

    @classmethod
    def taken_from(cls, kernel_file: Path) -> Checkpoint:
        """The client's own copy of a checkpoint the kernel just wrote, which then leaves the kernel's folder (so it
        does not count against max_checkpoints). The copy outlives the kernel and is deleted when no Checkpoint
        refers to it any more (copies of a Checkpoint share it; `save()` keeps one for good)."""
        own = _client_folder() / f"{next(_numbers)}-{kernel_file.name}"
        _link_or_copy(kernel_file, own)
        kernel_file.unlink(missing_ok=True)
        owned = _OwnedCopy(own)
        return replace(cls.load(own), _owned=owned)

    @classmethod
    def received(cls, own: Path) -> Checkpoint:
        """The client's own copy, at `own` in its folder (new_copy_path()), of a checkpoint whose bytes came from a
        remote kernel: its layout is checked here, its seal by the kernel that restores it. Deleted as
        taken_from's copies are."""
        owned = _OwnedCopy(own)
        return replace(cls.load(own, verify=False), _owned=owned)

    @staticmethod
    def new_copy_path(name: str) -> Path:
        """Where the client keeps a new copy of checkpoint `name` (a file name of its own in its folder)."""
        return _client_folder() / f"{next(_numbers)}-{name}.sbkcp"

    def give_to(self, kernel_folder: Path, name: str) -> None:
        """Put this checkpoint in a kernel's checkpoint folder as `name` (the kernel verifies it when restoring)."""
        _link_or_copy(self.path, kernel_folder / f"{name}.sbkcp")
