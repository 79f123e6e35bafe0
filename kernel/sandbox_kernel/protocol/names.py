"""The protocol's shared names (frame kinds, ops, event types, init keys), read from host_ts/protocol.json.

That file is the one list of record: the Deno host imports it (host_ts/protocol.ts), the guest's glue gets the
names it uses as a module generated from it (`python -m sandbox_kernel.protocol.names` writes GUEST_MODULE), and
the kernel reads it here. tests/unit/test_protocol_file.py checks that each side uses exactly these names.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

from sandbox_kernel import paths

PROTOCOL_FILE: Final = paths.host_dir() / "protocol.json"
GUEST_MODULE: Final = paths.host_dir() / "guest" / "sandbox_guest" / "_protocol.py"

Section = Literal["guestOps", "supervisorOps", "guestEvents", "workerEvents", "hostEvents", "initKeys", "fileOps"]

_DATA: Final[dict[str, Any]] = json.loads(PROTOCOL_FILE.read_text())

FRAME_KINDS: Final[Mapping[str, int]] = MappingProxyType(dict(_DATA["frameKinds"]))
FRAME_HEADER_BYTES: Final[int] = _DATA["frameHeaderBytes"]
GUEST_OPS: Final = frozenset[str](_DATA["guestOps"])  # kernel -> guest requests (sandbox_guest.api serves them)
SUPERVISOR_OPS: Final = frozenset[str](_DATA["supervisorOps"])  # kernel -> supervisor requests (main.ts)
GUEST_EVENTS: Final = frozenset[str](_DATA["guestEvents"])  # what the guest's glue sends while it serves one
WORKER_EVENTS: Final = frozenset[str](_DATA["workerEvents"])  # what the worker itself sends (request 0)
HOST_EVENTS: Final = frozenset[str](_DATA["hostEvents"])  # what the supervisor sends
INIT_KEYS: Final = frozenset[str](_DATA["initKeys"])  # the supervisor's init message
FILE_OPS: Final = frozenset[str](_DATA["fileOps"])  # worker -> supervisor file calls (TypeScript only)


class UnknownName(ValueError):
    """A name that host_ts/protocol.json does not declare."""


def declared(section: Section, name: str) -> str:
    """`name`, if host_ts/protocol.json declares it among `section`; else UnknownName saying what it declares."""
    names = _DATA[section]
    if not isinstance(name, str) or name not in names:
        raise UnknownName(f"{name!r} is not among the {section} of {PROTOCOL_FILE}: {', '.join(names)}")
    return name


# ---- the guest's module ---------------------------------------------------------------------------------------
_GUEST_HEAD = '''"""The protocol's names for the guest's glue, generated from host_ts/protocol.json: do not edit.

Regenerate with `python -m sandbox_kernel.protocol.names` (tests/unit/test_protocol_file.py fails while this
file is out of date). Generated, not read at import: the guest's modules are in the memory snapshot, whose key
covers the guest's *.py files (a JSON file read into it would not change the key), and protocol.json lies
outside the folder the sandbox mounts.
"""

from __future__ import annotations

from typing import Final
'''

_GUEST_CLASSES: Final = (
    ("Kind", "frameKinds", "Frame kinds (the glue writes STDOUT and STDERR, through the worker)."),
    ("Op", "guestOps", "Requests the kernel sends the guest (api.handle serves each)."),
    ("Event", "guestEvents", "Events the glue sends the kernel (guest_messages.json declares each one's shape)."),
)


def _constant(name: str) -> str:
    identifier = name.upper()
    if not identifier.isidentifier() or not identifier.isupper():
        raise ValueError(f"{PROTOCOL_FILE}: {name!r} cannot be a Python constant's name")
    return identifier


def guest_module() -> str:
    """The text of GUEST_MODULE: one class of constants per section the guest uses, each with its description."""
    parts = [_GUEST_HEAD]
    for class_name, section, doc in _GUEST_CLASSES:
        parts.append(f'\n\nclass {class_name}:\n    """{doc}"""\n\n')
        for name, value in _DATA[section].items():
            if isinstance(value, str):
                parts.append(f"    # {value}\n    {_constant(name)}: Final = {json.dumps(name)}\n")
            else:
                parts.append(f"    {_constant(name)}: Final = {int(value)}\n")
    return "".join(parts)


def main() -> None:
    """Write GUEST_MODULE from host_ts/protocol.json."""
    GUEST_MODULE.write_text(guest_module())
    print(f"wrote {GUEST_MODULE}", file=sys.stderr)


if __name__ == "__main__":
    main()
