"""The IPython shell that runs guest cells, adapted to the sandbox."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from IPython.core import error, page
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.utils.text import LSString, SList

from . import _host
from ._protocol import Event
from .cleantb import GLUE, INTERNAL, CleanTraceback, without_frames
from .display import BridgeDisplayHook, BridgeDisplayPublisher
from .tbsources import forget_cell_sources

if TYPE_CHECKING:
    from IPython.core.payload import PayloadManager


class ShellUnavailableError(RuntimeError):
    """Raised for what needs a real process (a native program's magic, a job in the background): the sandbox has
    none."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows just the message: the frames would only be the sandbox's own."""
        return [f"{type(self).__name__}: {self}"]


_PIP_INSTALL = re.compile(
    r"^!!?\s*(?:(?:\S*python[0-9.]*|\{sys\.executable\})\s+)?(?:-m\s+)?pip3?\s+install\s+(?P<args>.+)$"
)
_SHELLS = frozenset({"bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/usr/bin/env bash", "/usr/bin/env sh"})
_PYTHON = re.compile(r"^(?:/usr/bin/env\s+)?(?:\S*/)?python(?:3(?:\.\d+)?)?$")  # python, python3, /usr/bin/python3.14
# IPython's Linux aliases (`ls`, `ll`, ... typed without `%`), in options the sandbox's `ls` has (no --color, -o).
SHELL_ALIASES = (
    ("ls", "ls -F"),
    ("ll", "ls -F -l"),
    ("lf", "ls -F -l %l | grep ^-"),
    ("lk", "ls -F -l %l | grep ^l"),
    ("ldir", "ls -F -l %l | grep /$"),
    ("lx", "ls -F -l %l | grep ^-..x"),
)


class _ElapsedTime:
    """The `time` module as IPython's %time sees it: `time()` is `perf_counter()`.

    %time takes the wall time as the difference of two `time.time()`; the sandbox's wall clock is JavaScript's
    Date.now(), in 1 ms steps (time.get_clock_info('time').resolution says so), which printed `Wall time: 0 ns` or
    `1e+03 µs`. perf_counter measures the same elapsed time in steps of well under a microsecond.
    """

    time = staticmethod(time.perf_counter)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _time_magic_uses_perf_counter() -> None:
    from IPython.core.magics import execution

    setattr(execution, "time", _ElapsedTime())  # noqa: B010  # the module the magics read `time.time` from


def _find_script(name: str) -> str:
    """IPython's file finder for %run, with the sandbox's hint when the path climbs above the working folder."""
    from IPython.utils.path import get_py_filename

    from .guards import above_hint

    try:
        found: str = get_py_filename(name)
    except OSError as exc:
        hint = above_hint(name)
        if hint is None:
            raise
        raise OSError(f"{exc} {hint}") from None
    return found


def no_shell(what: str) -> ShellUnavailableError:
    return ShellUnavailableError(
        f"{what}: the sandbox starts no processes; its shell (bash with coreutils, sed, awk, jq, tar, curl...) "
        "runs `!cmd`, `%%bash` and subprocess commands, and `python3` in it runs here"
    )


def no_program(program: str, shown: str) -> ShellUnavailableError:
    """A script magic's program (%%perl, %%script ruby): ipykernel's words when it is missing, then why."""
    return ShellUnavailableError(f"Couldn't find program: {program!r} ({no_shell(shown)})")


def pip_install_args(command: str) -> str | None:
    """The arguments of a `pip install` shell command (`!pip install x`, `python -m pip install x`), else None."""
    pip = _PIP_INSTALL.match("!" + command.strip())
    return pip["args"].strip() if pip else None


def _parse_script_options(line: str, magic: str) -> dict[str, Any]:
    """IPython's options of %%bash / %%script, wherever they stand (as its parse_known_args): --out VAR, --err VAR,
    --raise-error; the other words are the command (program and arguments). --bg and --proc need jobs."""
    words = shlex.split(line)
    options: dict[str, Any] = {"out": None, "err": None, "raise_error": False, "program": None, "args": []}
    command: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("--out", "--err", "--proc"):
            if i + 1 >= len(words):
                raise UsageError(f"%%{magic}: {word} needs a variable name")
            if word == "--proc":
                raise no_shell(f"%%{magic} --proc")
            options[word[2:]] = words[i + 1]
            i += 2
            continue
        if word == "--raise-error":
            options["raise_error"] = True
        elif word == "--bg":
            raise no_shell(f"%%{magic} --bg")
        elif word != "--no-raise-error":
            command.append(word)
        i += 1
    if command:
        options["program"], options["args"] = command[0], command[1:]
    return options


@magics_class
class ShellMagics(Magics):
    """%%bash, %%sh, %%python3 and %%script bash|python3: the cell runs in the sandbox's shell (Python in a fresh
    namespace), its output streamed as it comes."""

    def _run_script(self, magic: str, line: str, cell: str) -> None:
        from . import sh

        options = _parse_script_options(line, magic)
        if magic == "script" and options["program"] is None:
            raise UsageError("%%script needs the program to run the cell, e.g. %%script bash")
        program = magic if magic != "script" else options["program"]
        if magic != "script" and options["program"] is not None:  # %%python3 -c ...: the words are the program's
            options["args"] = [options["program"], *options["args"]]
        captured = options["out"] is not None or options["err"] is not None
        if _PYTHON.match(program):
            command = shlex.join(["python3", *options["args"]])
            result = sh.run(command, stdin=cell.encode(), stream=not captured)
        elif program in _SHELLS and options["args"]:  # the cell is the program's stdin, as for any program
            result = sh.run(
                shlex.join([program.split()[-1], *options["args"]]), stdin=cell.encode(), stream=not captured
            )
        elif program in _SHELLS:
            result = sh.run(cell, stream=not captured)
        else:
            raise no_program(program, f"%%script {program}")
        for name, text, stream in (("out", result.stdout, sys.stdout), ("err", result.stderr, sys.stderr)):
            if options[name] is not None:
                assert self.shell is not None
                self.shell.user_ns[options[name]] = text
            elif text:
                stream.write(text)
        if options["raise_error"] and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, cell, result.stdout, result.stderr)

    @cell_magic
    def bash(self, line: str, cell: str) -> None:
        self._run_script("bash", line, cell)

    @cell_magic
    def sh(self, line: str, cell: str) -> None:
        self._run_script("sh", line, cell)

    @cell_magic
    def script(self, line: str, cell: str) -> None:
        self._run_script("script", line, cell)

    @cell_magic
    def python(self, line: str, cell: str) -> None:
        self._run_script("python", line, cell)

    @cell_magic
    def python3(self, line: str, cell: str) -> None:
        self._run_script("python3", line, cell)


