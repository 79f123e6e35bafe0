"""The pure parts of `sandbox-kernel run` and `mcp`: which words are kernel settings, the exit status of a result,
what reaches the terminal. (The command itself, driven for real: tests/test_cli_run.py.)"""

from __future__ import annotations

import pytest

from sandbox_kernel.cli.main import split_command_line
from sandbox_kernel.cli.run import TIMED_OUT, exit_status, printable
from sandbox_kernel.client.results import ErrorInfo, ExecutionResult

A, B = "--SandboxKernel.cell_timeout=5", "--SandboxKernel.memory_limit_mb=512"


@pytest.mark.parametrize(
    ("words", "split"),
    [
        ([A, "job.py", "x"], ([A], [], ["job.py", "x"])),
        (["--timeout", "3", A, "job.py", B], ([A], ["--timeout", "3"], ["job.py", B])),  # B: the script's
        ([A, "-c", "code", B, "y"], ([A], ["-c", "code"], [B, "y"])),  # after -c CODE: the code's arguments
        (["-ccode", B], ([], ["-ccode"], [B])),
        (["--mount", A, B, "-c", "1"], ([B], ["--mount", A, "-c", "1"], [])),  # A: the value of --mount
        (["--timeout=3", "job.py"], ([], ["--timeout=3"], ["job.py"])),
        ([A, "--", B], ([A], [], [B])),
        (["--http", "--port", "0", A], ([A], ["--http", "--port", "0"], [])),  # mcp
    ],
)
def test_settings_are_taken_from_the_commands_own_options_only(words, split):
    assert split_command_line(words) == split


def test_the_exit_status_of_a_result():
    assert exit_status(ExecutionResult(result={"text/plain": "3"}), None) == 3
    assert exit_status(ExecutionResult(result={"text/plain": "0"}), None) == 0
    assert exit_status(ExecutionResult(timed_out=True, error=ErrorInfo("SandboxTimeout", "", "")), 2) == TIMED_OUT
    assert exit_status(ExecutionResult(error=ErrorInfo("KeyboardInterrupt", "", "KeyboardInterrupt")), None) == 130
    assert exit_status(ExecutionResult(error=ErrorInfo("SandboxRestarted", "crashed", "")), None) == 1
    assert exit_status(ExecutionResult(result={"text/plain": "'not a status'"}), None) == 1


def test_what_the_terminal_is_shown_has_no_control_characters():
    assert printable("S.m('a\\nb')") == "S.m('a\\nb')"  # already escaped: kept
    assert printable("x\x1b[2Jy\u202ez\n") == "x\\x1b[2Jy\\u202ez\\n"
