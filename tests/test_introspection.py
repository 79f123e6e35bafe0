"""Completion, inspection, pager, is_complete, history, magics and error reports, through the real kernel."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from conftest import execute

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Host locations that must never show in what the guest reports. /home/pyodide is the guest's home.
HOST_LEAKS = re.compile(r"/work/|/root/|/home/(?!pyodide\b)|host_ts|deno|_pyodide|sandbox_guest", re.IGNORECASE)


def plain(text: str) -> str:
    """`text` without ANSI colour codes."""
    return ANSI.sub("", text)


def request(kc: BlockingKernelClient, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Send one shell request (complete, inspect, is_complete, history) and return its reply content."""
    msg_id = getattr(kc, name)(*args, **kwargs)
    while True:
        reply = kc.get_shell_msg(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            assert reply["msg_type"] == f"{name}_reply"
            return reply["content"]


def ok(kc: BlockingKernelClient, code: str, **kwargs: Any) -> Any:
    run = execute(kc, code, **kwargs)
    assert run.content["status"] == "ok", run.content
    return run


def error_of(kc: BlockingKernelClient, code: str) -> tuple[dict[str, Any], str]:
    """The error reply of `code` (checked against its IOPub error) and its plain-text traceback."""
    run = execute(kc, code)
    assert run.content["status"] == "error", run.content
    (error,) = run.of_type("error")
    assert {k: error[k] for k in ("ename", "evalue", "traceback")} == {
        k: run.content[k] for k in ("ename", "evalue", "traceback")
    }
    return run.content, plain("\n".join(run.content["traceback"]))


# ---- completion -----------------------------------------------------------------------------


def applied(code: str, reply: dict[str, Any], match: str) -> str:
    """The cell after the frontend replaces [cursor_start, cursor_end) with `match`."""
    return code[: reply["cursor_start"]] + match + code[reply["cursor_end"] :]


@pytest.mark.parametrize(
    ("code", "cursor_pos"),
    [
        ("import math; math.sq", None),
        ("import math\nroot = math.sq", None),
        ("import math; math.sq + 1", len("import math; math.sq")),
    ],
)
def test_complete_attribute(kc: BlockingKernelClient, code: str, cursor_pos: int | None) -> None:
    reply = request(kc, "complete", code, cursor_pos)
    pos = len(code) if cursor_pos is None else cursor_pos
    assert reply["status"] == "ok"
    assert reply["cursor_end"] == pos
    found = [m for m in reply["matches"] if m in ("sqrt", "math.sqrt")]
    assert found, reply
    assert code[reply["cursor_start"] : pos] == ("sq" if found[0] == "sqrt" else "math.sq")
    assert applied(code, reply, found[0]) == code[: pos - 2] + "sqrt" + code[pos:]


def test_complete_name_from_earlier_cell(kc: BlockingKernelClient) -> None:
    ok(kc, "sandbox_unique_variable = 42")
    code = "y = sandbox_uniq"
    reply = request(kc, "complete", code, len(code))
    assert reply["matches"] == ["sandbox_unique_variable"]
    assert (reply["cursor_start"], reply["cursor_end"]) == (4, len(code))
    assert applied(code, reply, reply["matches"][0]) == "y = sandbox_unique_variable"


def test_complete_nothing(kc: BlockingKernelClient) -> None:
    code = "zz_no_such_name_q"
    reply = request(kc, "complete", code, len(code))
    assert reply["status"] == "ok"
    assert reply["matches"] == []
    assert reply["cursor_start"] == reply["cursor_end"] == len(code)


# ---- inspection and the pager ---------------------------------------------------------------

AREA = '''
def area(width, height=2):
    """Area of a rectangle, in square units."""
    return width * height
'''


def test_inspect_user_function(kc: BlockingKernelClient) -> None:
    ok(kc, AREA)
    reply = request(kc, "inspect", "area", 4)
    assert reply["status"] == "ok"
    assert reply["found"] is True
    text = plain(reply["data"]["text/plain"])
    assert "area(width, height=2)" in text
    assert "Area of a rectangle, in square units." in text
    assert "return width * height" not in text  # detail_level 0: no source

    detailed = plain(request(kc, "inspect", "area", 4, 1)["data"]["text/plain"])
    assert "return width * height" in detailed

    inside_call = request(kc, "inspect", "x = area(3, ", len("x = area(3, "))
    assert inside_call["found"] is True
    assert "area(width, height=2)" in plain(inside_call["data"]["text/plain"])


def test_inspect_unknown_name(kc: BlockingKernelClient) -> None:
    reply = request(kc, "inspect", "zz_undefined_thing", 5)
    assert reply["status"] == "ok"
    assert reply["found"] is False
    assert reply["data"] == {}


@pytest.mark.parametrize(("suffix", "has_source"), [("?", False), ("??", True)])
def test_question_mark_pages(kc: BlockingKernelClient, suffix: str, has_source: bool) -> None:
    ok(kc, AREA)
    run = ok(kc, "area" + suffix)
    (payload,) = run.content["payload"]
    assert payload["source"] == "page"
    text = plain(payload["data"]["text/plain"])
    assert "Area of a rectangle, in square units." in text  # the docstring, alone or in the source
    assert "area(width, height=2)" in text
    assert ("return width * height" in text) is has_source
    assert "Area of a rectangle" not in run.stream()  # paged, not printed
    assert not run.of_type("execute_result")


# ---- is_complete ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "indent"),
    [
        ("x = 1", "complete", None),
        ("print('hello')\n", "complete", None),
        ("for i in range(3):", "incomplete", "    "),
        ("def f():\n    if x:", "incomplete", "        "),
        ("values = [1,", "incomplete", ""),
        ("1)", "invalid", None),
        ("a b c", "invalid", None),
    ],
)
def test_is_complete(kc: BlockingKernelClient, code: str, status: str, indent: str | None) -> None:
    reply = request(kc, "is_complete", code)
    assert reply["status"] == status
    if indent is not None:
        assert reply["indent"] == indent


