"""Request ops and event names are written in the kernel, the Deno host and the guest's glue: they agree.

The schema of guest messages (kernel/sandbox_kernel/protocol/guest_messages.json) is the list of record; each
language's uses are read from its source so that a name added or renamed in one place fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_kernel.protocol import schema as guest_schema

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "kernel" / "sandbox_kernel"
HOST = REPO / "host_ts"
GUEST = HOST / "guest" / "sandbox_guest"


def found(pattern: str, *files: Path) -> set[str]:
    return {m for f in files for m in re.findall(pattern, f.read_text())}


def test_every_op_the_kernel_sends_to_the_guest_has_a_handler_and_a_reply_schema() -> None:
    jupyter = sorted((KERNEL / "jupyter").glob("*.py"))
    sent = found(r'(?:request|background_request|simple_request)\(\s*(?:sandbox, )?"(\w+)"', *jupyter)
    sent |= found(r'\bop(?:: str)? ?= ?"(\w+)"', *jupyter)  # requests run as cells (CellRequest's op)
    sent |= found(r'_request\("(\w+)"', *jupyter)  # the magics' own requests
    handled = found(r'op == "(\w+)"', GUEST / "api.py") | found(r'"(\w+)": _\w+[,}]', GUEST / "api.py")
    assert sent == handled == guest_schema.names("replies")


def test_the_supervisor_serves_exactly_the_ops_the_kernel_sends_it() -> None:
    sent = found(r'\{"op": "(\w+)"', KERNEL / "sandbox" / "process.py")
    handler = re.search(r"^function handleRequest\(.*?^\}", (HOST / "main.ts").read_text(), re.M | re.S)
    assert handler, "no handleRequest in main.ts"
    served = set(re.findall(r'case "(\w+)":', handler[0]))  # main.ts has other switches (progress messages)
    assert sent == served == {"interrupt", "reply"}
    assert not served & guest_schema.names("replies")  # never shadows a guest op


def test_the_guest_sends_exactly_the_declared_events() -> None:
    emitted = found(r'\{"type": "(\w+)"', *GUEST.glob("*.py"))
    assert emitted == guest_schema.names("events")


def test_host_events_the_supervisor_sends_are_the_ones_the_kernel_reads() -> None:
    sent = found(r'sendHostEvent\(\{ event: "(\w+)"', HOST / "main.ts")
    read = found(r'event"\) == "(\w+)"', KERNEL / "sandbox" / "process.py")
    assert read == {"fatal", "started", "memory"}
    assert sent == read | {"hello"}  # "hello" is the first frame, checked by its token
