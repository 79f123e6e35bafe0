"""The launcher's report of the OS layers in force, in words for logs, `doctor` and agents."""

from __future__ import annotations

import json
import os
from typing import Any


def read_report(fd: int) -> dict[str, Any]:
    """The launcher's report, read to the end of its pipe ({} if it wrote none); closes `fd`."""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        report = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def describe(report: dict[str, Any]) -> str:
    """One line: each layer in force with its detail, then what is missing and why."""
    if not report:
        return "OS layers: unknown (the launcher sent no report)"
    if report.get("mode") == "off":
        return "OS layers: off (os_sandbox='off'): Deno's permissions are the only wall"
    parts = []
    layers = report.get("layers", {})
    if "namespaces" in layers:
        parts.append(f"namespaces ({', '.join(layers['namespaces'])})")
    if "landlock" in layers:
        landlock = layers["landlock"]
        parts.append(f"landlock (ABI {landlock['abi']}: {', '.join(landlock['enforced'])})")
    if "seccomp" in layers:
        parts.append(f"seccomp ({len(layers['seccomp']['denied'])} calls denied, no new processes)")
    if layers.get("no_new_privs"):
        parts.append("no_new_privs")
    text = "OS layers in force: " + (", ".join(parts) if parts else "none")
    missing = report.get("missing", {})
    if missing:
        text += "; missing: " + "; ".join(f"{name} ({why})" for name, why in missing.items())
    return text
