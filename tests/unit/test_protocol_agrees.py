"""The frame kinds are written down in three languages' files: Python (kernel), TypeScript (host), Python (guest).

They must agree; this pins them to one another so that a change in one place fails here, not at run time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sandbox_kernel import frames

REPO = Path(__file__).resolve().parents[2]
KINDS = ["STDOUT", "STDERR", "GUEST_EVENT", "HOST_EVENT", "REQUEST", "REPLY"]


def typescript_constants(path: Path) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"export const (\w+) = (\d+);", path.read_text())}


def python_constants(path: Path) -> dict[str, int]:
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def test_host_and_kernel_frame_kinds_agree() -> None:
    host = typescript_constants(REPO / "host_ts" / "protocol.ts")
    assert {k: host[k] for k in KINDS} == {k: getattr(frames, k) for k in KINDS}
    assert host["FRAME_HEADER"] == frames._HEAD.size


def test_the_guest_writes_with_the_same_stream_kinds() -> None:
    guest = python_constants(REPO / "host_ts" / "guest" / "sandbox_guest" / "_host.py")
    assert (guest["STDOUT"], guest["STDERR"]) == (frames.STDOUT, frames.STDERR)


def test_the_kinds_are_distinct_bytes() -> None:
    values = [getattr(frames, k) for k in KINDS]
    assert len(set(values)) == len(values) and all(0 < v < 256 for v in values)
