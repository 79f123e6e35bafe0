"""Checkpoint files moved in parts over the Jupyter protocol, for clients that cannot reach the kernel's folder
(the agent API on a gateway's kernels): the kernel, not the guest, serves these cells.

    %checkpoint_get NAME OFFSET       the reply's metadata sandbox_kernel.checkpoint_part: {"name", "offset",
                                      "size" (of the whole file), "data" (base64 of at most PART_BYTES)}
    %checkpoint_put NAME OFFSET SIZE  the request's metadata sandbox_kernel.checkpoint_part: {"data": base64};
                                      parts in order from offset 0; NAME.sbkcp appears when all SIZE bytes are in
    %checkpoint_drop NAME             NAME.sbkcp is removed (the client has its own copy, or the restore is over)

The bytes are the sealed file as it is: a file put here is checked (its seal under this kernel's key, its size,
its Pyodide version) by %restore, as any file in the folder. Names only, never paths; a part's base64 is checked
on its length before it is decoded; one file is put at a time, at most as large as %restore would read.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_kernel import bounded_base64, private_files
from sandbox_kernel.checkpoints.cells import SUFFIX, CheckpointFolder, MagicUsageError, name_problem
from sandbox_kernel.checkpoints.file import CheckpointError

PART_BYTES = 2 << 20  # bytes of a checkpoint file per message, either way (base64 in JSON: ~2.8 MB)
METADATA_KEY = "checkpoint_part"  # under "sandbox_kernel" in the metadata of a put request or of a get reply
_MAGIC = re.compile(r"%checkpoint_(get|put|drop)\b(.*)")
_ARGUMENTS = {"get": ("NAME", "OFFSET"), "put": ("NAME", "OFFSET", "SIZE"), "drop": ("NAME",)}


@dataclass(frozen=True)
class PartCommand:
    """One %checkpoint_get / _put / _drop line."""

    command: str  # "get" | "put" | "drop"
    name: str
    offset: int = 0
    size: int = 0


def usage(command: str) -> str:
    return f"%checkpoint_{command} {' '.join(_ARGUMENTS[command])}"


def parse(code: str) -> PartCommand | None:
    """The part command a cell is (alone in it), or None for any other cell; MagicUsageError for a bad one."""
    lines = [line.strip() for line in code.splitlines() if line.strip()]
    if len(lines) != 1 or not (match := _MAGIC.fullmatch(lines[0])):
        return None
    command = match[1]
    try:
        words = shlex.split(match[2])
    except ValueError as exc:
        raise MagicUsageError(f"{exc}; usage: {usage(command)}") from None
    numbers = words[1:]
    if len(words) != len(_ARGUMENTS[command]) or not all(w.isascii() and w.isdigit() and len(w) < 19 for w in numbers):
        raise MagicUsageError(f"usage: {usage(command)} (numbers in bytes)")
    problem = name_problem(words[0])
    if problem:
        raise MagicUsageError(problem)
    return PartCommand(command, words[0], *map(int, numbers))


def _dig(data: Any, *keys: str) -> Any:
    """data[key1][key2]..., or None where a level is missing or not a dict (the request's metadata is the client's)."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


class PartStore:
    """The part commands on the kernel's checkpoint folder."""

    def __init__(self, folder: CheckpointFolder, max_file_bytes: int) -> None:
        self.folder = folder
        self.max_file_bytes = max_file_bytes  # what %restore reads at most (checkpoints.file.max_file_bytes)
        self._incoming: tuple[str, int] | None = None  # the file being put: its name and size

    def _partial(self, name: str) -> Path:
        return self.folder.folder / f".{name}{SUFFIX}.part"

    def get(self, name: str, offset: int) -> dict[str, Any]:
        """A part of NAME's file from `offset` (empty at its end)."""
        try:
            with open(self.folder.path(name), "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if offset > size:
                    raise CheckpointError(f"checkpoint {name!r} has {size} bytes; there is nothing at offset {offset}")
                file.seek(offset)
                data = file.read(PART_BYTES)
        except FileNotFoundError:
            raise CheckpointError(f"no checkpoint named {name!r} ({self._known()})") from None
        return {"name": name, "offset": offset, "size": size, "data": base64.b64encode(data).decode()}

    def put(self, command: PartCommand, metadata: dict[str, Any]) -> dict[str, Any]:
        """Take a part of a file being put; the file becomes NAME.sbkcp with its last part."""
        name, offset, size = command.name, command.offset, command.size
        text = _dig(metadata, "sandbox_kernel", METADATA_KEY, "data")
        data = bounded_base64.decode(text, PART_BYTES, f"%checkpoint_put {name}: the part", CheckpointError)
        partial = self._partial(name)
        if offset == 0:
            self._start(name, size)
        elif self._incoming != (name, size) or not partial.exists():
            raise CheckpointError(
                f"%checkpoint_put {name} {offset} {size}: no file of that name and size is being put; send its "
                "parts in order from offset 0"
            )
        received = partial.stat().st_size
        if offset != received or offset + len(data) > size or (not data and offset < size):
            raise CheckpointError(
                f"%checkpoint_put {name}: a part of {len(data)} bytes at offset {offset}, but {received} of {size} "
                "bytes are in: parts go in order, and not past the size"
            )
        with open(partial, "ab") as file:
            file.write(data)
        complete = offset + len(data) == size
        if complete:
            partial.replace(self.folder.path(name))
            self._incoming = None
        return {"name": name, "received": offset + len(data), "size": size, "complete": complete}

    def _start(self, name: str, size: int) -> None:
        """A new file to put: within the limits; any file put before and not finished is dropped."""
        if not 0 < size <= self.max_file_bytes:
            raise CheckpointError(
                f"a checkpoint file of {size} bytes cannot be put: at most {self.max_file_bytes} "
                "(SandboxKernel.max_checkpoint_bytes, with the file's header)"
            )
        if not self.folder.room_for(name):
            raise CheckpointError(
                f"this kernel already keeps {self.folder.max_count} checkpoints ({self._known()}; "
                "SandboxKernel.max_checkpoints): drop one, or reuse a name"
            )
        for stale in self.folder.folder.glob(f".*{SUFFIX}.part"):
            stale.unlink(missing_ok=True)
        os.close(private_files.create(self._partial(name)))
        self._incoming = (name, size)

    def drop(self, name: str) -> None:
        """Remove NAME.sbkcp (none is no error), and the file being put under that name, if one is."""
        self.folder.path(name).unlink(missing_ok=True)
        if self._incoming is not None and self._incoming[0] == name:
            self._partial(name).unlink(missing_ok=True)
            self._incoming = None

    def _known(self) -> str:
        names = self.folder.names()
        return f"this kernel has {', '.join(names)}" if names else "this kernel has none"
