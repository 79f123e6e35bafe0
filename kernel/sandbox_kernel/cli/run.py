"""`sandbox-kernel run`: a script, or `-c` code, in a fresh sandbox, as `python` runs it.

Its arguments are the code's sys.argv, this command's stdin feeds input() and sys.stdin, the code's stdout and
stderr pass through (the kernel's notes go to stderr), and the exit status is python's: 0, 1 for an uncaught
error, sys.exit's status; 124 when --timeout stopped it, 130 for an interrupt, 2 for what could not be started.
The code runs through the guest's script runner (host_ts/guest/sandbox_guest/script.py), not as a cell.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sandbox_kernel.client.approvals import ApprovalRequest, Refused, allow_hint

if TYPE_CHECKING:
    from sandbox_kernel.client.results import ExecutionResult

NAME = "sandbox-kernel run"
TIMED_OUT = 124  # as timeout(1) exits
INTERRUPTED = 130  # as a shell reports python ended by Ctrl-C
T = TypeVar("T")
# The kernel settings this command has a flag of its own for (the others: --SandboxKernel.name=value)
FLAGS = {"cell_timeout": "--timeout", "mounts": "--mount", "allow_net": "--allow-net",
         "working_folder": "--working-folder"}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run the script or `-c` code of `args` in a fresh sandbox; the exit status."""
    from sandbox_kernel.client.agent import KernelDied, KernelNotInstalled, SandboxSettingsError
    from sandbox_kernel.client.sync_sandbox import Sandbox
    from sandbox_kernel.jupyter.setting_sources import argument, of_command

    code = _code(args)
    if isinstance(code, int):
        return code
    given = {"cell_timeout": args.timeout, "mounts": args.mount, "allow_net": args.allow_net,
             "working_folder": args.working_folder}  # fmt: skip
    options = {
        **{name: value for name, value in given.items() if value},  # not given: the kernel's configuration says
        "input": _read_line,
        "approver": ask_terminal if sys.stdin.isatty() else no_terminal,
        # the code's output, not the kernel's log; its messages name this command's flags
        "extra_arguments": [
            "--log-level=CRITICAL",
            *args.settings,
            argument(of_command(NAME, args.settings, FLAGS, (n for n, v in given.items() if v))),
        ],
    }
    try:
        with Sandbox(**options) as sandbox:
            result = sandbox.run(script_cell(*code), on_stdout=_write_out, on_stderr=_write_err, on_notice=_notice)
    except KernelNotInstalled as exc:
        return _fail(str(exc), 2)
    except SandboxSettingsError as exc:
        for problem in exc.problems:
            print(f"{NAME}: bad setting: {problem}", file=sys.stderr)
        return 2
    except KernelDied as exc:
        died = f" (exit code {exc.exit_code})" if exc.exit_code is not None else ""
        return _fail(f"the kernel process exited{died} before the code finished", 1)
    except KeyboardInterrupt:  # Ctrl-C: the kernel, in this command's process group, got it too and stops
        print("KeyboardInterrupt", file=sys.stderr)
        return INTERRUPTED
    return exit_status(result, args.timeout)


def _code(args: argparse.Namespace) -> tuple[str, str, list[str]] | int:
    """The source, the file name tracebacks give it and sys.argv, as python takes them; else a status."""
    if args.code is not None:  # as with python -c, what follows are the code's arguments
        return args.code, "<string>", ["-c", *args.arguments]
    if args.script is None:
        return _fail("give a script file or -c CODE", 2)
    try:
        source = Path(args.script).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return _fail(f"can't open file {args.script!r}: {exc}", 2)
    return source, os.path.abspath(args.script), [args.script, *args.arguments]  # python's __file__: absolute


def script_cell(source: str, filename: str, argv: list[str]) -> str:
    """The one-line cell that has the guest's script runner run the code (its value: the exit status)."""
    return f"await __import__('sandbox_guest.script', fromlist=['run']).run({source!r}, {filename!r}, {argv!r})"


def exit_status(result: ExecutionResult, timeout: float | None) -> int:
    """The status of the run (its traceback or the reason it stopped said on stderr)."""
    if result.timed_out:
        limit = (
            f"--timeout {timeout:g}s"
            if timeout is not None
            else "the kernel's cell_timeout (--timeout SECONDS sets it)"
        )
        return _fail(f"the code ran past {limit} and was stopped", TIMED_OUT)
    if result.error is None:
        status = result.text or ""
        return int(status) & 0xFF if status.isdigit() else _fail("the sandbox gave no exit status", 1)
    print(result.error.traceback or f"{result.error.ename}: {result.error.evalue}", file=sys.stderr)
    return INTERRUPTED if result.error.ename == "KeyboardInterrupt" else 1


def _fail(message: str, status: int) -> int:
    print(f"{NAME}: {message}", file=sys.stderr)
    return status


def _write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _notice(kind: str, text: str) -> None:
    """The kernel's notes go to stderr; its timeout note is said once, in this command's words (exit_status)."""
    if kind != "timeout":
        _write_err(text)


async def _read_line(prompt: str) -> str | None:
    """One line of this command's stdin for the guest (None at its end); the prompt goes where python puts it."""
    return await in_daemon_thread(_line, prompt)


def _line(prompt: str) -> str | None:
    if prompt:
        _write_out(prompt)
    line = sys.stdin.readline()
    return line.removesuffix("\n") if line else None


def no_terminal(request: ApprovalRequest) -> Refused:
    """Without a terminal there is nobody to ask: refused, saying how to allow the call."""
    return Refused(f"no terminal to ask on ({NAME} was not started with a terminal as stdin); {allow_hint(request)}")


async def ask_terminal(request: ApprovalRequest) -> bool | Refused:
    """Ask the person at the terminal (stdin) about one skill call, shown whole: y/N."""
    call = printable(f"{request.skill}.{request.method}({request.shown})")
    question = f"{NAME}: the code asks to call a skill whose policy is 'ask': {call}\nAllow it? [y/N] "
    answer = await in_daemon_thread(_answer, question)
    if answer is None:
        return Refused("no answer at the terminal (end of input)")
    return True if answer.strip().lower() in ("y", "yes") else Refused("the person at the terminal said no")


def _answer(question: str) -> str | None:
    _write_err(question)
    line = sys.stdin.readline()
    return line if line else None


def printable(text: str) -> str:
    """`text` safe for a terminal: every character that is not printable escaped, as Python escapes it."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


async def in_daemon_thread(work: Callable[[str], T], argument: str) -> T:
    """`work(argument)` in a daemon thread: a read the kernel gave up on (a timeout) never holds up the exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def target() -> None:
        try:
            outcome = functools.partial(done.set_result, work(argument))
        except BaseException as exc:  # passed to the waiting coroutine
            outcome = functools.partial(done.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(lambda: done.done() or outcome())

    threading.Thread(target=target, name="sandbox-kernel-run-prompt", daemon=True).start()
    return await done
