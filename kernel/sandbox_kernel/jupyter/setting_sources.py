"""Where the kernel's command-line settings really came from, as the program that started the kernel says.

The agent API (a keyword of `Sandbox()`), `sandbox-kernel run` (its `--mount`, `--working-folder`, ...) and
`sandbox-kernel mcp` all give their settings to the kernel as `--SandboxKernel.name=value`; the kernel alone would
say "its command line". They add `--SandboxKernelApp.setting_sources=JSON` (made by `argument()`), and the
kernel's messages about a bad setting then name the keyword or flag the user wrote, and how to write the others
(`names`). Such a launcher reports the settings' problems itself (`reported`): the kernel does not log them too.
Only words for messages come this way, from the host program that starts the kernel; nothing is decided by them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

OPTION = "--SandboxKernelApp.setting_sources"
COMMAND_LINE = "the kernel's command line: its kernelspec's argv or --SandboxKernel options"
MAX_CHARS = 64 << 10  # a launcher's words, not data


@dataclass(frozen=True)
class Sources:
    """`given`: setting -> where it was given (e.g. "--mount of sandbox-kernel run"); `names`: setting -> how the
    launcher's user writes it (e.g. "--mount"; one not listed: `other`, with {name} in it); `reported`: the launcher
    shows the settings' problems itself."""

    given: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    other: str = "SandboxKernel.{name}"
    reported: bool = False

    def origin(self, name: str) -> str:
        """Where setting `name`, found on the kernel's command line, was given."""
        return self.given.get(name, COMMAND_LINE)

    def spelled(self, name: str) -> str:
        return self.names.get(name) or self.other.replace("{name}", name)

    def respell(self, text: str, settings: set[str]) -> str:
        """`text` with each `SandboxKernel.name` (and the settings listed after it: 'SandboxKernel.a, b or c') as
        the launcher's user writes them; unchanged without names."""
        if not self.names and self.other == Sources.other:
            return text

        def listed(match: re.Match[str]) -> str:
            words = re.split(r"(, | or | and )", match.group(0).removeprefix("SandboxKernel."))
            if words[0] not in settings:  # not a setting (an unknown one, named as given): as it is
                return match.group(0)
            return "".join(self.spelled(w) if i % 2 == 0 and w in settings else w for i, w in enumerate(words))

        # not one already written as a command-line option (--SandboxKernel.name, as the user gave it)
        return re.sub(r"(?<![-\w])SandboxKernel\.\w+(?:(?:, | or | and )\w+)*", listed, text)


def parse(text: str) -> Sources:
    """The launcher's JSON (bad or missing: no sources, the kernel's own words)."""
    try:
        data: Any = json.loads(text) if text and len(text) <= MAX_CHARS else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        return Sources()
    given, names = data.get("given"), data.get("names")
    other = data.get("other")
    return Sources(
        {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {},
        {str(k): str(v) for k, v in names.items()} if isinstance(names, dict) else {},
        other if isinstance(other, str) and "{name}" in other else Sources.other,
        data.get("reported") is True,
    )


def argument(sources: Sources) -> str:
    """The kernel's command-line argument carrying `sources` (a JSON object: traitlets takes it as it is)."""
    data = {"given": sources.given, "names": sources.names, "other": sources.other, "reported": sources.reported}
    return f"{OPTION}={json.dumps(data, ensure_ascii=False)}"


def of_command(
    command: str, words: list[str], flags: dict[str, str] | None = None, used: Iterable[str] = ()
) -> Sources:
    """The sources of a command of this package (`sandbox-kernel run`, `mcp`) that takes kernel settings as
    `--SandboxKernel.name=value` `words` and as its own `flags` (setting -> flag), of which those `used`."""
    flags = flags or {}
    given = {name: f"{flags[name]} of {command}" for name in used}
    for word in words:  # after the flags on the kernel's command line: they win
        if word.startswith("--SandboxKernel."):
            option = word.split("=", 1)[0]
            given[option.removeprefix("--SandboxKernel.")] = f"{option} of {command}"  # as the user wrote it
    return Sources(given, dict(flags), "--SandboxKernel.{name}", reported=True)
