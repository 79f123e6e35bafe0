"""kernel_info and the execute_request options, as ipykernel answers them."""

from __future__ import annotations

import ast
import re
import time

import pytest

from conftest import Run, execute, ipykernel_control, value


def test_kernel_info_reports_the_guest_python(kc):
    kc.kernel_info()
    reply = kc.get_shell_msg(timeout=60)
    content = reply["content"]
    guest = execute(kc, "import platform; platform.python_version()").of_type("execute_result")[0]
    guest_version = guest["data"]["text/plain"].strip("'")
    assert content["language_info"]["version"] == guest_version
    assert guest_version.startswith("3.")
    major, minor = (int(x) for x in content["protocol_version"].split(".")[:2])
    assert (major, minor) >= (5, 3)
    info = content["language_info"]
    assert info["name"] == "python"
    assert info["file_extension"] == ".py"
    assert info["pygments_lexer"] == "ipython3"
    assert info["codemirror_mode"] == {"name": "ipython", "version": 3}
    assert info["mimetype"] == "text/x-python"
    assert "Pyodide" in content["banner"] and guest_version in content["banner"]
    assert {link["text"] for link in content["help_links"]} >= {"Python", "Pyodide"}
    assert content["implementation"] == "sandbox-kernel"


def test_state_and_execution_count(kc):
    first = execute(kc, "counter = 10")
    second = execute(kc, "counter += 1\ncounter")
    assert second.content["execution_count"] == first.content["execution_count"] + 1
    result = second.of_type("execute_result")[0]
    assert result["data"]["text/plain"] == "11"
    assert result["execution_count"] == second.content["execution_count"]


def test_silent_runs_without_output_or_count(kc):
    before = execute(kc, "1").content["execution_count"]
    silent = execute(kc, "print('hidden'); made_silently = 5; 42", silent=True)
    assert silent.content["status"] == "ok"
    # What the code prints is shown (as in ipykernel); no execute_result, no execute_input, no count.
    assert [(m["msg_type"], m["content"]) for m in silent.outputs] == [
        ("stream", {"name": "stdout", "text": "hidden\n"})
    ]
    assert not silent.of_type("execute_result")
    after = execute(kc, "made_silently")
    assert after.of_type("execute_result")[0]["data"]["text/plain"] == "5"
    assert after.content["execution_count"] == before + 1


def test_store_history_false_is_not_in_history(kc):
    execute(kc, "marker_not_stored = 1", store_history=False)
    execute(kc, "marker_stored = 1")
    kc.history(hist_access_type="tail", n=50, output=False, raw=True)
    history = [h[2] for h in kc.get_shell_msg(timeout=30)["content"]["history"]]
    assert "marker_stored = 1" in history
    assert "marker_not_stored = 1" not in history


def test_user_expressions(kc):
    execute(kc, "ue = [1, 2, 3]")
    run = execute(kc, "pass", user_expressions={"n": "len(ue)", "bad": "1/0"})
    expressions = run.content["user_expressions"]
    assert expressions["n"]["status"] == "ok"
    assert expressions["n"]["data"]["text/plain"] == "3"
    assert expressions["bad"]["status"] == "error"
    assert expressions["bad"]["ename"] == "ZeroDivisionError"


def test_stop_on_error_aborts_queued_cells(kc):
    failing = kc.execute("import time; time.sleep(0.5); raise ValueError('first fails')")
    queued = kc.execute("never_ran = True")
    replies = {}
    deadline = time.monotonic() + 60
    while len(replies) < 2 and time.monotonic() < deadline:
        msg = kc.get_shell_msg(timeout=60)
        replies[msg["parent_header"]["msg_id"]] = msg["content"]
    assert replies[failing]["status"] == "error"
    assert replies[failing]["ename"] == "ValueError"
    assert replies[queued]["status"] == "aborted"
    assert execute(kc, "'never_ran' in dir()").of_type("execute_result")[0]["data"]["text/plain"] == "False"


