"""The requests the worker hands the guest (sandbox_guest.api.handle), served by the real glue and IPython shell
in a child process with a fake host (conftest.Guest): replies, IOPub events, questions to the kernel, interrupts."""

from __future__ import annotations

import base64

import pytest


def ok(served) -> dict:
    assert served.reply["status"] == "ok", served.reply
    return served.reply


def error(served) -> tuple[str, str]:
    """(ename, evalue) of a request that must have failed; the error was also shown (an IOPub error)."""
    assert served.reply["status"] == "error", served.reply
    shown = served.iopub("error")
    assert [(e["ename"], e["evalue"]) for e in shown] == [(served.reply["ename"], served.reply["evalue"])]
    return served.reply["ename"], served.reply["evalue"]


def test_attach_reports_the_versions(guest):
    assert guest.facts["pyodide_version"] == "0.0-fake"
    assert guest.facts["ipython_version"].split(".")[0].isdigit()
    assert guest.facts["python_version"] in guest.facts["sys_version"]


def test_an_unknown_request_is_an_error_reply(guest):
    served = guest.handle({"op": "sideways"})
    assert served.reply == {
        "status": "error",
        "ename": "ValueError",
        "evalue": "unknown request 'sideways'",
        "traceback": [],
    }


def test_execute_streams_output_and_the_result_for_its_request(guest):
    served = guest.execute("print('hello', 'world')\n6 * 7", execution_count=5, user_expressions={"e": "2 ** 10"})
    assert ok(served)["payload"] == []
    assert served.reply["user_expressions"]["e"]["data"] == {"text/plain": "1024"}
    assert [e for e in served.log if e[0] == "write"] == [["write", 1, "hello world\n", served.request_id]]
    assert served.iopub("execute_result") == [{"execution_count": 5, "data": {"text/plain": "42"}, "metadata": {}}]
    assert all(e[2] == served.request_id for e in served.log if e[0] == "emit")


def test_a_silent_cell_shows_no_result(guest):
    served = guest.execute("6 * 7", silent=True)
    assert ok(served) and served.iopub("execute_result") == []


def test_an_error_in_the_cell_is_shown_and_replied(guest):
    served = guest.execute("def f():\n    raise ValueError('bad value')\nf()")
    assert error(served) == ("ValueError", "bad value")
    assert served.reply["user_expressions"] == {} and served.reply["payload"] == []
    assert any("bad value" in line for line in served.reply["traceback"])
    assert error(guest.execute("x = ("))[0] == "SyntaxError"


def test_running_out_of_memory_names_the_setting(guest):
    assert error(guest.execute("raise MemoryError()")) == (
        "MemoryError",
        "the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb=0 MiB (raise it to allow more)",
    )


def test_a_size_wasm32_cannot_address_is_shown_as_running_out_of_memory(guest):
    served = guest.execute("raise OverflowError(\"cannot fit 'int' into an index-sized integer\")")
    assert error(served) == (
        "MemoryError",
        "the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb=0 MiB (raise it to allow more); "
        "no size or count of 2**31 or more fits its 32-bit (wasm32) memory at all",
    )
    assert served.reply["traceback"][-1].startswith("MemoryError: the sandbox ran out of memory")
    assert error(guest.execute("raise OverflowError('too big')")) == ("OverflowError", "too big")


def test_input_without_stdin_says_the_frontend_cannot_answer(guest):
    ename, evalue = error(guest.execute("input('Name? ')", allow_stdin=False))
    assert ename == "StdinNotImplementedError"
    assert evalue == "input() was called, but this frontend does not support input requests (allow_stdin is False)."


def test_input_asks_the_kernel_after_sending_what_was_printed(guest):
    served = guest.execute(
        "print('before', end='')\nname = input('Name? ')\nname", [{"value": "Ada"}], allow_stdin=True
    )
    assert ok(served)
    asked = [i for i, e in enumerate(served.log) if e[0] == "emit" and e[1]["type"] == "input_request"]
    assert served.log[asked[0] - 1] == ["write", 1, "before", served.request_id]  # the prompt's context came first
    assert served.asked("input_request") == [{"type": "input_request", "prompt": "Name? ", "password": False}]
    assert served.iopub("execute_result")[0]["data"] == {"text/plain": "'Ada'"}


def test_getpass_asks_for_a_password(guest):
    served = guest.execute("import getpass\ngetpass.getpass()", [{"value": "s3cret"}], allow_stdin=True)
    assert served.asked("input_request") == [{"type": "input_request", "prompt": "Password: ", "password": True}]
    assert served.iopub("execute_result")[0]["data"] == {"text/plain": "'s3cret'"}


