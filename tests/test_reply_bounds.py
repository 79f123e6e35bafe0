"""complete, inspect and execute replies are bounded and cleaned like outputs, through the real kernel: the
honest glue with a 30 MB docstring, and a guest that replaces the glue's handlers with hostile ones (it shares
the interpreter with them). The pure rules: tests/unit/test_reply_rules.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from conftest import execute, start_kernel, stop_kernel

MAX = 1_000_000  # the kernel's max_output_bytes here
MARKER = f"[... cut: the reply passed max_output_bytes={MAX};"
FAST = 20.0  # seconds a bounded reply may take on this 2-core machine (an unbounded 30 MB one took longer)


@pytest.fixture(scope="module")
def kc() -> Iterator[BlockingKernelClient]:
    km, kc = start_kernel([f"--SandboxKernel.max_output_bytes={MAX}"])
    yield kc
    stop_kernel(km, kc)


def request(kc: BlockingKernelClient, name: str, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], float]:
    """One shell request's reply content, and the seconds it took."""
    started = time.monotonic()
    msg_id = getattr(kc, name)(*args, **kwargs)
    while True:
        reply = kc.get_shell_msg(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            assert reply["msg_type"] == f"{name}_reply"
            return reply["content"], time.monotonic() - started


def ok(kc: BlockingKernelClient, code: str, **kwargs: Any) -> dict[str, Any]:
    run = execute(kc, code, **kwargs)
    assert run.content["status"] == "ok", run.content
    return dict(run.content)


def still_answers(kc: BlockingKernelClient) -> None:
    run = execute(kc, "6 * 7")
    assert run.content["status"] == "ok" and run.of_type("execute_result")[0]["data"]["text/plain"] == "42"


HOSTILE = """
import sys
_api = sys.modules["sandbox_guest.api"]
_Op = sys.modules["sandbox_guest._protocol"].Op
_saved = dict(_api._HANDLERS)
def _restore():
    _api._HANDLERS.update(_saved)
"""


@pytest.fixture
def hostile(kc: BlockingKernelClient) -> Iterator[None]:
    ok(kc, HOSTILE)
    yield
    ok(kc, "_restore()")


def test_a_30_mb_docstring_is_cut_with_the_marker_and_the_kernel_answers_after(kc):
    ok(kc, "def big():\n    pass\nbig.__doc__ = 'd' * 30_000_000")
    reply, seconds = request(kc, "inspect", "big", 3, 0)
    assert seconds < FAST, seconds
    text = reply["data"]["text/plain"]
    assert reply["found"] is True and len(text.encode()) <= MAX and "ddd" in text
    assert MARKER in text  # inside the text, where the inspector shows it
    assert set(reply["data"]) <= {"text/plain", "text/html"}
    still_answers(kc)


def test_a_hostile_inspect_reply_is_cut_and_cleaned(kc, hostile):
    ok(kc, """
def _evil(req):
    return {"status": "ok", "found": True, "metadata": {"evil": "x" * 1000},
            "data": {"text/plain": "p" * 15_000_000,
                     "text/html": "<img src=x onerror=alert(1)><script>alert(2)</script>",
                     "application/javascript": "alert(3)"}}
_api._HANDLERS[_Op.INSPECT] = _evil
""")  # fmt: skip
    reply, seconds = request(kc, "inspect", "anything", 3, 0)
    assert seconds < FAST, seconds
    assert set(reply["data"]) == {"text/plain"}  # the HTML does not fit beside the cut text: dropped, not cut
    assert len(reply["data"]["text/plain"].encode()) <= MAX and MARKER in reply["data"]["text/plain"]
    assert "evil" not in reply["metadata"] and "cut" in reply["metadata"]["sandbox_kernel"]
    ok(kc, "_api._HANDLERS[_Op.INSPECT] = lambda req: {'status': 'ok', 'found': True, 'metadata': {}, "
           "'data': {'text/plain': 'p' * 30_000_000}}")  # fmt: skip
    reply, seconds = request(kc, "inspect", "anything", 3, 0)  # past what one frame may hold: refused whole
    assert seconds < FAST and reply["data"] == {} and "no usable answer" in reply["metadata"]["sandbox_kernel"]["cut"]
    ok(kc, """
_api._HANDLERS[_Op.INSPECT] = lambda req: {"status": "ok", "found": True, "metadata": {},
    "data": {"text/plain": "doc", "text/html": "<b>doc</b><img src=x onerror=alert(1)><script>alert(2)</script>"}}
""")  # fmt: skip
    reply, _ = request(kc, "inspect", "anything", 3, 0)
    assert reply["data"]["text/plain"] == "doc" and "<b>doc</b>" in reply["data"]["text/html"]
    assert "alert" not in reply["data"]["text/html"] and "onerror" not in reply["data"]["text/html"]
    still_answers(kc)


def test_a_hostile_flood_of_completions_is_capped_with_a_note(kc, hostile):
    ok(kc, """
def _flood(req):
    n = 20_000  # 12 MB in all: within one frame, past max_output_bytes
    return {"status": "ok", "matches": ["m" * 300] * n, "cursor_start": 0, "cursor_end": 2,
            "metadata": {"_jupyter_types_experimental": [{"start": 0, "end": 2, "text": "m" * 300, "type": "x"}] * n}}
_api._HANDLERS[_Op.COMPLETE] = _flood
""")  # fmt: skip
    reply, seconds = request(kc, "complete", "mm", 2)
    assert seconds < FAST, seconds
    assert 0 < len(reply["matches"]) < 20_000 and sum(len(m) for m in reply["matches"]) <= MAX
    assert len(reply["metadata"]["_jupyter_types_experimental"]) == len(reply["matches"])  # JupyterLab's index
    assert reply["metadata"]["sandbox_kernel"]["cut"].startswith(MARKER)
    ok(kc, """
_api._HANDLERS[_Op.COMPLETE] = lambda req: {"status": "ok", "matches": ["a"] * 1_000_000, "cursor_start": 0,
    "cursor_end": 1, "metadata": {}}
""")  # fmt: skip
    reply, seconds = request(kc, "complete", "a", 1)
    assert (
        seconds < FAST and reply["matches"] == [] and "no usable answer" in reply["metadata"]["sandbox_kernel"]["cut"]
    )
    ok(kc, """
_api._HANDLERS[_Op.COMPLETE] = lambda req: {"status": "ok", "matches": ["ab"], "cursor_start": 0,
    "cursor_end": 50, "metadata": {}}
""")  # fmt: skip
    reply, _ = request(kc, "complete", "a", 1)
    assert reply["matches"] == [] and (reply["cursor_start"], reply["cursor_end"]) == (1, 1)
    still_answers(kc)


def test_a_namespace_of_many_names_completes_within_the_cap(kc):
    """The glue stops at one match past the cap (IPython's completer takes ~30 s for a million names in Pyodide,
    past the request's timeout: 20,000 here)."""
    ok(kc, "globals().update({f'zq{i}': i for i in range(20_000)})")
    reply, seconds = request(kc, "complete", "zq", 2)
    assert seconds < FAST, seconds
    assert len(reply["matches"]) == 5000 and all(m.startswith("zq") for m in reply["matches"])
    assert reply["metadata"]["sandbox_kernel"]["cut"] == "5001 matches, the first 5000 kept"
    ok(kc, "for _k in [k for k in globals() if k.startswith('zq')]: del globals()[_k]")
    still_answers(kc)


def test_execute_reply_payloads_and_expressions_are_rebuilt(kc):
    run = execute(kc, "get_ipython().payload_manager.write_payload({'source': 'ask_exit', 'keepkernel': False})\n"
                  "get_ipython().payload_manager.write_payload({'source': 'set_next_input', 'text': 'x = 1', "
                  "'replace': 'yes', 'evil': 1})")  # fmt: skip
    assert run.content["payload"] == [{"source": "set_next_input", "text": "x = 1", "replace": False}]
    run = execute(kc, "pass", user_expressions={"h": "__import__('IPython').display.HTML('<script>alert(1)</script>')"})
    value = run.content["user_expressions"]["h"]
    assert value["status"] == "ok" and "alert" not in str(value["data"]) and value["metadata"] == {}