def test_stop_on_error_false_keeps_going(kc):
    failing = kc.execute("raise ValueError('ignored')", stop_on_error=False)
    queued = kc.execute("ran_anyway = True")
    replies = {}
    while len(replies) < 2:
        msg = kc.get_shell_msg(timeout=60)
        replies[msg["parent_header"]["msg_id"]] = msg["content"]
    assert replies[failing]["status"] == "error"
    assert replies[queued]["status"] == "ok"


def test_output_follows_busy_quickly(kc):
    run = execute(kc, "print('quick')")
    stream = [m for m in run.outputs if m["msg_type"] == "stream"]
    assert stream and stream[0]["content"]["text"] == "quick\n"


def test_top_level_await(kc):
    run = execute(kc, "import asyncio\nawait asyncio.sleep(0.01)\n'awaited'")
    assert run.of_type("execute_result")[0]["data"]["text/plain"] == "'awaited'"


def test_the_guest_sees_no_host_path_or_private_name(kc):
    """Nothing of the host (the snapshot builder's command) in the environment; no Pyodide internals in globals()."""
    assert value(execute(kc, "import os; '_' in os.environ")) == "False"
    assert value(execute(kc, "[k for k in globals() if k.startswith('_pyodide')]")) == "[]"


def test_matplotlib_magic_and_dotted_imports_go_through_the_package_loader(kc):
    """Without matplotlib, %matplotlib says why as `import matplotlib` does (the loader's reason in the
    ModuleNotFoundError), not a bare "No module named"; `import a.b` of a missing package too, never a glue
    traceback."""
    for code, top in (("%matplotlib inline", "matplotlib"), ("import matplotlib.pyplot as plt", "matplotlib"),
                      ("import dateutil.parser", "dateutil")):  # fmt: skip
        run = execute(kc, code, timeout=120)
        assert run.content["ename"] == "ModuleNotFoundError", (code, run.content)
        assert run.content["evalue"].startswith(f"No module named '{top}': "), (code, run.content["evalue"])
        assert "SandboxKernel.pyodide_index" in run.content["evalue"], (code, run.content["evalue"])
        assert "sandbox_guest" not in "".join(run.content["traceback"]), (code, run.content["traceback"])
        assert run.stream("stderr") == "", (code, run.stream("stderr"))


def test_a_syntax_warning_is_shown_once_under_the_cells_name(kc):
    """The kernel's import scan parses the cell too; its warnings must not appear a second time as `<unknown>`."""
    run = execute(kc, 'pattern = "\\d"\nlen(pattern)')
    assert value(run) == "2"
    warnings = run.stream("stderr")
    assert warnings.count("SyntaxWarning") == 1, warnings
    assert "<unknown>" not in warnings and "<ipython-input-" in warnings


def test_zoneinfo_has_a_time_zone_database(kc):
    """Tutorials use zoneinfo; Pyodide has no system database, so tzdata ships with the guest's wheels."""
    code = (
        "from zoneinfo import ZoneInfo\nimport datetime as dt\n"
        "str(dt.datetime(2026, 7, 1, 12, tzinfo=ZoneInfo('UTC')).astimezone(ZoneInfo('Europe/Paris')))"
    )
    assert value(execute(kc, code)) == "'2026-07-01 14:00:00+02:00'"


def test_post_execute_and_post_run_cell_events_fire_as_in_ipykernel(kc):
    """Extensions and the inline plot backend hook these; IPython fires them only from run_cell, not run_cell_async."""
    code = (
        "_events = []\nget_ipython().events.register('post_execute', lambda: _events.append('post_execute'))\n"
        "get_ipython().events.register('post_run_cell', lambda r: _events.append(('post_run_cell', r.success)))"
    )
    assert execute(kc, code).content["status"] == "ok"
    execute(kc, "pass")
    expected = "['post_execute', ('post_run_cell', True), 'post_execute', ('post_run_cell', True)]"
    assert value(execute(kc, "str(_events[:4])")) == repr(expected)