@pytest.mark.parametrize(
    ("answer", "ename", "evalue"),
    [
        ({"error": {"type": "PermissionError", "message": "the prompt imitates the kernel's"}}, "InputRefused",
         "input() failed: the prompt imitates the kernel's"),
        ({"error": {"type": "StdinNotImplementedError", "message": "no frontend"}}, "StdinNotImplementedError",
         "input() failed: no frontend"),
        ({"error": {"type": "Other", "message": "odd"}}, "RuntimeError", "input() failed: odd"),
        ({"error": "plain"}, "RuntimeError", "input() failed: plain"),
        ({"value": "\x04"}, "EOFError", "EOF when reading a line"),
        ({"error": {"type": "KeyboardInterrupt"}}, "KeyboardInterrupt", ""),
        (None, "KeyboardInterrupt", "Interrupted by user"),  # the kernel interrupted the waiting request
    ],
)  # fmt: skip
def test_input_answers_that_are_errors(guest, answer, ename, evalue):
    assert error(guest.execute("input()", [answer], allow_stdin=True)) == (ename, evalue)


def test_stdin_reads_the_frontends_lines_until_ctrl_d(guest):
    served = guest.execute(
        "import sys\nsys.stdin.read()", [{"value": "a"}, {"value": "b"}, {"value": "\x04"}], allow_stdin=True
    )
    assert served.iopub("execute_result")[0]["data"] == {"text/plain": "'a\\nb\\n'"}
    assert ok(guest.execute("import sys\nsys.stdin.read()", [{"value": "\x04"}], allow_stdin=True))  # EOF forgotten


def test_time_sleep_asks_the_host_to_sleep(guest):
    served = guest.execute("import time\ntime.sleep(0.25)")
    assert ok(served) and ["sleep", 250.0] in served.log


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("%%perl\nprint 1", "Couldn't find program: 'perl' (%%perl: the sandbox starts no processes"),
        ("%%script ruby\nputs 1", "Couldn't find program: 'ruby' (%%script ruby: the sandbox starts no processes"),
        ("%%bash --bg\nls", "%%bash --bg: the sandbox starts no processes"),
    ],
)  # fmt: skip
def test_commands_that_would_start_a_process_are_refused(guest, code, message):
    ename, evalue = error(guest.execute(code))
    assert ename == "ShellUnavailableError"
    assert evalue.startswith(message), evalue


@pytest.mark.parametrize("code", ["!sleep 1 &", "files = !sleep 1 &"])
def test_background_jobs_are_refused_in_ipythons_words(guest, code):
    assert error(guest.execute(code)) == ("OSError", "Background processes not supported.")


def test_magics_the_sandbox_cannot_serve(guest):
    alone = guest.execute("%checkpoint keep")
    usage = (
        "%checkpoint keep: put %checkpoint alone in its cell (the kernel takes checkpoints and restores them between "
        "cells, outside the sandbox)"
    )
    assert (alone.reply["ename"], alone.reply["evalue"]) == ("UsageError", usage)
    assert alone.text(2) == f"UsageError: {usage}\n"  # as IPython shows a usage error: a line, no traceback
    ename, evalue = error(guest.execute("%debug", allow_stdin=False))
    assert (ename, evalue) == (
        "StdinNotImplementedError",
        "%debug asks questions at a prompt, but this frontend does not answer prompts (allow_stdin is False)",
    )
    assert error(guest.execute("get_ipython().enable_gui('qt')")) == (
        "RuntimeError", "the 'qt' GUI event loop is not available in the sandbox (no windows); use `%matplotlib inline`"
    )  # fmt: skip
    assert ok(guest.execute("get_ipython().enable_gui('inline')\nget_ipython().enable_gui(None)"))
    assert error(guest.execute("%pip freeze"))[0] == "PackageLoadError"


def test_display_updates_and_clearing_are_iopub_messages(guest):
    code = "from IPython.display import display, clear_output\nh = display('x', display_id='d1')\nh.update('y')\nclear_output(wait=True)"
    served = guest.execute(code)
    assert ok(served)
    assert served.iopub("display_data") == [
        {"data": {"text/plain": "'x'"}, "metadata": {}, "transient": {"display_id": "d1"}}
    ]
    assert served.iopub("update_display_data") == [{"data": {"text/plain": "'y'"}, "metadata": {}, "transient": {"display_id": "d1"}}]  # fmt: skip
    assert served.iopub("clear_output") == [{"wait": True}]


def test_exit_and_the_pager_are_payloads(guest):
    assert ok(guest.execute("exit()"))["payload"] == [{"source": "ask_exit", "keepkernel": False}]
    payload = ok(guest.execute("len?"))["payload"]
    assert [p["source"] for p in payload] == ["page"]
    assert "text/plain" in payload[0]["data"] and payload[0]["start"] == 0


