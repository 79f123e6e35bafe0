"""What the launcher is told: the command to become, and the confinement to apply first."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

LAYERS = ("namespaces", "landlock", "seccomp")  # no_new_privs always comes with any of them
MODES = ("auto", "required", "off")
REFUSED_EXIT = 125  # the launcher's exit code when `required` cannot be met


@dataclass
class LaunchSpec:
    """One Deno launch: argv and env, the OS limits, and the allow-lists of each layer."""

    argv: list[str]
    env: dict[str, str]
    mode: str = "auto"  # os_sandbox
    layers: list[str] = field(default_factory=lambda: list(LAYERS))  # os_layers
    parent: int = 0  # the kernel's pid: the child dies with it
    data_limit: int = 0  # RLIMIT_DATA in bytes (0: none)
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    execute: list[str] = field(default_factory=list)
    network: bool = False  # any allow_net entry
    tcp_ports: list[int] | None = field(default_factory=list)  # None: any port (an entry names none)
    hide: list[str] = field(default_factory=list)  # files and folders in `read`/`write` shown empty and unreadable
    view_root: str = ""  # an empty folder: the namespaces layer builds a private root there ("" for none)
    scratch: str = ""  # in the private root, a size-capped tmpfs (Deno's DENO_DIR)
    cwd: str = "/"
    report_fd: int = -1  # where the launcher writes what it applied, before exec

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LaunchSpec:
        return cls(**json.loads(text))
