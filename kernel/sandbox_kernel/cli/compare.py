"""Run notebooks under this kernel and under ipykernel, and list the cells whose outputs differ.

`sandbox-kernel compare NOTEBOOK...` is how to see what the sandbox changes in a notebook you already have:
each notebook runs twice (each time in a fresh copy of its folder), and a cell differs when its
outputs, normalised for what always varies (object addresses, colours, traceback frames), differ.

The second run, the reference, is plain ipykernel on this machine WITHOUT any sandbox (by design: it shows what
the notebook does unconfined): its code can read and change your files, reach the network and run programs.
Compare only notebooks you trust.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode

from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

REFERENCE = "python3"
CELL_TIMEOUT = 120
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


@dataclass
class CellDifference:
    """One code cell whose outputs differ between the two kernels."""

    index: int
    source: str
    ours: list[str]
    reference: list[str]


@dataclass
class Comparison:
    """The outcome for one notebook."""

    notebook: Path
    cells: int = 0
    differences: list[CellDifference] = field(default_factory=list)
    failure: str | None = None  # a run that did not finish (the kernel failed to start, a timeout)


def normalised(output: dict[str, Any]) -> str:
    """One output as text, without what varies between runs and kernels for no reason of the sandbox's."""
    kind = output.get("output_type")
    if kind == "stream":
        text = f"{output['name']}: {output['text']}"
    elif kind == "error":
        text = f"error: {output['ename']}: {output['evalue']}"  # frames and colours are each kernel's own
    else:
        data = output.get("data", {})
        mime = next((m for m in ("text/plain", "text/html", "text/markdown", "image/png") if m in data), None)
        shown = data[mime] if mime else ""
        text = f"{mime}: {shown if isinstance(shown, str) else ''.join(shown)}"
    text = _ADDRESS.sub("0x...", _ANSI.sub("", text))
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def _merged(outputs: list[dict[str, Any]]) -> list[str]:
    """Outputs as text, with consecutive stream chunks of one name joined (kernels flush at different times)."""
    merged: list[dict[str, Any]] = []
    for out in outputs:
        if out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream":
            if merged[-1]["name"] == out["name"]:
                merged[-1] = {**merged[-1], "text": merged[-1]["text"] + out["text"]}
                continue
        merged.append(dict(out))
    return [normalised(out) for out in merged]


def execute(notebook: Path, kernel_name: str, extra_arguments: list[str] | None = None) -> NotebookNode:
    """The notebook after running it under `kernel_name` in a fresh copy of its folder (errors kept as outputs)."""
    nb: NotebookNode = nbformat.read(notebook, as_version=4)
    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-compare-") as scratch:
        folder = Path(scratch) / "notebook"
        shutil.copytree(notebook.parent, folder, symlinks=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        client = NotebookClient(
            nb,
            kernel_name=kernel_name,
            timeout=CELL_TIMEOUT,
            allow_errors=True,
            resources={"metadata": {"path": str(folder)}},
            extra_arguments=extra_arguments or [],
        )
        client.execute()
    return nb


def compare(notebook: Path, extra_arguments: list[str] | None = None) -> Comparison:
    """Run `notebook` under both kernels and collect the code cells whose outputs differ (the ipykernel run is
    not sandboxed: only for notebooks you trust)."""
    result = Comparison(notebook)
    try:
        ours = execute(notebook, KERNEL_NAME, extra_arguments)
        reference = execute(notebook, REFERENCE)
    except Exception as exc:  # reported per notebook; the others still run
        result.failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return result
    pairs = [(a, b) for a, b in zip(ours.cells, reference.cells, strict=True) if a.cell_type == "code"]
    result.cells = len(pairs)
    for index, (a, b) in enumerate(pairs, start=1):
        mine, theirs = _merged(a.outputs), _merged(b.outputs)
        if mine != theirs:
            result.differences.append(CellDifference(index, a.source, mine, theirs))
    return result


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def report(comparisons: list[Comparison]) -> str:
    """A markdown report: a summary line per notebook, then each differing cell side by side."""
    lines = ["| notebook | code cells | same | differ |", "|---|---:|---:|---:|"]
    for c in comparisons:
        if c.failure:
            lines.append(f"| {c.notebook.name} | - | - | did not run: {c.failure} |")
        else:
            lines.append(f"| {c.notebook.name} | {c.cells} | {c.cells - len(c.differences)} | {len(c.differences)} |")
    for c in comparisons:
        for d in c.differences:
            lines += ["", f"### {c.notebook.name}, code cell {d.index}", "```python", _clip(d.source), "```"]
            lines += ["sandbox-kernel:", *(f"    {_clip(o)}" for o in d.ours or ["(no output)"])]
            lines += ["ipykernel:", *(f"    {_clip(o)}" for o in d.reference or ["(no output)"])]
    return "\n".join(lines) + "\n"