def test_complete_inspect_and_is_complete(guest):
    ok(guest.execute("sbk_value = 1"))
    completion = ok(guest.handle({"op": "complete", "code": "x = sbk_va", "cursor_pos": 10}))
    assert "sbk_value" in completion["matches"]
    assert (completion["cursor_start"], completion["cursor_end"]) == (4, 10)
    types = completion["metadata"]["_jupyter_types_experimental"]
    assert {"start": 4, "end": 10, "text": "sbk_value", "type": "instance"} == {k: v for k, v in types[0].items() if k != "signature"}  # fmt: skip
    assert ok(guest.handle({"op": "complete", "code": "sbk_va"}))["matches"] == ["sbk_value"]  # cursor: the end
    found = ok(guest.handle({"op": "inspect", "code": "sbk_value", "cursor_pos": 3, "detail_level": 0}))
    assert found["found"] is True and "text/plain" in found["data"] and "text/html" not in found["data"]
    assert ok(guest.handle({"op": "inspect", "code": "sbk_nothing"})) == {"status": "ok", "found": False, "data": {}, "metadata": {}}  # fmt: skip
    assert guest.handle({"op": "is_complete", "code": "for i in x:"}).reply == {
        "status": "incomplete",
        "indent": "    ",
    }
    assert guest.handle({"op": "is_complete", "code": "x = 1"}).reply == {"status": "complete"}
    assert guest.handle({"op": "is_complete", "code": "  )"}).reply == {"status": "invalid"}


def test_imports_the_sandbox_lacks_are_asked_of_the_host_first(guest):
    served = guest.execute("import sbk_absent", [{"value": []}])
    assert served.asked("load_packages") == [{"type": "load_packages", "imports": ["sbk_absent"]}]
    assert error(served)[0] == "ModuleNotFoundError"
    refused = guest.execute("import sbk_absent", [{"error": {"type": "PackageError", "message": "not in the index"}}])
    assert error(refused) == ("ModuleNotFoundError", "No module named 'sbk_absent': not in the index")
    again = guest.execute("try:\n    import sbk_absent\nexcept ImportError as e:\n    print(type(e).__name__, e.name)")
    assert not again.events("load_packages")  # asked once per sandbox
    assert again.text() == "ModuleNotFoundError sbk_absent\n"


def test_configure_applies_the_kernels_settings(fresh_guest, tmp_path):
    skills = {"Clock": {"doc": "", "methods": {"now": {"signature": "()", "doc": "Now."}}}}
    request = {
        "op": "configure", "cwd": str(tmp_path), "auto_load_packages": False, "allow_net": ["example.org:443"],
        "mounts": [], "memory_limit_mb": 64, "skills": skills, "max_bytes": 1000, "wheelhouse": True,
    }  # fmt: skip
    assert fresh_guest.handle(request).reply == {"status": "ok"}
    served = fresh_guest.execute(
        "import os\nfrom sandbox_guest import pkgs\n"
        "for fact in (os.getcwd(), os.environ['MPLBACKEND'], pkgs.SETTINGS, device, '_pyodide_core' in dir()):\n"
        "    print(fact)"
    )
    assert served.text().splitlines() == [
        str(tmp_path), "module://matplotlib_inline.backend_inline", "{'auto_load': False, 'allow_net': ['example.org:443'], 'wheelhouse': True}",
        "<device: Clock>", "False",
    ]  # fmt: skip
    assert not served.events("load_packages")  # auto_load_packages is off: an import is not asked for
    called = fresh_guest.execute("device.Clock.now()", [{"value": "noon"}])
    assert called.asked("skill_call") == [{"type": "skill_call", "skill": "Clock", "method": "now", "args": [], "kwargs": {}}]  # fmt: skip
    assert called.iopub("execute_result")[0]["data"] == {"text/plain": "'noon'"}
    assert ok(fresh_guest.execute("%reset -f\ndevice"))  # the device survives %reset
    refused = error(fresh_guest.execute("open('/sbk-no-such-top-level-folder/x', 'w')"))  # the guards are installed
    assert refused == ("OSError", "[Errno 30] Read-only file system: '/sbk-no-such-top-level-folder/x' is not in the sandbox: the "
                       "host's files are not visible here. Host folders visible here (SandboxKernel.mounts): readable: "
                       "none; writable: none. The sandbox's own scratch space (in memory, lost on restart): /tmp, "
                       "/home/pyodide.: '/sbk-no-such-top-level-folder/x'")  # fmt: skip


