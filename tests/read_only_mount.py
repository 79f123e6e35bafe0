"""Run a command with one folder read-only: a bind mount remounted read-only in a private mount namespace of a user
namespace (util-linux's unshare), where every write there fails with EROFS, whoever tries (root too). The tests of a
cache that kernels only read (baked into an image) use it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def read_only(folder: Path) -> list[str]:
    """The words to put before a command so that it runs with `folder` read-only (skips without unshare; fails
    when the folder is still writable under them)."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is needed to mount a folder read-only")
    argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", SCRIPT, "sh", str(folder)]
    probe = subprocess.run([*argv, "sh", "-c", f"touch '{folder}/x'"], capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr, probe.stderr
    return argv
