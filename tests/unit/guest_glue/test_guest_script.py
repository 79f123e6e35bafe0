"""The guest's script runner (sandbox_guest/script.py), which `sandbox-kernel run` uses: code run as `python` runs
it, served by the real glue and IPython shell under CPython (conftest.Guest). tests/test_cli_run.py drives the
command itself."""

from __future__ import annotations

import pytest

from sandbox_kernel.cli.run import script_cell


def run(guest, source: str, filename: str = "<string>", argv: list[str] | None = None, answers=None):
    return guest.execute(script_cell(source, filename, argv or ["-c"]), answers, allow_stdin=True)


def status(served) -> str:
    """The exit status the runner gave (the cell's value)."""
    assert served.reply["status"] == "ok", served.reply
    [result] = served.iopub("execute_result")
    return result["data"]["text/plain"]


def without_carets(text: str) -> list[str]:
    """The lines of a traceback, less the lines of `~^` marks (Python 3.11+ only)."""
    return [line for line in text.splitlines() if line.strip(" ~^")]


@pytest.mark.parametrize(
    ("source", "code", "stderr"),
    [
        ("import sys\nsys.exit(3)", "3", ""),
        ("import sys\nsys.exit(256 + 7)", "7", ""),
        ("import sys\nsys.exit('bye')", "1", "bye\n"),
        ("import sys\nsys.exit()", "0", ""),
        ("import sys\nsys.exit(None)", "0", ""),
        ("raise SystemExit(True)", "1", ""),
        ("exit(4)", "4", ""),
        ("quit()", "0", ""),
        ("print('done')", "0", ""),
    ],
)
def test_sys_exit_ends_the_code_with_pythons_status_and_no_warning(guest, source, code, stderr):
    served = run(guest, source)
    assert status(served) == code
    assert served.text(2) == stderr
    assert served.reply["payload"] == []  # exit() is python's, not IPython's request to stop the kernel


def test_an_uncaught_error_is_printed_as_python_prints_it_and_means_1(guest):
    served = run(guest, "def f(x):\n    return 1 / x\nf(0)")
    assert status(served) == "1"
    assert without_carets(served.text(2)) == [
        "Traceback (most recent call last):",
        '  File "<string>", line 3, in <module>',
        "    f(0)",
        '  File "<string>", line 2, in f',
        "    return 1 / x",
        "ZeroDivisionError: division by zero",
    ]
    assert served.iopub("error") == []  # nothing in IPython's words


def test_a_script_is_named_by_its_path_with_file_and_argv_as_python_sets_them(guest):
    path = "/home/me/job.py"
    served = run(guest, "import sys\nprint(__name__, __file__, sys.argv)\nraise KeyError('k')", path, ["job.py", "-x"])
    assert status(served) == "1"
    assert served.text(1) == f"__main__ {path} ['job.py', '-x']\n"
    assert without_carets(served.text(2)) == [
        "Traceback (most recent call last):",
        f'  File "{path}", line 3, in <module>',
        "    raise KeyError('k')",
        "KeyError: 'k'",
    ]


def test_a_syntax_error_names_the_line_as_python_does(guest):
    served = run(guest, "x = 1\ny = (")
    assert status(served) == "1"
    lines = served.text(2).splitlines()
    assert lines[0] == '  File "<string>", line 2' and lines[-1].startswith("SyntaxError: ")


def test_chained_errors_show_the_code_frames_only(guest):
    served = run(
        guest, "try:\n    open('/no/such/file')\nexcept OSError as e:\n    raise RuntimeError('wrapped') from e"
    )
    text = served.text(2)
    assert "sandbox_guest" not in text and "IPython" not in text, text
    assert "The above exception was the direct cause of the following exception:" in text
    assert text.splitlines()[-1] == "RuntimeError: wrapped"


def test_a_hook_the_script_sets_is_called_as_python_calls_it(guest):
    served = run(guest, "import sys\nsys.excepthook = lambda t, v, tb: print('hooked', t.__name__, tb.tb_lineno)\n1/0")
    assert (status(served), served.text(1), served.text(2)) == ("1", "hooked ZeroDivisionError 3\n", "")


def test_an_interrupt_is_raised_on_for_the_kernel_and_shown_as_python_shows_it(guest):
    served = run(guest, "def loop():\n    raise KeyboardInterrupt\nloop()")
    assert served.reply["status"] == "error" and served.reply["ename"] == "KeyboardInterrupt"
    assert without_carets("\n".join(served.reply["traceback"])) == [
        "Traceback (most recent call last):",
        '  File "<string>", line 3, in <module>',
        "    loop()",
        '  File "<string>", line 2, in loop',
        "    raise KeyboardInterrupt",
        "KeyboardInterrupt",
    ]


def test_the_packages_the_code_imports_are_asked_for_first(guest):
    served = run(guest, "import sbk_absent_pkg", answers=[{"error": {"type": "PackageError", "message": "not here"}}])
    assert served.asked("load_packages") == [{"type": "load_packages", "imports": ["sbk_absent_pkg"]}]
    assert status(served) == "1"  # as python: the import fails where it runs, with the loader's reason
    assert served.text(2).splitlines()[-1] == "ModuleNotFoundError: No module named 'sbk_absent_pkg': not here"


def test_the_glues_own_errors_are_named_as_the_code_knows_them(guest):
    served = run(guest, "input()", answers=[{"value": "\x04"}])
    assert status(served) == "1"
    assert served.text(2).splitlines()[-1] == "EOFError: EOF when reading a line"  # not sandbox_guest.api.EOFError