def test_checkpoint_and_restore_through_the_worker(fresh_guest, tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "kept.txt").write_text("kept")
    fresh_guest.setup(f"from sandbox_guest import checkpoint\ncheckpoint._roots = lambda: [{str(own)!r}]")
    ok(fresh_guest.execute("kept = {'a': [1, 2]}\nimport json as j"))
    taken = fresh_guest.handle({"op": "checkpoint", "part_bytes": 512})
    assert taken.reply == {"status": "ok", "bytes": taken.reply["bytes"], "variables": ["j", "kept"], "variable_count": 2,
                           "files": 1, "not_kept": {}}  # fmt: skip
    blobs = [base64.b64decode(e[1]) for e in taken.log if e[0] == "blob"]
    assert sum(map(len, blobs)) == taken.reply["bytes"] and max(map(len, blobs)) <= 512
    assert all(e[2] == taken.request_id for e in taken.log if e[0] == "blob")
    ok(fresh_guest.execute("kept = None\ndel j"))
    (own / "kept.txt").unlink()
    data = [base64.b64encode(b).decode() for b in blobs]
    restored = fresh_guest.handle({"op": "restore"}, data=data)
    assert restored.reply == {"status": "ok", "variable_count": 2, "files": 1, "not_restored": {}}
    assert fresh_guest.execute("kept, j.__name__").iopub("execute_result")[0]["data"] == {
        "text/plain": "({'a': [1, 2]}, 'json')"
    }
    assert (own / "kept.txt").read_text() == "kept"


def test_checkpoint_and_restore_failures_are_error_replies(fresh_guest, tmp_path):
    fresh_guest.setup(
        f"from sandbox_guest import checkpoint\ncheckpoint._roots = lambda: [{str(tmp_path)!r}]\nhost.max_event_bytes = 10"
    )
    assert fresh_guest.handle({"op": "checkpoint", "part_bytes": 100}).reply == {
        "status": "error", "ename": "ValueError", "evalue": "a part of 100 bytes is larger than the sandbox may send at once",
        "traceback": [],
    }  # fmt: skip
    broken = fresh_guest.handle({"op": "restore"}, data=[base64.b64encode(b"no header line").decode()])
    assert (broken.reply["status"], broken.reply["ename"]) == ("error", "ValueError")
    assert fresh_guest.handle({"op": "restore"}).reply["ename"] == "ValueError"  # no data at all


def test_a_pip_replay_that_fails_again_says_so_on_stderr(guest):
    served = guest.handle(
        {"op": "pip_install", "specs": ["sbk-demo", "other"], "index_urls": None},
        [{"error": {"type": "PackageError", "message": "not in the Pyodide index"}}] * 3,  # both, then each
    )
    assert served.reply == {"status": "ok"}
    assert served.text(2) == "[after the restart, %pip install sbk-demo other failed again: not in the Pyodide index]\n"


def test_interrupting_a_cell_that_awaits(guest):
    served = guest.handle(
        {"op": "execute", "code": "import asyncio\nprint('waiting')\nawait asyncio.sleep(60)", "silent": False},
        interrupt_on="waiting",
    )
    assert error(served) == ("KeyboardInterrupt", "Interrupted by user while awaiting")
    assert served.iopub("error")[0]["traceback"] == ["KeyboardInterrupt: Interrupted by user while awaiting"]
    assert ok(guest.execute("1"))  # the next cell runs


INTERRUPTED = {"ename": "KeyboardInterrupt", "evalue": "Interrupted by user", "traceback": ["KeyboardInterrupt"]}


def test_an_interrupt_around_the_cell_is_still_the_requests_answer(fresh_guest):
    """Landing in IPython's code around the cell (in Pyodide: KeyboardInterrupt; here its twin, the task cancelled)."""
    fresh_guest.setup(
        "import asyncio\nasync def interrupted(req):\n    raise asyncio.CancelledError\napi._execute = interrupted"
    )
    served = fresh_guest.execute("1")
    assert served.reply == {"status": "error", **INTERRUPTED, "user_expressions": {}, "payload": []}
    assert served.iopub("error") == [INTERRUPTED]


def test_an_interrupt_in_the_glue_is_still_the_requests_answer(fresh_guest):
    fresh_guest.setup("async def interrupted(req):\n    raise KeyboardInterrupt\napi._pip_replay = interrupted")
    served = fresh_guest.handle({"op": "pip_install", "specs": ["x"]})
    assert served.reply == {"status": "error", **INTERRUPTED, "user_expressions": {}, "payload": []}
    assert served.iopub("error") == [INTERRUPTED]


def test_output_of_a_background_task_belongs_to_the_request_that_started_it(guest):
    started = guest.execute(
        "import asyncio\ngo = asyncio.Event()\nasync def later():\n    await go.wait()\n    print('from the task')\n"
        "task = asyncio.ensure_future(later())"
    )
    assert ok(started)
    served = guest.execute("go.set()\nawait task\nprint('from the cell')")
    writes = [(e[2], e[3]) for e in served.log if e[0] == "write"]
    assert writes == [("from the task\n", started.request_id), ("from the cell\n", served.request_id)]
