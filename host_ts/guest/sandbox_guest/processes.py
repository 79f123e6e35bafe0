"""`subprocess` and `os.popen`, routed to the sandbox's shell (sh.py): the sandbox starts no processes, so a command
runs there, in the shell, beside nothing; `python3` (and `sys.executable`) runs in this interpreter.

`Popen` runs its command at once, as a process would start at once, unless its stdin is a pipe: then when the input
is complete (`communicate`, `wait`, closing `stdin`). run, call, check_call, check_output, getoutput and
getstatusoutput are CPython's own, built on this Popen.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from typing import IO, Any

from . import sh

_pids = itertools.count(1000)
_CAPTURE_FOLDER = "/tmp/.sandbox-subprocess"  # what a command's output is caught in, for the caller to read
_PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")


_BIN = re.compile(r"^/(?:usr/(?:local/)?)?s?bin/(?P<name>[^/]+)$")


def _program(name: str) -> str:
    """The shell's name for `name`: Python itself, by any of its paths, is `python3`; `/bin/sh`, `/usr/bin/grep`
    and the like are the shell's own commands of that name."""
    if name == sys.executable or _PYTHON.match(name):
        return "python3"
    in_bin = _BIN.match(name)
    return in_bin["name"] if in_bin else name


def command_line(args: Any, shell: bool) -> tuple[str, str]:
    """The script the shell runs for Popen's `args`, and the program's name (for FileNotFoundError)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        return (text, text.split()[0] if text.split() else text) if shell else (shlex.quote(_program(text)), text)
    words = [os.fsdecode(a) for a in args]
    if not words:
        raise IndexError("list index out of range")  # as CPython's Popen says for []
    if shell:
        return " ".join([words[0], *map(shlex.quote, words[1:])]), words[0]
    return shlex.join([_program(words[0]), *words[1:]]), words[0]


class SandboxPopen:
    """subprocess.Popen over the sandbox's shell: the parts of its interface that do not need a running process."""

    def __init__(  # subprocess.Popen's own parameters (those it cannot honour are accepted and ignored)
        self,
        args: Any,
        bufsize: int = -1,
        executable: Any = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        preexec_fn: Any = None,
        close_fds: bool = True,
        shell: bool = False,
        cwd: Any = None,
        env: Mapping[str, str] | None = None,
        universal_newlines: bool | None = None,
        startupinfo: Any = None,
        creationflags: int = 0,
        restore_signals: bool = True,
        start_new_session: bool = False,
        pass_fds: Any = (),
        *,
        text: bool | None = None,
        encoding: str | None = None,
        errors: str | None = None,
        **_: Any,
    ) -> None:
        self.args = args
        self.pid = next(_pids)
        self.returncode: int | None = None
        self._script, self._name = command_line(args, shell)
        self._shell = shell
        self._text = bool(text or universal_newlines or encoding or errors)
        self._encoding, self._errors = encoding or "utf-8", errors or "strict"
        self._where = (None if cwd is None else os.fsdecode(cwd), env)
        self._targets = (stdout, stderr)
        self._input = io.BytesIO()
        self.stdin: _InputPipe | None = _InputPipe(self) if stdin == subprocess.PIPE else None
        self._given_stdin = stdin
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        if self.stdin is None:
            self._run()

    # ---- running ------------------------------------------------------------------------------------------------
    def _read_given_stdin(self) -> bytes:
        given = self._given_stdin
        if given in (None, subprocess.DEVNULL):
            return b""
        if isinstance(given, int):
            return os.read(given, 1 << 30)
        data = given.read()
        return data.encode() if isinstance(data, str) else bytes(data)

    def _run(self) -> None:
        if self.returncode is not None:
            return
        out, err = self._targets
        script, out_file, err_file = self._redirected(out, err)
        stream = out is None and err in (None, subprocess.STDOUT)
        stdin = self._input.getvalue() if self.stdin is not None else self._read_given_stdin()
        if not self._shell and sh.run(f"command -v {shlex.quote(_program(self._name))}").returncode != 0:
            raise FileNotFoundError(
                2, f"No such file or directory (the sandbox runs no native programs; {self._name!r} is not a command "
                "of its shell)", self._name,
            )  # fmt: skip
        try:
            result = sh.run(script, stdin=stdin, cwd=self._where[0], env=self._where[1], stream=stream)
            # (what the shell itself said, e.g. a syntax error, escaped the redirections: it still counts)
            out_bytes = (_take(out_file) if out_file else b"") + result.stdout.encode()
            err_bytes = (_take(err_file) if err_file else b"") + result.stderr.encode()
        finally:
            for path in (out_file, err_file):
                if path:
                    with contextlib.suppress(OSError):
                        os.remove(path)
        self.returncode = result.returncode
        self.stdout = self._deliver(out, out_bytes, sys.stdout)
        self.stderr = self._deliver(err, err_bytes, sys.stderr)

    def _redirected(self, out: Any, err: Any) -> tuple[str, str | None, str | None]:
        """The script with its output sent where the caller asked, and the files that catch what Python reads.

        What Python takes goes through a file: the shell hands a script's own output back as text, but writes a
        command's bytes to a file unchanged (so `gzip -c` gives its bytes). A `shell=True` script is a group
        (`{ ...; }`), whose binary output the shell decodes; a command from an argument list is redirected itself."""
        if out is None and err in (None, subprocess.STDOUT):  # the cell gets it, as it comes
            return (self._script if err is None else f"{{ {self._script}\n}} 2>&1"), None, None
        os.makedirs(_CAPTURE_FOLDER, exist_ok=True)
        out_file = f"{_CAPTURE_FOLDER}/{self.pid}.out" if out is not None else None
        err_file = f"{_CAPTURE_FOLDER}/{self.pid}.err" if err not in (None, subprocess.STDOUT) else None
        redirections = [f"> {out_file}"] if out_file else []
        redirections += ["2>&1"] if err == subprocess.STDOUT else [f"2> {err_file}"] if err_file else []
        body = f"{{ {self._script}\n}}" if self._shell else self._script
        return f"{body} {' '.join(redirections)}", out_file, err_file

    def _deliver(self, target: Any, data: bytes, inherited: IO[str]) -> IO[Any] | None:
        """Put `data` where the caller asked: a pipe (returned, to read), nowhere, a file, or the cell."""
        if target == subprocess.PIPE:
            if self._text:  # as CPython's text mode: decoded, universal newlines
                return io.StringIO(io.TextIOWrapper(io.BytesIO(data), self._encoding, self._errors).read())
            return io.BytesIO(data)
        if target in (subprocess.DEVNULL, subprocess.STDOUT) or not data:
            return None
        if target is None:
            inherited.write(data.decode("utf-8", "replace"))
        elif isinstance(target, int):
            os.write(target, data)
        elif "b" in getattr(target, "mode", "") or isinstance(target, (io.BytesIO, io.BufferedIOBase)):
            target.write(data)
        else:
            target.write(data.decode(getattr(target, "encoding", None) or "utf-8", "replace"))
        return None

    # ---- Popen's interface --------------------------------------------------------------------------------------
    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        if input is not None and self.stdin is not None:
            self.stdin.write(input)
        self._run()
        return (self.stdout.read() if self.stdout else None, self.stderr.read() if self.stderr else None)

    def wait(self, timeout: float | None = None) -> int:
        self._run()
        assert self.returncode is not None
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Nothing is running between calls: there is nothing to signal."""

    terminate = kill = send_signal

    def __enter__(self) -> SandboxPopen:
        return self

    def __exit__(self, *exc: object) -> None:
        self._run()

    def __repr__(self) -> str:
        return f"<SandboxPopen: returncode: {self.returncode} args: {self.args!r}>"


def _take(path: str) -> bytes:
    """The bytes a command wrote to `path` (none if it never ran far enough to open it)."""
    try:
        with open(path, "rb") as caught:
            return caught.read()
    except FileNotFoundError:
        return b""


class _InputPipe(io.RawIOBase):
    """Popen's stdin when it is a pipe: what is written is the command's input; closing it runs the command."""

    def __init__(self, process: SandboxPopen) -> None:
        super().__init__()
        self._process = process

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raw = data.encode(self._process._encoding) if isinstance(data, str) else bytes(data)
        return self._process._input.write(raw)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._process._run()


class _PopenResult(io.StringIO):
    """What os.popen returns: its text, and close() giving None or the wait status, as CPython's does."""

    def __init__(self, text: str, status: int) -> None:
        super().__init__(text)
        self._status = status

    def close(self) -> int | None:  # type: ignore[override]  # os.popen's close returns the status
        super().close()
        return self._status or None