# ---- history --------------------------------------------------------------------------------


def test_history(fresh_kernel: tuple[KernelManager, BlockingKernelClient]) -> None:
    _, kc = fresh_kernel
    for cell in ["h_var = 20", "h_var + 1", "print('h')", "h_var + 1"]:
        ok(kc, cell)
    ok(kc, "h_var * 100", store_history=False)  # not recorded

    tail = request(kc, "history", hist_access_type="tail", n=3, output=False, raw=True)
    assert tail["status"] == "ok"
    assert tail["history"] == [[1, 2, "h_var + 1"], [1, 3, "print('h')"], [1, 4, "h_var + 1"]]

    with_output = request(kc, "history", hist_access_type="tail", n=2, output=True, raw=True)
    assert with_output["history"] == [[1, 3, ["print('h')", None]], [1, 4, ["h_var + 1", "21"]]]

    ranged = request(kc, "history", hist_access_type="range", session=1, start=1, stop=3, output=False, raw=True)
    assert ranged["history"] == [[1, 1, "h_var = 20"], [1, 2, "h_var + 1"]]

    found = request(kc, "history", hist_access_type="search", pattern="h_var*", output=False, raw=True)
    assert [h[2] for h in found["history"]] == ["h_var = 20", "h_var + 1", "h_var + 1"]

    unique = request(kc, "history", hist_access_type="search", pattern="h_var*", unique=True, output=False, raw=True)
    assert unique["history"] == [[1, 1, "h_var = 20"], [1, 4, "h_var + 1"]]

    last = request(kc, "history", hist_access_type="search", pattern="*print*", n=1, output=False, raw=True)
    assert last["history"] == [[1, 3, "print('h')"]]

    unstored = request(kc, "history", hist_access_type="search", pattern="*100*", output=False, raw=True)
    assert unstored["history"] == []


def test_silent_cell_not_in_history(kc: BlockingKernelClient) -> None:
    ok(kc, "'silent history marker'", silent=True)  # jupyter_client sends store_history=True with it
    found = request(kc, "history", hist_access_type="search", pattern="*silent history marker*", output=False, raw=True)
    assert found["history"] == []


def test_store_history_false_keeps_the_counter(kc: BlockingKernelClient) -> None:
    before = ok(kc, "1").content["execution_count"]
    assert ok(kc, "2", store_history=False).content["execution_count"] == before
    assert ok(kc, "3").content["execution_count"] == before + 1


