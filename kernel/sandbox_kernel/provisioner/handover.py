"""How a waiting kernel process is given its kernel: both sides, the pool's and the process's.

A waiting kernel is the kernelspec's command with its connection file replaced by `WAITING`. It spawns its sandbox
and imports the kernel as any kernel process does, says `READY` on its stdin (one end of a socket pair whose other
end only the pool holds), then reads one line there:
the JSON of `Handover`, the connection file that jupyter_client wrote for the kernel it is to become (its ports and
key), the working folder and the environment variables that differ from one launch to the next. It then goes on as
if it had been started with them. End of file instead (the pool dropped it, or its owner exited): it exits, and its
sandbox, which ran nothing, is killed with it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import IO

WAITING = "{connection file given by the pool}"  # in place of the connection file: this process waits to be given one
# Environment variables that name the launch, not the kernel's settings: set at the handover, so a waiting kernel
# serves any notebook. Any other difference in the environment, and the launch starts cold.
PER_LAUNCH_ENV = frozenset({"JPY_SESSION_NAME", "KERNEL_ID"})
MAX_LINE = 1 << 20  # a handover is a few hundred bytes
READY = b"ready\n"  # what a waiting kernel says once its sandbox is spawned and the kernel imported


class HandoverError(ValueError):
    """A handover line that is not one: the waiting process exits with this message."""


@dataclass(frozen=True)
class Handover:
    """What a waiting kernel needs to become the kernel a launch asked for."""

    connection_file: str
    cwd: str
    env: dict[str, str]

    def line(self) -> bytes:
        return json.dumps(asdict(self)).encode() + b"\n"

    @classmethod
    def parse(cls, line: bytes) -> Handover:
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise HandoverError(f"the handover is not JSON: {exc}") from None
        if not isinstance(data, dict) or set(data) != {"connection_file", "cwd", "env"}:
            raise HandoverError("the handover must be an object with connection_file, cwd and env")
        file, cwd, env = data["connection_file"], data["cwd"], data["env"]
        if not (isinstance(file, str) and os.path.isabs(file) and isinstance(cwd, str) and os.path.isabs(cwd)):
            raise HandoverError("the handover's connection_file and cwd must be absolute paths")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise HandoverError("the handover's env must map names to strings")
        if not set(env) <= PER_LAUNCH_ENV:
            raise HandoverError(f"the handover may set only {sorted(PER_LAUNCH_ENV)}, not {sorted(set(env))}")
        return cls(file, cwd, env)


def is_waiting(argv: list[str]) -> bool:
    """Whether this kernel command line is a waiting kernel's."""
    return WAITING in argv


def receive(argv: list[str], stdin: IO[bytes] | None = None) -> list[str]:
    """Wait for the handover; apply its folder and variables; the command line with its connection file.

    Exits the process (status 0) at end of file: nobody will hand this kernel over."""
    stream = stdin if stdin is not None else sys.stdin.buffer
    try:
        os.write(stream.fileno(), READY)
    except OSError:  # a pipe (a test's, or by hand): nobody to tell
        pass
    try:
        line = stream.readline(MAX_LINE + 1)
    except OSError:  # the pool's end was closed with READY unread: as good as end of file
        line = b""
    if not line:
        sys.exit(0)
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise HandoverError(f"the handover line is longer than {MAX_LINE} bytes")
    handover = Handover.parse(line)
    os.chdir(handover.cwd)
    os.environ.update(handover.env)
    return [handover.connection_file if word == WAITING else word for word in argv]
