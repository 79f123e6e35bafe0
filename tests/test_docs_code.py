"""The ```python blocks of README.md and docs/*.md run, against real kernels, as a reader would run them.

Host code (the agent API, jupyter_client) runs in this process, in a fresh empty folder, as a reader would run it
from scratch (an example makes the files it needs); a Sandbox an example leaves open is closed after it. Guest code (`<!-- run as a cell,
settings: {...} -->` before the block) runs as a cell, one sandbox per set of settings for all such blocks.
Blocks after `<!-- not run: REASON -->` are skipped with that reason (tests/unit/test_docs.py checks the notes).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from docs_markdown import Block, pages, python_blocks
from sandbox_kernel import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BLOCKS = [block for page in pages() for block in python_blocks(page)]
HOST = [b for b in BLOCKS if not b.is_cell]
CELLS = [b for b in BLOCKS if b.is_cell]


@pytest.fixture(scope="module")
def sandboxes() -> Iterator[dict[str, Sandbox]]:
    """One started Sandbox per distinct settings of the guest-code blocks, shared by them."""
    started: dict[str, Sandbox] = {}
    yield started
    for sandbox in started.values():
        sandbox.close()


def open_sandboxes() -> list[Sandbox]:
    """Sandboxes of this process whose kernel is still up (their event-loop thread runs until close())."""
    found = []
    for o in gc.get_objects():
        try:
            if isinstance(o, Sandbox) and o._thread.is_alive():
                found.append(o)
        except ReferenceError:  # a weakref.proxy of an object gone (an earlier test's, e.g. a start that failed)
            continue
    return found


@pytest.mark.parametrize("block", HOST, ids=[b.name for b in HOST])
def test_host_code_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.skip_reason:
        pytest.skip(block.skip_reason)
    monkeypatch.chdir(tmp_path)  # empty: nothing prepared for the example
    before = set(map(id, open_sandboxes()))
    try:
        exec(compile(block.code, block.name, "exec"), {"__name__": "__doc_example__"})
    finally:
        for sandbox in open_sandboxes():
            if id(sandbox) not in before:
                sandbox.close()


@pytest.mark.parametrize("block", CELLS, ids=[b.name for b in CELLS])
def test_guest_code_runs_as_a_cell(block: Block, sandboxes: dict[str, Sandbox]) -> None:
    if block.skip_reason:
        pytest.skip(block.skip_reason)
    key = json.dumps(block.settings, sort_keys=True)
    if key not in sandboxes:
        sandboxes[key] = Sandbox(**block.settings).start()
    result = sandboxes[key].run(block.code, timeout=120)
    assert result.error is None, result.to_llm()