@magics_class
class KernelMagics(Magics):
    """Magics the kernel itself serves when one is alone in its cell; here they can only say so."""

    def _alone(self, name: str, line: str) -> None:
        raise error.UsageError(
            f"%{name} {line}".strip() + f": put %{name} alone in its cell (the kernel takes checkpoints and restores "
            "them between cells, outside the sandbox)"
        )

    @line_magic
    def checkpoint(self, line: str) -> None:
        self._alone("checkpoint", line)

    @line_magic
    def restore(self, line: str) -> None:
        self._alone("restore", line)


PROCESS_MAGICS = frozenset(
    {"python2", "pypy", "perl", "ruby", "killbgscripts", "edit", "ed"}
)  # fmt: skip
SCRIPT_PROGRAMS = frozenset({"python2", "pypy", "perl", "ruby"})  # IPython's script magics of programs it lacks
PROMPT_MAGICS = frozenset({"debug"})  # the debugger reads commands at a prompt until told to quit


class StdinNotImplementedError(CleanTraceback, error.StdinNotImplementedError):
    """IPython's error (same name, caught the same), shown without the sandbox's frames."""


class SandboxShell(InteractiveShell):
    """InteractiveShell whose output goes to the kernel over the bridge."""

    payload_manager: PayloadManager  # an annotation only (IPython's trait may be None; InteractiveShell makes one)
    last_error: dict[str, Any] | None = None
    _shown_exception: BaseException | None = None  # the exception last_error shows
    interrupt_requested = False
    allow_stdin = False  # whether the current request's frontend answers prompts

    def init_alias(self) -> None:
        super().init_alias()
        assert self.alias_manager is not None
        for name, command in SHELL_ALIASES:  # (IPython picked BSD's `ls -G` for Pyodide's platform, emscripten)
            self.alias_manager.define_alias(name, command)

    def init_magics(self) -> None:
        super().init_magics()
        self.register_magics(ShellMagics)
        self.register_magics(KernelMagics)
        from .ipykernel_magics import IpykernelMagics
        from .pkgs import PipMagics

        self.register_magics(IpykernelMagics)
        self.register_magics(PipMagics)
        self._hint_run_misses()
        _time_magic_uses_perf_counter()

    def _hint_run_misses(self) -> None:
        """`%run ../x.py` that misses above the working folder says how to show that folder (as open() does)."""
        original = self.find_line_magic("run")

        def run(parameter_s: str = "", runner: Any = None) -> Any:
            return original(parameter_s, runner, file_finder=_find_script)

        run.__doc__ = original.__doc__
        self.register_magic_function(run, "line", "run")  # type: ignore[arg-type]  # IPython types it oddly

    # IPython registers some magics lazily (the script magics on first use), so a magic removed from the
    # table can come back: those that need a process, or a person at a prompt, are refused here by name.
    def run_line_magic(self, magic_name: str, line: str, _stack_depth: int = 1) -> Any:
        self._refuse_magic(magic_name, line)
        return super().run_line_magic(magic_name, line, _stack_depth + 1)

    def run_cell_magic(self, magic_name: str, line: str, cell: str) -> Any:
        self._refuse_magic(magic_name, line, cell=True)
        return super().run_cell_magic(magic_name, line, cell)

    def debugger(self, force: bool = False) -> None:
        """The post-mortem debugger (%debug, %pdb on) reads commands at a prompt: only where prompts are answered."""
        if self.allow_stdin:
            super().debugger(force)
        elif force or self.call_pdb:
            print("[the debugger was not started: this frontend does not answer prompts (allow_stdin is False)]")

    def _refuse_magic(self, name: str, line: str, cell: bool = False) -> None:
        __tracebackhide__ = True
        shown = f"{'%%' if cell else '%'}{name} {line}".strip()
        if name in SCRIPT_PROGRAMS and cell:
            raise no_program(name, shown)
        if name in PROCESS_MAGICS:
            raise no_shell(shown)
        if name in PROMPT_MAGICS and not self.allow_stdin:
            raise StdinNotImplementedError(
                f"{shown} asks questions at a prompt, but this frontend does not answer prompts (allow_stdin is False)"
            )

    def init_hooks(self) -> None:
        super().init_hooks()
        # `obj?`, `%page` etc. go to the frontend's pager as an execute_reply payload, as in ipykernel.
        self.set_hook("show_in_pager", page.as_hook(self._page), 99)

    def _page(self, strng: str | dict[str, Any], start: int = 0, *args: Any, **kwargs: Any) -> None:
        data = strng if isinstance(strng, dict) else {"text/plain": strng}
        self.payload_manager.write_payload({"source": "page", "data": data, "start": max(0, start)})

    def excepthook(self, etype: type, value: BaseException, tb: Any) -> None:
        """Silent: Pyodide calls sys.excepthook whenever a Python error crosses into JavaScript.

        That happens on the way out of `run_sync` (as in `%pip install`), where the error is then
        raised again in the cell and shown once by the shell; IPython's own hook would show it twice.
        """

    def showtraceback(self, exc_tuple: Any = None, *args: Any, **kwargs: Any) -> None:
        """Tell the kernel first when the cell got its interrupt: an interrupt sent again while the traceback is
        formatted (slow the first time) would spoil its display."""
        etype = (exc_tuple or sys.exc_info())[0]
        if isinstance(etype, type) and (
            issubclass(etype, KeyboardInterrupt)
            or (self.interrupt_requested and issubclass(etype, asyncio.CancelledError))
        ):
            _host.emit({"type": Event.INTERRUPT_TAKEN})
        super().showtraceback(exc_tuple, *args, **kwargs)

    def _get_exc_info(self, exc_tuple: Any = None) -> tuple[Any, Any, Any]:
        """The exception to show, without the glue's frames (an error its open() or os wrappers raise shows the
        user's line, as under ipykernel); also what %debug and sys.last_traceback get."""
        etype, value, tb = super()._get_exc_info(exc_tuple)
        # An interrupt shows the user's frames only: where in IPython it landed (e.g. its run_cell_magic, under a
        # %%bash cell) says nothing, and its first display would parse IPython's largest file (about 1 s).
        internal = INTERNAL if isinstance(etype, type) and issubclass(etype, KeyboardInterrupt) else GLUE
        kept = without_frames(tb, internal) or tb  # all the glue's: a bug in it, shown whole
        if kept is not tb:
            value = value.with_traceback(kept)
            sys.last_traceback = kept
        return etype, value, kept

    def _showtraceback(self, etype: type, evalue: BaseException, stb: list[str]) -> None:
        shown = evalue
        if self.interrupt_requested and issubclass(etype, asyncio.CancelledError):
            # An interrupt while the cell awaited: report it as ipykernel would.
            etype, evalue = KeyboardInterrupt, KeyboardInterrupt("Interrupted by user while awaiting")
            stb = [f"KeyboardInterrupt: {evalue}"]
        from .guards import budget_error

        budget = budget_error(etype, evalue)
        if budget is not None:
            etype, evalue = type(budget), budget
            stb = [*stb[:-1], f"{etype.__name__}: {evalue}"]
        error = {"traceback": stb, "ename": etype.__name__, "evalue": str(evalue)}
        self.last_error = error
        self._shown_exception = shown
        _host.iopub("error", error)
        forget_cell_sources()  # stack_data kept this cell's parse for good: a leak per error (tbsources.py)

    def _format_exception_for_storage(self, exception: BaseException, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The error as it was just shown: IPython would format the traceback a second time, for its history."""
        if exception is self._shown_exception and self.last_error is not None:
            return dict(self.last_error)
        return super()._format_exception_for_storage(exception, *args, **kwargs)  # type: ignore[no-any-return]

    def ask_exit(self) -> None:
        """`exit()` / `quit()`: ask the frontend to shut the kernel down, as ipykernel does."""
        self.payload_manager.write_payload({"source": "ask_exit", "keepkernel": False})

    def system_piped(self, cmd: str) -> None:
        """`!cmd`, `%system`: run in the sandbox's shell, its output streamed; the status in `_exit_code`."""
        __tracebackhide__ = True
        from . import sh

        if cmd.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")  # IPython's own words: it runs none either
        expanded = self.var_expand(cmd, depth=1)
        pip = pip_install_args(expanded.replace(sys.executable, "python"))  # `!{sys.executable} -m pip ...` too
        if pip is not None:  # as %pip install does (into the sandbox, replayed after a restart)
            self.run_line_magic("pip", f"install {pip}")
            self.user_ns["_exit_code"] = 0
            return
        result = sh.run(expanded, stream=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        self.user_ns["_exit_code"] = result.returncode

    system_raw = system_piped
    system = system_piped

    def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> SList | LSString:
        """`x = !cmd`, `!!cmd`, `%sx`: what the command printed (stderr too, in order), as IPython gives it."""
        __tracebackhide__ = True
        from . import sh

        expanded = self.var_expand(cmd, depth=depth + 1)
        if expanded.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")  # IPython's own words: it runs none either
        out = sh.run(f"{{ {expanded}\n}} 2>&1").stdout
        return SList(out.splitlines()) if split else LSString(out)

    def enable_gui(self, gui: str | None = None) -> None:
        """No event loop is needed for inline output (`%matplotlib inline` asks for none); others cannot run here."""
        if gui in (None, "inline"):
            return
        raise RuntimeError(
            f"the {gui!r} GUI event loop is not available in the sandbox (no windows); use `%matplotlib inline`"
        )


def make_shell() -> SandboxShell:
    """Create the one shell of this sandbox."""
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "neutral"  # readable on light (JupyterLab) and dark backgrounds
    config.InteractiveShell.xmode = "Context"
    # Libraries tell a notebook from a terminal by this section, which ipykernel's app adds (tqdm.auto then draws
    # widget bars, Plotly picks its notebook renderer): the sandbox's output goes to a notebook too.
    config.IPKernelApp.sandboxed = True
    shell = SandboxShell.instance(
        config=config,
        displayhook_class=BridgeDisplayHook,
        display_pub_class=BridgeDisplayPublisher,
    )
    assert shell.extension_manager is not None  # InteractiveShell makes one
    shell.extension_manager.load_extension("storemagic")  # as ipykernel's app does (its default extension): %store
    return shell
