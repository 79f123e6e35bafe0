"""Checkpoints of a kernel on another machine (a gateway's), moved in parts over the Jupyter protocol: the kernel
serves them (checkpoints/parts.py), the client keeps the bytes in a file of its own, and gives them back part by
part to the kernel that restores them, which checks their seal under its key."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox_kernel import bounded_base64, private_files
from sandbox_kernel.checkpoints.client import MAX_LOAD_BYTES, Checkpoint, CheckpointError
from sandbox_kernel.checkpoints.parts import METADATA_KEY, PART_BYTES

# Runs a kernel cell (%checkpoint_get ...) with the request's metadata; returns its reply's sandbox_kernel facts.
KernelMagic = Callable[[str, "dict[str, Any] | None"], Awaitable["dict[str, Any]"]]


async def take(magic: KernelMagic, name: str, size: Any) -> Checkpoint:
    """The checkpoint the kernel has just saved as `name` (its file has `size` bytes, as the kernel said), copied
    here part by part, then dropped from the kernel's folder (so it does not count against max_checkpoints). On
    any failure, this side's copy is removed."""
    if type(size) is not int or not 0 < size <= MAX_LOAD_BYTES:
        raise CheckpointError(
            f"the kernel gave {size!r:.80} as the size of checkpoint {name!r}; a checkpoint file has 1 to "
            f"{MAX_LOAD_BYTES} bytes (Checkpoint's MAX_LOAD_BYTES)"
        )
    own = Checkpoint.new_copy_path(name)
    try:
        with os.fdopen(private_files.create(own), "wb") as out:
            received = 0
            while received < size:
                facts = await magic(f"%checkpoint_get {name} {received}", None)
                part = facts.get(METADATA_KEY)
                if not isinstance(part, dict) or part.get("offset") != received or part.get("size") != size:
                    raise CheckpointError(
                        f"the kernel answered %checkpoint_get {name} {received} with another part than the one "
                        f"asked for (offset {received} of {size} bytes): {part!r:.200}"
                    )
                most = min(PART_BYTES, size - received)
                data = bounded_base64.decode(part.get("data"), most, f"a part of checkpoint {name!r}", CheckpointError)
                if not data:
                    raise CheckpointError(f"checkpoint {name!r} ended at {received} of the {size} bytes announced")
                await asyncio.to_thread(out.write, data)
                received += len(data)
        checkpoint = Checkpoint.received(own)
        await magic(f"%checkpoint_drop {name}", None)
    except BaseException:
        own.unlink(missing_ok=True)
        raise
    return checkpoint


async def give(magic: KernelMagic, checkpoint: Checkpoint, name: str) -> None:
    """Put `checkpoint`'s file in the kernel's checkpoint folder as `name`, part by part."""
    size = checkpoint.path.stat().st_size
    source = await asyncio.to_thread(checkpoint.path.open, "rb")
    with source:
        offset = 0
        while True:
            data = await asyncio.to_thread(source.read, PART_BYTES)
            part = {"data": base64.b64encode(data).decode()}
            facts = await magic(f"%checkpoint_put {name} {offset} {size}", {"sandbox_kernel": {METADATA_KEY: part}})
            offset += len(data)
            if not data or offset >= size:
                break
    said = facts.get(METADATA_KEY)
    if not isinstance(said, dict) or said.get("complete") is not True:
        raise CheckpointError(
            f"the kernel did not take all {size} bytes of checkpoint {checkpoint.name!r}: after the last part it "
            f"answered {said!r:.200}, not {{'complete': True, ...}} (is it a sandbox-kernel of this version?)"
        )
