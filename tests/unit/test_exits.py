"""The registry of exits (sandbox_kernel/exits.py) holds every way out the kernel has, each with a gate that
exists and tests that exist; docs/security.md's table is made from it."""

from __future__ import annotations

import ast
import importlib
import json
import re
from functools import cache
from pathlib import Path

import ipykernel.kernelbase
import pytest

from sandbox_kernel import exits
from sandbox_kernel.exits import EXITS, Exit

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "kernel" / "sandbox_kernel"
KERNEL_SIDE = ("jupyter", "protocol", "sandbox", "enterprise_gateway", "checkpoints", "skills")  # not the clients
SENDS = (
    re.compile(r"session\.send\(\s*[\w.]+,\s*\"(\w+)\""),  # a message with a literal type on a socket
    re.compile(r"(?:_send|publish|kernel_message)\(\s*\"(\w+)\""),  # IOPub, through the output router
)
HANDLER = re.compile(r"def (\w+)_request\(self, stream")  # a request the kernel answers itself (ipykernel's form)


def sent_literally() -> set[str]:
    """Message types the kernel's own code sends by name."""
    found = set()
    for folder in KERNEL_SIDE:
        for path in (KERNEL / folder).rglob("*.py"):
            text = path.read_text()
            found |= {m for pattern in SENDS for m in pattern.findall(text)}
            found |= {f"{m}_reply" for m in HANDLER.findall(text)}
    return found


def declared() -> set[tuple[str, str]]:
    """(channel, kind) of what the protocol files and ipykernel declare."""
    guest = json.loads((KERNEL / "protocol" / "guest_messages.json").read_text())
    protocol = json.loads((REPO / "host_ts" / "protocol.json").read_text())
    base = ipykernel.kernelbase.Kernel
    kinds = {(exits.IOPUB, t) for t in guest["events"]["iopub"]["properties"]["msg_type"]["enum"]}
    kinds |= {(exits.IOPUB, t) for t in guest["iopub"]}
    kinds |= {(exits.STDIN if t == "input_request" else exits.GUEST, t) for t in guest["events"] if t != "iopub"}
    kinds |= {(exits.FILE_OP, op) for op in protocol["fileOps"]}
    kinds |= {(exits.SHELL, t.replace("_request", "_reply")) for t in base.msg_types}
    kinds |= {
        (exits.CONTROL, t.replace("_request", "_reply")) for t in base.control_msg_types if t not in base.msg_types
    }
    return kinds | {(exits.IOPUB, "status"), (exits.IOPUB, "execute_input"), (exits.STDIN, "input_request")}


def missing(registry: tuple[Exit, ...]) -> list[str]:
    """What the kernel can send that `registry` has no row for."""
    rows = {(e.channel, e.kind) for e in registry}
    kinds = {e.kind for e in registry}
    return sorted({f"{c}: {k}" for c, k in declared() - rows} | {f"sent: {k}" for k in sent_literally() - kinds})


def test_every_kind_the_kernel_can_send_has_a_row():
    assert not missing(EXITS), "add a row (gate and tests) to kernel/sandbox_kernel/exits.py"


def test_the_scan_finds_a_kind_without_a_row():
    """The control: take rows away and the check names them (both what is declared and what is sent by name)."""
    without = tuple(e for e in EXITS if e.kind not in ("stream", "comm_info_reply", "rename", "skill_call"))
    assert set(missing(without)) >= {
        "sent: stream", "sent: comm_info_reply", "file operation: rename", "guest request: skill_call",
    }  # fmt: skip
    assert {"stream", "input_request", "comm_info_reply", "kernel_info_reply"} <= sent_literally()


def test_rows_are_unique_and_on_known_channels():
    keys = [(e.channel, e.kind) for e in EXITS]
    assert len(keys) == len(set(keys))
    assert {e.channel for e in EXITS} <= set(exits.CHANNELS)


@pytest.mark.parametrize("exit_", EXITS, ids=lambda e: f"{e.channel}:{e.kind}")
def test_each_gate_exists(exit_: Exit):
    where, _, name = exit_.gate.partition(":")
    if where.startswith("host_ts/"):
        assert name and re.search(rf"\b(class|function|const) {re.escape(name)}\b", (REPO / where).read_text())
        return
    target: object = importlib.import_module(where)
    for part in filter(None, name.split(".")):
        target = getattr(target, part)


@cache
def _functions(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


@pytest.mark.parametrize("exit_", EXITS, ids=lambda e: f"{e.channel}:{e.kind}")
def test_each_named_test_exists_and_guest_data_has_one(exit_: Exit):
    assert exit_.tests or not exit_.guest_data, "an exit that carries the guest's data needs a test"
    for node in exit_.tests:
        path, _, name = node.partition("::")
        file = REPO / path
        assert file.is_file(), node
        if path.endswith(".ts"):
            assert f'Deno.test("{name}"' in file.read_text(), node
        else:
            assert name.split("[")[0] in _functions(file), node


def test_the_security_page_has_the_table_made_from_the_registry():
    page = exits.PAGE.read_text()
    assert exits.render(page) == page, f"docs/security.md differs from exits.py: run `{exits.COMMAND}`"
    assert page.split(exits.BEGIN)[0].rsplit("\n## ", 1)[-1].startswith("Every exit\n")  # under its own heading
    changed = (Exit(exits.LOG, "a new log", "guest strings", "sandbox_kernel.exits:table", ()), *EXITS)
    assert exits.render(page, changed) != page and "`a new log`" in exits.render(page, changed)


def test_the_command_rewrites_a_stale_table_and_the_check_names_itself(tmp_path: Path, capsys):
    page = tmp_path / "security.md"
    page.write_text(f"# Security\n\n## Every exit\n\n{exits.BEGIN}\n| old |\n{exits.END}\n\nafter\n")
    assert exits.main(["--check", "--page", str(page)]) == 1
    assert f"run `{exits.COMMAND}`" in capsys.readouterr().err
    assert exits.main(["--page", str(page)]) == 0 and exits.main(["--check", "--page", str(page)]) == 0
    assert "| old |" not in page.read_text() and page.read_text().endswith(f"{exits.END}\n\nafter\n")
    page.write_text("no table\n")
    with pytest.raises(ValueError, match="has no generated exits table"):
        exits.main(["--page", str(page)])