def test_time_reports_wall_time_to_the_precision_it_has(kc):
    """%time took the wall time from time.time, which moves in 1 ms steps here: it printed `0 ns` or `1e+03 µs`."""
    run = execute(kc, "\n".join(["%time x = sum(range(10))"] * 20))
    walls = [line for line in run.stream().splitlines() if line.startswith("Wall time:")]
    assert len(walls) == 20, run.stream()
    for line in walls:
        assert re.fullmatch(r"Wall time: [1-9][0-9.]* (ns|µs|μs|ms|s)", line), walls
    clocks = "import time\n[time.get_clock_info(c).resolution for c in ('time', 'perf_counter', 'process_time')]"
    time_res, perf_res, process_res = ast.literal_eval(value(execute(kc, clocks)))
    assert time_res == 0.001  # the honest step of the wall clock (Date.now()), as documented
    assert perf_res <= 1e-6 and process_res <= 1e-6


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def shown_traceback(run) -> str:
    assert run.content["status"] == "error", run.content
    return ANSI.sub("", "\n".join(run.content["traceback"]))


@pytest.mark.parametrize(
    ("code", "frames"),
    [
        ("open('/tmp/sbk-nope.txt')", 1),
        ("def f():\n    return open('/tmp/sbk-nope.txt')\nf()", 2),
        ("import os\nos.remove('/tmp/sbk-nope.txt')", 1),
        ("open('/etc/passwd')", 1),
    ],
)
def test_a_file_error_shows_the_users_frames_only(kc, code, frames):
    """As ipykernel shows the same error: the cell's frames and the error, none of the glue's (guards.py)."""
    text = shown_traceback(execute(kc, code))
    assert "sandbox_guest" not in text and "guards.py" not in text, text
    assert "File " not in text, text  # no frame of a file: the cell's frames only
    assert text.count("Cell In[") == frames and "---->" in text, text
    assert text.splitlines()[-1].startswith(("FileNotFoundError: [Errno 44]", "PermissionError: [Errno 2]")), text


def test_a_pip_error_is_its_message_only(kc):
    """As a UsageError: %pip's line is all a frame would show; no `run_line_magic`."""
    run = execute(kc, "%pip frobnicate")
    assert run.content["ename"] == "PackageLoadError"
    assert run.content["traceback"] == [f"PackageLoadError: {run.content['evalue']}"], run.content["traceback"]


STREAMS_AND_A_DISPLAY = """import sys, time
from IPython.display import display
print('b', file=sys.stderr); print('a')
display(1)
print('c'); print('d', file=sys.stderr); print('e')
"""
STREAMS_APART = "import sys, time\nprint('f', file=sys.stderr)\ntime.sleep(0.6)\nprint('g')"


def output_sequence(run: Run) -> list[tuple[str, str]]:
    """(stream name or message type, text) in order, consecutive text of one stream joined as a notebook shows it."""
    shown: list[tuple[str, str]] = []
    for msg in run.outputs:
        content = msg["content"]
        if msg["msg_type"] == "stream" and shown and shown[-1][0] == content["name"]:
            shown[-1] = (content["name"], shown[-1][1] + content["text"])
        elif msg["msg_type"] == "stream":
            shown.append((content["name"], content["text"]))
        else:
            shown.append((msg["msg_type"], content.get("data", {}).get("text/plain", "")))
    return shown


def test_stdout_and_stderr_are_shown_in_the_order_ipykernel_shows_them(kc):
    """ipykernel holds each stream apart: what a quick stretch of code prints shows as its stdout, then its stderr
    (at a display, at the cell's end); a stream held longer than its interval goes on its own. ipykernel runs the
    same cells as the control."""
    expected = {
        STREAMS_AND_A_DISPLAY: [
            ("stdout", "a\n"),
            ("stderr", "b\n"),
            ("display_data", "1"),
            ("stdout", "c\ne\n"),
            ("stderr", "d\n"),
        ],
        STREAMS_APART: [("stderr", "f\n"), ("stdout", "g\n")],
    }
    with ipykernel_control() as client:
        assert {code: output_sequence(execute(client, code)) for code in expected} == expected, "ipykernel, the control"
    assert {code: output_sequence(execute(kc, code)) for code in expected} == expected
