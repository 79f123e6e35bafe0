"""Shell commands, run by the worker's shell (just-bash on Pyodide's own file system): for `!cmd`, `%%bash`,
`subprocess` and `os.system`. The shell sees the files Python sees, under the same rules; `python3` in it runs
here, in a fresh namespace."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import sys
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import _host

PYTHON_EXECUTABLE = "/usr/bin/python3"  # sys.executable in the sandbox: no file, a name the shell runs as python3
# sys.executable where a command starts (`!{sys.executable} x.py`, `cd d && /usr/bin/python3 -c ...`): the shell's
# python3. (A file of that name would be found on the shell's PATH before its own python3 command.)
_EXECUTABLE_AS_COMMAND = re.compile(r"(^|[;&|(`\n]|\$\()(\s*)" + re.escape(PYTHON_EXECUTABLE) + r"(?=\s|$)")

_python_command: Any = None  # the PyProxy of run_python_command the shell calls back (made once)
_write_refusal: Any = None  # the PyProxy of guards.write_refusal, with which the shell words a refused write
_interrupted_in_python = False  # a `python3` run inside the script took the interrupt (Python consumed its word)


@dataclass(frozen=True)
class ShellRun:
    """What one script did: what it printed that was not streamed to the cell, and its exit status."""

    stdout: str
    stderr: str
    returncode: int


def run(
    script: str,
    *,
    stdin: bytes = b"",
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stream: bool = False,
) -> ShellRun:
    """Run `script` in the sandbox's shell and wait for it; `stream`: its output goes to the cell as it comes.

    An interrupt (or cell_timeout) of the script raises KeyboardInterrupt here, in the cell.
    """
    __tracebackhide__ = True
    from pyodide.ffi import create_proxy, run_sync

    from .guards import LIMITS, write_refusal

    global _python_command, _write_refusal, _interrupted_in_python
    _interrupted_in_python = False
    if _python_command is None:
        _python_command = create_proxy(run_python_command)
    if _write_refusal is None:
        _write_refusal = create_proxy(write_refusal)
    _host.flush_streams()
    request = {
        "script": _EXECUTABLE_AS_COMMAND.sub(r"\1\2python3", script),
        "cwd": os.getcwd() if cwd is None else os.fspath(cwd),
        "env": {str(k): str(v) for k, v in (os.environ if env is None else env).items()},
        "stdin": stdin.decode("latin-1"),
        "stream": stream,
        "allowNet": list(LIMITS.allow_net),
    }
    payload = json.dumps(request)
    _within_the_shell_limit(len(payload))
    answer = json.loads(run_sync(_host.shell(payload, _python_command, _write_refusal)))
    if answer["interrupted"] or _interrupted_in_python:
        raise KeyboardInterrupt
    return ShellRun(str(answer["stdout"]), str(answer["stderr"]), int(answer["exitCode"]))


def _within_the_shell_limit(size: int) -> None:
    """Refuse a run whose script, environment and stdin would not fit the shell: they cross into the worker's JS heap
    whole (as JSON), where no Python MemoryError can catch them."""
    from .guards import LIMITS

    limit = _host.shell_limit_bytes()
    if size > limit:
        raise MemoryError(
            f"the shell command's script, environment and stdin take {size / 2**20:.1f} MiB; the sandbox's shell "
            f"takes at most {limit / 2**20:g} MiB at once (its share of SandboxKernel.memory_limit_mb="
            f"{LIMITS.memory_limit_mb}; raise that setting to allow more)"
        )


@contextlib.contextmanager
def _as_a_process(
    argv: list[str], stdin: str, cwd: str, env: Mapping[str, str]
) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """sys.argv, stdin, stdout, stderr, the working folder and os.environ of a `python3` run, put back after."""
    out, err = io.StringIO(), io.StringIO()
    saved = (sys.argv, sys.stdin, os.getcwd(), dict(os.environ))
    sys.argv, sys.stdin = argv, io.StringIO(stdin)
    os.environ.clear()
    os.environ.update(env)
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.argv, sys.stdin = saved[0], saved[1]
        os.environ.clear()
        os.environ.update(saved[3])
        with contextlib.suppress(OSError):
            os.chdir(saved[2])


def _exit_code(exit: SystemExit, err: io.StringIO) -> int:
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code & 0xFF
    print(exit.code, file=err)
    return 1


def run_python_command(argv_json: str, stdin: str, cwd: str, env_json: str) -> str:
    """`python3 ARGS...` from the shell: `-c CODE`, `-m MODULE`, `SCRIPT` or code on stdin, in a fresh `__main__`
    namespace of this interpreter (no new process). Returns the JSON of just-bash's ExecResult."""
    global _interrupted_in_python
    args: list[str] = json.loads(argv_json)
    env: dict[str, str] = json.loads(env_json)
    if args[:1] == ["-c"] and len(args) > 1:
        argv, how = ["-c", *args[2:]], ("code", args[1], "<string>")
    elif args[:1] == ["-m"] and len(args) > 1:
        argv, how = [args[1], *args[2:]], ("module", args[1], "")
    elif args and args[0] != "-":
        argv, how = list(args), ("path", args[0], "")
    else:
        argv, how = ["-", *args[1:]], ("code", stdin, "<stdin>")
    code = 0
    with _as_a_process(argv, stdin if how[2] != "<stdin>" else "", cwd, env) as (out, err):
        try:
            if how[0] == "code":
                exec(compile(how[1], how[2], "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            elif how[0] == "module":
                runpy.run_module(how[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(how[1], run_name="__main__")
        except SystemExit as exit:
            code = _exit_code(exit, err)
        except KeyboardInterrupt:
            _interrupted_in_python = True
            raise
        except BaseException:
            traceback.print_exc(file=err)
            code = 1
    return json.dumps({"stdout": out.getvalue(), "stderr": err.getvalue(), "exitCode": code})
