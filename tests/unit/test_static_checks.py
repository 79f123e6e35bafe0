"""Static checks, so that CI fails on a lint, format or type error in either language.

ruff (lint and format) over the repository, mypy over kernel/ and the guest glue (host_ts/guest, with the stubs
in host_ts/guest_stubs), and deno check, lint, fmt and test over host_ts/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision

REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "host_ts"
TS_FILES = sorted(p.name for p in HOST.glob("*.ts"))


def passes(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize(
    "argv",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_python(argv):
    passes([sys.executable, "-m", *argv], REPO)


FILE_SERVICE_FOLDER = "SBK_FILE_SERVICE_TEST_FOLDER"  # file_service_test.ts writes real files there


@pytest.mark.parametrize(
    "argv",
    [
        ["check", *TS_FILES],  # the *_test.ts files too
        ["lint"],
        ["fmt", "--check"],
        # what the tests' threads import, and a folder of the test's own for the file service's forged calls
        [
            "test",
            "--allow-read=ring.ts,reply_slot.ts,shared_views.ts,{folder}",
            "--allow-write={folder}",
            f"--allow-env={FILE_SERVICE_FOLDER}",
        ],
    ],
    ids=["deno-check", "deno-lint", "deno-fmt", "deno-test"],
)
def test_typescript(argv, tmp_path):
    """With the kernel's own Deno cache (the pinned Pyodide's types are there after `sandbox-kernel fetch`)."""
    env = {**os.environ, "DENO_DIR": str(provision.deno_dir()), "NO_COLOR": "1", FILE_SERVICE_FOLDER: str(tmp_path)}
    passes([paths.deno_executable(), *(arg.format(folder=tmp_path) for arg in argv)], HOST, env)
