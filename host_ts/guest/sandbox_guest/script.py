"""`sandbox-kernel run`: a script, or `-c` code, run as `python` runs it rather than as an IPython cell.

The code runs in `__main__` (the shell's namespace), compiled under its own file name: tracebacks name
`File "<string>", line N` for `-c` and the script's path for a script, with its lines. `sys.exit()` ends it
with a status and no warning; an uncaught error is printed to stderr as python prints it (without the
glue's frames) and means 1. An interrupt (the person's, or `--timeout`) is raised on, for the kernel.
"""

from __future__ import annotations

import _sitebuiltins
import builtins
import linecache
import os
import sys
import traceback
from types import TracebackType
from typing import Any

import IPython

from . import pkgs
from .shell import SandboxShell

# Frames python would not have: the glue's (this runner, the guards) and IPython's (its wrapper of open()).
_HIDDEN = tuple(os.path.dirname(os.path.abspath(module.__file__ or "")) + os.sep for module in (pkgs, IPython))


class KeyboardInterrupt(builtins.KeyboardInterrupt):  # the name the kernel and the user see
    """An interrupt of the script, shown as python shows it (IPython renders `_render_traceback_`)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return self.lines


async def run(source: str, filename: str, argv: list[str]) -> int:
    """Run `source` as python runs the script `filename` (`<string>` for -c) with `argv` as sys.argv; returns the
    exit status python would give."""
    try:
        await pkgs.load_for(source)  # the Pyodide packages it imports, fetched on the host first
    except pkgs.PackageLoadError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    namespace = SandboxShell.instance().user_ns
    sys.argv = list(argv)
    namespace["exit"] = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")  # python's, not IPython's ask_exit
    namespace["quit"] = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    if not filename.startswith("<"):
        namespace["__file__"] = filename
    hook = sys.excepthook
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(code, namespace)
    except SystemExit as exc:
        return exit_status(exc.code)
    except builtins.KeyboardInterrupt as exc:
        raise KeyboardInterrupt(formatted(exc).splitlines()) from None
    except BaseException as exc:  # as python: whatever the script raised ends it with 1
        if sys.excepthook is not hook:  # the script set its own hook: python calls it
            sys.excepthook(type(exc), exc, _user_frames(exc.__traceback__))
        else:
            print(formatted(exc), end="", file=sys.stderr)
        return 1
    return 0


def exit_status(code: Any) -> int:
    """The status of `sys.exit(code)`, as python gives it: None is 0, an int itself, anything else is printed
    to stderr and means 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def formatted(exc: BaseException) -> str:
    """The traceback python prints for `exc`: every frame but those python would not have (_HIDDEN)."""
    shown = traceback.TracebackException(type(exc), exc, _user_frames(exc.__traceback__))
    seen: set[int] = set()
    pending = [shown]
    while pending:
        each = pending.pop()
        if id(each) in seen:
            continue
        seen.add(id(each))
        each.stack = traceback.StackSummary.from_list([f for f in each.stack if not f.filename.startswith(_HIDDEN)])
        group = getattr(each, "exceptions", None) or ()  # an ExceptionGroup's (Python 3.11+)
        pending += [e for e in (each.__cause__, each.__context__, *group) if e is not None]
    lines = list(shown.format())
    for full, short in _glue_names(exc).items():  # `EOFError: ...`, not `sandbox_guest.api.EOFError: ...`
        lines = [short + line[len(full) :] if line.startswith((f"{full}:", f"{full}\n")) else line for line in lines]
    return "".join(lines)


def _glue_names(exc: BaseException) -> dict[str, str]:
    """The glue's exception classes in `exc`'s chain: the name python prints (with the module) -> the class's."""
    names: dict[str, str] = {}
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        each = pending.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        kind = type(each)
        if kind.__module__.startswith(f"{__package__}."):
            names[f"{kind.__module__}.{kind.__qualname__}"] = kind.__qualname__
        pending += [each.__cause__, each.__context__, *(getattr(each, "exceptions", None) or ())]
    return names


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """`tb` from the first frame that is not the runner's (the script's `<module>`)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_HIDDEN):
        tb = tb.tb_next
    return tb