# ---- magics ---------------------------------------------------------------------------------


def test_time_magic(kc: BlockingKernelClient) -> None:
    run = ok(kc, "%time 6 * 7")
    out = run.stream()
    assert "CPU times:" in out
    assert "Wall time:" in out
    assert run.of_type("execute_result")[0]["data"]["text/plain"] == "42"


def test_timeit_magic(kc: BlockingKernelClient) -> None:
    run = ok(kc, "%timeit -n1 -r1 sum(range(100))")
    assert re.search(r"per loop \(mean ± std\. dev\. of 1 run, 1 loop each\)", run.stream()), run.stream()


def test_who_magic(kc: BlockingKernelClient) -> None:
    ok(kc, "who_int_var = 1\nwho_str_var = 'x'")
    everything = ok(kc, "%who").stream().split()
    assert "who_int_var" in everything
    assert "who_str_var" in everything
    ints = ok(kc, "%who int").stream().split()
    assert "who_int_var" in ints
    assert "who_str_var" not in ints


def test_reset_magic(kc: BlockingKernelClient) -> None:
    ok(kc, "doomed_var = 'here'")
    assert ok(kc, "doomed_var").of_type("execute_result")[0]["data"]["text/plain"] == "'here'"
    ok(kc, "%reset -f")
    content, _ = error_of(kc, "doomed_var")
    assert content["ename"] == "NameError"
    assert "doomed_var" in content["evalue"]


def test_capture_magic(kc: BlockingKernelClient) -> None:
    code = "%%capture captured\nprint('hidden text')\nfrom IPython.display import display, HTML\ndisplay(HTML('<b>hid</b>'))"
    run = ok(kc, code)
    assert run.outputs == []  # nothing reached the frontend
    stdout = ok(kc, "captured.stdout").of_type("execute_result")[0]["data"]["text/plain"]
    assert stdout == "'hidden text\\n'"
    shown = ok(kc, "captured.outputs[0].data").of_type("execute_result")[0]["data"]["text/plain"]
    assert "<b>hid</b>" in shown


@pytest.mark.parametrize(
    ("code", "refused"),
    [
        ("%%bash --bg\nls", "%%bash --bg"),
        ("%%perl\nprint 1", "Couldn't find program: 'perl' (%%perl"),  # ipykernel's words for a missing program
        ("%%script ruby\nputs 1", "Couldn't find program: 'ruby' (%%script ruby"),
    ],
)
def test_what_needs_a_process_is_refused_at_once(kc: BlockingKernelClient, code: str, refused: str) -> None:
    content, text = error_of(kc, code)
    assert content["ename"] == "ShellUnavailableError"
    assert content["evalue"].startswith(f"{refused}: the sandbox starts no processes"), content["evalue"]
    # Just the refusal: no frames of the sandbox's own code.
    assert text.strip() == f"ShellUnavailableError: {content['evalue']}"


@pytest.mark.parametrize(
    "code",
    [
        "!pip install -q sbk-no-such-package-xyz",
        "import sys\n!{sys.executable} -m pip install -q sbk-no-such-package-xyz",
        "!python3 -m pip install -q sbk-no-such-package-xyz",
    ],
)
def test_shell_pip_is_the_pip_magic(kc: BlockingKernelClient, code: str) -> None:
    """Tutorials install with `!pip install`: it does what %pip install does, with the same words."""
    bang = execute(kc, code)
    magic = execute(kc, "%pip install -q sbk-no-such-package-xyz")
    assert bang.content.get("ename") == magic.content.get("ename") and magic.content["status"] == "error"
    assert bang.content["evalue"] == magic.content["evalue"]


# ---- errors ---------------------------------------------------------------------------------


def check_clean(content: dict[str, Any], text: str) -> None:
    for where in (text, content["evalue"]):
        leak = HOST_LEAKS.search(where)
        assert leak is None, f"host detail {leak.group()!r} in:\n{where}"


