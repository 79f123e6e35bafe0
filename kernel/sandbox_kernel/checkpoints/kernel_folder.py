"""Where a kernel keeps its named checkpoints: a private folder that outlives restarts of the kernel.

Jupyter restarts a kernel (Kernel > Restart, or after a crash) as a new process with the same connection file, so
the folder is named by a digest of that file's path: <jupyter data dir>/sandbox-kernel/checkpoints/<digest>, 0700.
It is removed when the kernel shuts down for good; a folder left by a kernel that was killed is removed by a later
kernel's sweep once its connection file is gone (Jupyter removes it at the end) and its last process has ended.
A kernel without a connection file (started in-process) gets a per-process folder (sandbox/private_folders.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from sandbox_kernel import private_files
from sandbox_kernel.sandbox import private_folders

OWNER_SUFFIX = ".owner.json"  # beside each folder: the connection file it belongs to, and its latest kernel's pid


def root() -> Path:
    return private_files.kernel_data_folder() / "checkpoints"


def for_kernel(connection_file: str | None) -> Path:
    """The checkpoint folder of the kernel with this connection file (made if missing, 0700), marked as used by
    this process; a new per-process folder without a connection file."""
    if not connection_file:
        return private_folders.make()
    path = os.path.realpath(connection_file)
    folder = root() / hashlib.sha256(path.encode()).hexdigest()[:24]
    private_files.make_folders(folder)
    owner = owner_file(folder)
    partial = folder.with_name(f".{owner.name}.{os.getpid()}")
    partial.unlink(missing_ok=True)
    with os.fdopen(private_files.create(partial), "w") as f:
        json.dump({"connection_file": path, "pid": os.getpid()}, f)
    partial.replace(owner)
    return folder


def owner_file(folder: Path) -> Path:
    return folder.with_name(folder.name + OWNER_SUFFIX)


def sweep() -> list[Path]:
    """Remove the checkpoint folders whose connection file is gone and whose latest kernel no longer runs."""
    removed = []
    for owner in root().glob(f"*{OWNER_SUFFIX}") if root().is_dir() else []:
        try:
            facts = json.loads(owner.read_text())
            connection, pid = str(facts["connection_file"]), int(facts["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours
        if not os.path.exists(connection) and not private_folders.alive(pid):
            folder = owner.with_name(owner.name.removesuffix(OWNER_SUFFIX))
            shutil.rmtree(folder, ignore_errors=True)
            owner.unlink(missing_ok=True)
            removed.append(folder)
    return removed


def remove(folder: Path) -> None:
    """Remove a kernel's checkpoint folder (at its shutdown), with its owner file."""
    shutil.rmtree(folder, ignore_errors=True)
    owner_file(folder).unlink(missing_ok=True)
