"""The frame kinds are written down in three languages' files: Python (kernel), TypeScript (host), Python (guest).

They must agree; this pins them to one another so that a change in one place fails here, not at run time.
So must the keys of the init message, built in the kernel's sandbox.py and read by the host's main.ts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sandbox_kernel.protocol import frames
from sandbox_kernel.sandbox.launch_plan import LaunchPlan

REPO = Path(__file__).resolve().parents[2]
KINDS = ["STDOUT", "STDERR", "GUEST_EVENT", "HOST_EVENT", "REQUEST", "REPLY", "BLOB", "DATA"]


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


def interface_keys(path: Path, name: str) -> set[str]:
    """The keys of `export interface NAME {`: one `key: type;` a line, up to the line `}`."""
    body = re.search(rf"^export interface {name} \{{\n(.*?)^\}}", path.read_text(), re.M | re.S)
    assert body, f"no `export interface {name} {{` in {path.name}"
    return set(re.findall(r"^\s*(\w+)\??:", body[1], re.M))


def sandbox_init_keys(tmp_path: Path) -> set[str]:
    """The keys of sandbox.py's `init = {...}`: `**plan.worker_permissions()` counts as the keys it returns."""
    tree = ast.parse((REPO / "kernel" / "sandbox_kernel" / "sandbox" / "process.py").read_text())
    (literal,) = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["init"]
        and isinstance(node.value, ast.Dict)
    ]
    keys = set()
    for key, value in zip(literal.keys, literal.values, strict=True):
        if key is None:  # **spread
            assert ast.unparse(value) == "plan.worker_permissions()", ast.unparse(value)
            dummy = {
                name: tmp_path for name in ("host", "pyodide", "wheels", "snapshots", "private", "shared_deno_dir")
            }
            plan = LaunchPlan(**dummy, extra_read=[], mounts=[], allow_net=[])
            keys |= set(plan.worker_permissions())
        else:
            assert isinstance(key, ast.Constant) and isinstance(key.value, str), ast.unparse(key)
            keys.add(key.value)
    return keys


def test_the_init_message_has_the_keys_the_supervisor_reads(tmp_path) -> None:
    host = interface_keys(REPO / "host_ts" / "messages.ts", "SupervisorInit")
    kernel = sandbox_init_keys(tmp_path)
    assert kernel == host, (
        f"only in sandbox.py: {sorted(kernel - host)}; only in SupervisorInit: {sorted(host - kernel)}"
    )