def popen(cmd: str, mode: str = "r", buffering: int = -1) -> IO[str]:
    """os.popen: the command runs in the sandbox's shell at once; "r" reads its output ("w" is not supported)."""
    if mode not in ("r", "rt"):
        raise ValueError(f"os.popen in the sandbox reads a command's output (mode 'r'), not {mode!r}")
    result = sh.run(cmd)
    sys.stderr.write(result.stderr)
    return _PopenResult(result.stdout, (result.returncode & 0xFF) << 8)


# The process primitives the guest's os has but cannot carry out (Emscripten answers ENOSYS or ENOEXEC): os.spawn*,
# os.exec* and multiprocessing's fork all end in one of these.
NO_PROCESS = ("fork", "forkpty", "execv", "execve")


def _no_process(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(
            errno.ENOSYS,
            f"os.{name}: the sandbox starts no processes; its shell runs commands (subprocess.run, os.system, !cmd), "
            "and python3 in it runs here",
        )

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def install() -> None:
    """Route subprocess.Popen and os.popen to the shell, and make fork and exec say why they fail (once, at boot)."""
    subprocess.Popen = SandboxPopen  # type: ignore[misc, assignment]
    os.popen = popen  # type: ignore[assignment]
    for name in NO_PROCESS:
        if hasattr(os, name):  # (one the os lacks stays missing: code tests for it with hasattr)
            setattr(os, name, _no_process(name))