def test_error_in_function_from_earlier_cell(kc: BlockingKernelClient) -> None:
    ok(kc, "def check_positive(n):\n    if n < 0:\n        raise ValueError(f'negative: {n}')\n    return n")
    content, text = error_of(kc, "total = 0\ntotal += check_positive(-3)")
    assert content["ename"] == "ValueError"
    assert content["evalue"] == "negative: -3"
    assert "Cell In[" in text
    assert "total += check_positive(-3)" in text  # the failing line of this cell
    assert "raise ValueError(f'negative: {n}')" in text  # and the line in the earlier cell
    assert text.rstrip().endswith("ValueError: negative: -3")
    check_clean(content, text)


@pytest.mark.parametrize(
    ("code", "ename", "line"),
    [
        ("x = 1\n1 / 0", "ZeroDivisionError", "1 / 0"),
        ("import no_such_module_here", "ModuleNotFoundError", "import no_such_module_here"),
        ("import json\njson.loads('{bad')", "JSONDecodeError", "json.loads('{bad')"),
        ("d = {}\nd['missing']", "KeyError", "d['missing']"),
        ("import js\njs.JSON.parse('{')", "JsException", "js.JSON.parse('{')"),
        ("async def boom():\n    raise RuntimeError('async')\nawait boom()", "RuntimeError", "await boom()"),
        ("class MyError(Exception):\n    pass\nraise MyError('mine')", "MyError", "raise MyError('mine')"),
    ],
)
def test_error_reports(kc: BlockingKernelClient, code: str, ename: str, line: str) -> None:
    content, text = error_of(kc, code)
    assert content["ename"] == ename
    assert "Cell In[" in text
    assert line in text
    check_clean(content, text)


def test_syntax_error_shows_line_and_caret(kc: BlockingKernelClient) -> None:
    content, text = error_of(kc, "a = 1\nb = (a +* 2)\nc = 3")
    assert content["ename"] == "SyntaxError"
    assert "Cell In[" in text
    lines = text.splitlines()
    (i,) = [n for n, t in enumerate(lines) if "b = (a +* 2)" in t]
    assert "^" in lines[i + 1]
    assert lines[i + 1].index("^") >= lines[i].index("b = (")
    check_clean(content, text)


PREFIXES = "abcdefghilmnoprstvwyzABCDEIKNOPRSTUVWZ"


def test_the_hosts_early_completions_are_the_sandboxs_own(
    fresh_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """While a sandbox starts, the kernel answers completions of bare names itself (JupyterLab drops slow ones):
    in a fresh sandbox (no cell has changed its namespace), every name it offers for each of 38 first letters is one
    the sandbox's completer offers too, in the same order, and it leaves out only what jedi adds from its stubs or
    the guest's newer Python has (a handful)."""
    from sandbox_kernel.jupyter.early_completion import early_completions

    _, kc = fresh_kernel
    for prefix in PREFIXES:
        guest = [m for m in request(kc, "complete", prefix)["matches"] if not m.startswith("%")]
        host = early_completions(prefix, len(prefix))["matches"]
        assert host, f"no early completion for {prefix!r}"
        assert [m for m in guest if m in host] == host, (prefix, guest, host)
        assert len(set(guest) - set(host)) <= 3, (prefix, set(guest) - set(host))


def completed(reply: dict[str, Any], code: str) -> set[str]:
    """The texts a completion reply would make of `code`."""
    start, end = reply["cursor_start"], reply["cursor_end"]
    return {code[:start] + match + code[end:] for match in reply["matches"]}


@pytest.mark.parametrize("code", ["import os\nos.pa", "import json as j\nj.lo", "import os.path\nos.path.jo"])
def test_a_module_imported_by_the_cell_not_yet_run_completes_at_once(
    fresh_kernel: tuple[KernelManager, BlockingKernelClient], code: str
) -> None:
    """Jedi parsed such a module first (2.6 s for `os` in a fresh sandbox; JupyterLab drops replies after 1 s); a
    module the sandbox has loaded is completed from itself, as after the import ran."""
    _, kc = fresh_kernel
    execute(kc, "pass")  # the sandbox is up: what is timed is the completion itself
    started = time.monotonic()
    quick = request(kc, "complete", code)
    took = time.monotonic() - started
    execute(kc, code.split("\n")[0])  # now the name is in the namespace: Jedi completes it from the module
    later = request(kc, "complete", code)
    assert completed(quick, code) == completed(later, code) != set()
    assert took < 1.0, f"the first completion of an attribute took {took:.2f} s"
