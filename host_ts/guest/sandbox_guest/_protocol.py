"""The protocol's names for the guest's glue, generated from host_ts/protocol.json: do not edit.

Regenerate with `python -m sandbox_kernel.protocol.names` (tests/unit/test_protocol_file.py fails while this
file is out of date). Generated, not read at import: the guest's modules are in the memory snapshot, whose key
covers the guest's *.py files (a JSON file read into it would not change the key), and protocol.json lies
outside the folder the sandbox mounts.
"""

from __future__ import annotations

from typing import Final


class Kind:
    """Frame kinds (the glue writes STDOUT and STDERR, through the worker)."""

    STDOUT: Final = 1
    STDERR: Final = 2
    GUEST_EVENT: Final = 3
    HOST_EVENT: Final = 4
    REQUEST: Final = 5
    REPLY: Final = 6
    BLOB: Final = 7
    DATA: Final = 8


class Op:
    """Requests the kernel sends the guest (api.handle serves each)."""

    # run a cell; the reply is an execute_reply's content
    EXECUTE: Final = "execute"
    # completions at a cursor position
    COMPLETE: Final = "complete"
    # help on the name at a cursor position
    INSPECT: Final = "inspect"
    # whether the code is a complete statement
    IS_COMPLETE: Final = "is_complete"
    # the kernel's settings for the guest, after each start
    CONFIGURE: Final = "configure"
    # replay a %pip install after a restart
    PIP_INSTALL: Final = "pip_install"
    # save the session's state: its parts come back as BLOB frames
    CHECKPOINT: Final = "checkpoint"
    # bring back a saved state: its parts come first, as DATA frames
    RESTORE: Final = "restore"
    # a frontend's comm_open, comm_msg or comm_close, for the guest's comm manager (widgets)
    COMM: Final = "comm"
    # run the traceback, display and completion paths once: a spare, before it takes a cell
    WARM: Final = "warm"


class Event:
    """Events the glue sends the kernel (guest_messages.json declares each one's shape)."""

    # an IOPub message (display_data, execute_result, error, ...; comm_open, comm_msg, comm_close with base64 buffers)
    IOPUB: Final = "iopub"
    # the cell got its KeyboardInterrupt: the kernel sends no more interrupts (one would land in the traceback's display)
    INTERRUPT_TAKEN: Final = "interrupt_taken"
    # input() or getpass(): the guest waits for the answer
    INPUT_REQUEST: Final = "input_request"
    # a call of a host skill's method: the guest waits for its result
    SKILL_CALL: Final = "skill_call"
    # Pyodide packages a cell's imports need: the guest waits until the host has them
    LOAD_PACKAGES: Final = "load_packages"
    # %pip install succeeded: the kernel replays it after a restart
    PIP_INSTALLED: Final = "pip_installed"
    # %pip install: the host resolves these requirements from SandboxKernel.wheelhouse; the guest waits for the wheels' paths
    WHEELHOUSE_WHEELS: Final = "wheelhouse_wheels"
    # %pip uninstall removed these projects: the kernel no longer installs them after a restart
    PIP_UNINSTALLED: Final = "pip_uninstalled"
