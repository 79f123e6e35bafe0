"""The bounds of complete, inspect and is_complete replies (sandbox_kernel.jupyter.replies), on hostile answers.
Through the real kernel: tests/test_reply_bounds.py."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox_kernel.jupyter import replies
from sandbox_kernel.jupyter.sanitize import OutputSanitizer

MARKER = "[... cut: the reply passed max_output_bytes="


def complete(matches: list[Any], start: Any = 0, end: Any = 2, types: Any = None) -> dict[str, Any]:
    metadata = {} if types is None else {"_jupyter_types_experimental": types}
    return {"status": "ok", "matches": matches, "cursor_start": start, "cursor_end": end, "metadata": metadata}


def test_a_million_matches_are_cut_to_the_cap_and_the_cut_is_said():
    many = [f"va{i}" for i in range(1_000_000)]
    types = [{"start": 0, "end": 2, "text": m, "type": "instance", "signature": ""} for m in many]
    reply = replies.bound_complete(complete(many, types=types), "va", 2, 10 << 20)
    assert reply["matches"] == many[: replies.MAX_MATCHES]
    kinds = reply["metadata"]["_jupyter_types_experimental"]
    assert [k["text"] for k in kinds] == reply["matches"]  # index-aligned, as JupyterLab reads them
    assert reply["metadata"]["sandbox_kernel"]["cut"] == f"1000000 matches, the first {replies.MAX_MATCHES} kept"


def test_matches_past_max_output_bytes_are_dropped_with_the_marker():
    big = ["x" * 900] * 100
    reply = replies.bound_complete(complete(big), "xx", 2, 10_000)
    assert 0 < len(reply["matches"]) < 12 and sum(len(m) for m in reply["matches"]) <= 10_000
    assert reply["metadata"]["sandbox_kernel"]["cut"].startswith(MARKER + "10000;")
    assert "_jupyter_types_experimental" not in reply["metadata"]  # the guest gave none: none is made up


@pytest.mark.parametrize(
    "start, end",
    [(-1, 2), (0, 3), (2, 1), ("0", 2), (0.0, 2), (True, 2), (None, 2), (0, 10**30)],
)
def test_cursor_positions_outside_the_code_give_no_matches(start, end):
    reply = replies.bound_complete(complete(["ab"], start, end), "ab", 2, 1000)
    assert reply["matches"] == [] and (reply["cursor_start"], reply["cursor_end"]) == (2, 2)
    assert "do not lie within the code (0..2)" in reply["metadata"]["sandbox_kernel"]["cut"]


def test_what_is_not_a_match_is_dropped_and_types_are_rebuilt():
    types = [
        {"start": 0, "end": 2, "text": "ab", "type": "function" * 50, "signature": "s" * 5000, "evil": "<script>"},
        {"start": 0, "end": 2, "text": "ac", "type": "x"},
        {"start": 0, "end": 99, "text": "ad", "type": "x"},
        {"start": 0, "end": 2, "text": "ae", "type": ["not", "a", "string"]},
    ]
    reply = replies.bound_complete(complete(["ab", 5, "ad", "ae"], types=types), "ab", 2, 10_000)
    assert reply["matches"] == ["ab", "ad", "ae"]
    first, third, fourth = reply["metadata"]["_jupyter_types_experimental"]
    assert set(first) == {"start", "end", "text", "type", "signature"}  # no key of the guest's own
    assert len(first["type"]) == replies.MAX_TYPE_CHARS and len(first["signature"]) == replies.MAX_SIGNATURE_CHARS
    assert third["type"] == fourth["type"] == "<unknown>"  # end 99 past the code; a list for a type
    assert "were dropped" in reply["metadata"]["sandbox_kernel"]["cut"]
    misaligned = replies.bound_complete(complete(["ab", "ac"], types=types[:1]), "ab", 2, 10_000)
    assert misaligned["metadata"] == {}  # types that do not line up with the matches are not passed on


def test_a_big_docstring_is_cut_inside_the_text_with_the_marker():
    reply = {"status": "ok", "found": True, "data": {"text/plain": "é" * 3_000_000}, "metadata": {"x": 1}}
    bounded = replies.bound_inspect(reply, OutputSanitizer(), 100_000)
    text = bounded["data"]["text/plain"]
    assert len(text.encode()) <= 100_000 and text.startswith("éé")
    assert text.endswith("\n" + MARKER + "100000; the rest of this text was not sent (SandboxKernel.max_output_bytes)]")
    assert bounded["found"] is True and set(bounded["metadata"]) == {"sandbox_kernel"}  # the guest's metadata: gone


def test_only_text_plain_and_cleaned_html_reach_the_inspector():
    data = {
        "text/plain": "doc",
        "text/html": '<b onclick="alert(1)">doc</b><script>alert(2)</script>',
        "application/javascript": "alert(3)",
        "text/markdown": "[x](javascript:alert(4))",
    }
    bounded = replies.bound_inspect(
        {"status": "ok", "found": True, "data": data, "metadata": {}}, OutputSanitizer(), 10_000
    )
    assert set(bounded["data"]) == {"text/plain", "text/html"}
    assert "alert" not in bounded["data"]["text/html"] and "<b>doc</b>" in bounded["data"]["text/html"]
    assert bounded["metadata"]["sandbox_kernel"]["dropped"] == ["application/javascript", "text/markdown"]


def test_html_too_big_is_dropped_not_cut():
    data = {"text/plain": "doc", "text/html": "<p>" + "a" * 20_000 + "</p>"}
    bounded = replies.bound_inspect(
        {"status": "ok", "found": True, "data": data, "metadata": {}}, OutputSanitizer(), 10_000
    )
    assert bounded["data"] == {"text/plain": "doc"}
    assert bounded["metadata"]["sandbox_kernel"]["cut"].startswith(MARKER + "10000; its text/html (20007 bytes)")
    alone = replies.bound_inspect({"status": "ok", "found": True, "data": {"text/html": data["text/html"]}, "metadata": {}}, OutputSanitizer(), 10_000)  # fmt: skip
    assert alone["data"]["text/plain"].startswith(MARKER)  # the marker is what the inspector shows


@pytest.mark.parametrize(
    "reply, expected",
    [
        ({"status": "incomplete", "indent": "    "}, {"status": "incomplete", "indent": "    "}),
        ({"status": "incomplete", "indent": "import os"}, {"status": "incomplete", "indent": ""}),
        ({"status": "incomplete", "indent": " " * 2000}, {"status": "incomplete", "indent": ""}),
        ({"status": "complete", "indent": "  "}, {"status": "complete"}),
        ({"status": "bogus"}, {"status": "unknown"}),
    ],
)
def test_is_complete_indents_are_blanks_only(reply, expected):
    assert replies.bound_is_complete(reply) == expected
