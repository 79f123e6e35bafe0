"""The host's completions while a sandbox starts: bare names only, with JupyterLab's cursor range and types."""

from __future__ import annotations

import pytest

from sandbox_kernel.jupyter.early_completion import early_completions


@pytest.mark.parametrize(
    ("code", "first", "start"),
    [
        ("impo", "import", 0),
        ("x = pri", "print", 4),
        ("    pri", "print", 4),
        ("f(a, Tr", "True", 5),
        ("x = [pri", "print", 5),
        ("a = 3\nb = get_", "get_ipython", 10),
        ("'it''s' + pri", "print", 10),
        ("dev", "device", 0),
    ],
)
def test_a_bare_name_completes(code: str, first: str, start: int) -> None:
    reply = early_completions(code, len(code))
    assert reply["matches"][0] == first, reply
    assert (reply["cursor_start"], reply["cursor_end"]) == (start, len(code))
    types = reply["metadata"]["_jupyter_types_experimental"]
    assert [t["text"] for t in types] == reply["matches"]


@pytest.mark.parametrize(
    "code",
    [
        "os.pa",
        "import o",
        "from os import pa",
        "def pri",
        "class Tr",
        "%ti",
        "!ls",
        '"pri',
        "f('pri",
        'f("""pri',
        "# pri",
        'print("a") # pri',
        "x?pri",
        "",
        "x = 1 ",
        "zzq",
    ],
)
def test_anything_else_gets_no_matches(code: str) -> None:
    """Attributes, magics, shell words, strings, comments: only the sandbox knows what to offer there."""
    reply = early_completions(code, len(code))
    assert reply["matches"] == [] and reply["cursor_start"] == reply["cursor_end"] == len(code), reply


def test_the_cursor_may_sit_mid_cell() -> None:
    code = "x = pri\ny = 2"
    reply = early_completions(code, 7)
    assert reply["matches"] == ["print"] and (reply["cursor_start"], reply["cursor_end"]) == (4, 7)


def test_order_and_kinds_follow_the_sandboxs_completer() -> None:
    """Case-insensitive order (IPython's), IPython's type names, and no keyword that cannot start a statement."""
    reply = early_completions("In", 2)
    assert reply["matches"][:3] == ["In", "IndentationError", "IndexError"]
    kinds = {t["text"]: t["type"] for t in reply["metadata"]["_jupyter_types_experimental"]}
    assert kinds["In"] == "instance" and kinds["IndexError"] == "class"
    assert early_completions("e", 1)["matches"][:2] == ["enumerate", "eval"]  # not else/elif/except
    assert early_completions("K", 1)["matches"] == ["KeyboardInterrupt", "KeyError"]
