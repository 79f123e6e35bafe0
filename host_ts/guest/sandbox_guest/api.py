"""Entry points the worker calls: boot once, then one `handle` per kernel request."""

from __future__ import annotations

import asyncio
import builtins
import getpass
import importlib
import inspect
import itertools
import json
import os
import platform
import posix
import sys
import time
from typing import Any

from IPython.utils import PyColorize

from . import _host, comms, pkgs
from ._protocol import Event, Op
from .cleantb import CleanTraceback
from .shell import SandboxShell, StdinNotImplementedError, make_shell
from .streams import BridgeStream, InputStream

_shell: SandboxShell | None = None
_allow_stdin = False
_task: asyncio.Task[Any] | None = None


class InputRefused(CleanTraceback, PermissionError):
    """The kernel refused an input() prompt (e.g. one that imitates its approval prompts)."""


class EOFError(CleanTraceback, builtins.EOFError):
    """The end of input (the frontend answered with Ctrl-D, or `sandbox-kernel run`'s stdin ended)."""


def _input(prompt: object = "", password: bool = False) -> str:
    __tracebackhide__ = True
    what = "getpass" if password else "input"
    if not _allow_stdin:
        raise StdinNotImplementedError(
            f"{what}() was called, but this frontend does not support input requests (allow_stdin is False)."
        )
    _host.flush_streams()  # what was printed before the prompt is shown before it
    reply = _host.request({"type": Event.INPUT_REQUEST, "prompt": str(prompt), "password": bool(password)})
    if not isinstance(reply, dict) or "value" not in reply:
        error = reply.get("error") if isinstance(reply, dict) else None
        kind = error.get("type") if isinstance(error, dict) else ""
        message = f"{what}() failed: {error.get('message') if isinstance(error, dict) else error}"
        if kind == "StdinNotImplementedError":
            raise StdinNotImplementedError(message)
        if kind == "PermissionError":
            raise InputRefused(message)
        if kind == "KeyboardInterrupt":  # the kernel withdrew the prompt because the cell was interrupted
            raise KeyboardInterrupt
        raise RuntimeError(message)
    value = str(reply["value"])
    if value == "\x04":
        raise EOFError("EOF when reading a line")
    return value


def _getpass(prompt: str = "Password: ", stream: Any = None) -> str:
    return _input(prompt, password=True)


def _system(command: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> int:
    """os.system: the command runs in the sandbox's shell, its output streamed; returns the wait status (POSIX)."""
    __tracebackhide__ = True
    from . import sh

    result = sh.run(os.fsdecode(command), stream=True)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return (result.returncode & 0xFF) << 8


def boot() -> None:
    """Set up streams, builtins and the IPython shell (done once, before the memory snapshot)."""
    global _shell
    sys.stdout = BridgeStream(_host.STDOUT, "<stdout>")
    sys.stderr = BridgeStream(_host.STDERR, "<stderr>")
    builtins.input = _input
    sys.stdin = InputStream(lambda: _input(""))
    getpass.getpass = _getpass
    time.sleep = _host.sleep
    os.system = posix.system = _system
    from . import adapt, processes

    processes.install()
    adapt.install()
    _shell = make_shell()
    comms.install(_shell)


def warm_up() -> None:
    """Run the cell machinery once (nothing is stored), so the snapshot holds its lazy imports too."""
    assert _shell is not None
    _shell.run_cell("pass", store_history=False, silent=True)
    _shell.transform_cell("x = 1\n")
    _shell.input_transformer_manager.check_complete("for i in x:")
    # The first Tab imports and primes Jedi (~2 s): done here, it is in the snapshot, and the first
    # completion answers within JupyterLab's 1 s limit.
    for code in ("impo", "import o", "x = [1]\nx.ap", "len(", "device."):
        _complete({"code": code, "cursor_pos": len(code)})
    # A fresh sandbox's first traceback imported Pygments' formatters and Python lexer and compiled its rules (~0.5 s
    # of a short cell_timeout): done here, in the snapshot. (Formatting a whole traceback here would make every
    # start ~0.3 s slower: measured.)
    for module in ("pygments.formatters.html", "pygments.styles"):
        importlib.import_module(module)
    list(importlib.import_module("pygments.lexers.python").PythonLexer().get_tokens("x = 1\n"))
    importlib.import_module("pygments.formatters.terminal256").Terminal256Formatter()
    # The first result built the display formatters (12 configurable objects, ~40 ms) and imported the shell's
    # logger module (~30 ms), both on first use: done here too (the first `1+1` of a sandbox took 50-100 ms, later
    # ones 5-15 ms; measured).
    assert _shell.display_formatter is not None
    _shell.display_formatter.format(2)
    _shell.logger  # noqa: B018 (a property that imports and makes the logger)
    # Two caches of the process that the first traceback filled (0.2-0.5 s, measured): inspect.getmodule() maps
    # every loaded module's file (~2,000 lstat calls through the mounted folders), and the colour theme runs its
    # Pygments style module. The mounts are at the same guest paths after a restore, so the map stays true.
    inspect.getmodule(compile("", "<sandbox-warm-up>", "exec"))
    formatter = PyColorize.theme_table[str(_shell.colors).lower()]._get_formatter()
    # ... and stack_data's highlighting compiles its lexer's rules (Python's `re` keeps them for the process).
    importlib.import_module("stack_data.utils")._pygmented_with_ranges(formatter, "x = 1\n", [])


def warm_process() -> None:
    """Run the traceback, display and completion paths once in this process; nothing is shown or kept.

    The snapshot holds their imports, but each new process still paid for their first run (a restarted sandbox's
    first traceback took 0.15-1.6 s, later ones 0.05 s, measured). The kernel asks a spare for this while it
    waits (the `warm` request), so a restart's first cell is as quick as later ones and cell_timeout never counts
    it; a kernel's first sandbox is not made to wait for it (0.5-2 s more before the first cell, measured)."""
    assert _shell is not None
    try:
        exec(compile("_sandbox_warm_up_name", "<warm-up>", "exec"), {})
    except NameError:
        _shell.InteractiveTB.structured_traceback(*sys.exc_info())
    assert _shell.display_formatter is not None
    _shell.display_formatter.format({"warm": [1, 2.5, "up"]})
    code = "x = [1]\nx.ap"
    _complete({"code": code, "cursor_pos": len(code)})


STARTED_FROM_SNAPSHOT = False


def _name_the_executable() -> None:
    """sys.executable: Pyodide sets the worker's script on the host (its scratch folder, the kernel's pid in its
    name), a host path the guest need not know, and no program. Now a name that the shell (`!{sys.executable} x.py`)
    and subprocess run as this sandbox's python3."""
    from .sh import PYTHON_EXECUTABLE

    sys.executable = sys._base_executable = PYTHON_EXECUTABLE  # type: ignore[attr-defined]


def attach(restored: bool = False, packages_site: str | None = None) -> str:
    """After a (re)start: bind to the worker's JS functions, put SandboxKernel.packages' folder (mounted read-only)
    on sys.path just after site-packages, where %pip installs; returns facts for kernel_info."""
    global STARTED_FROM_SNAPSHOT
    if packages_site:
        after = next((i + 1 for i, path in enumerate(sys.path) if path.endswith("/site-packages")), len(sys.path))
        sys.path.insert(after, packages_site)
    if _shell is None:
        boot()
    STARTED_FROM_SNAPSHOT = restored
    _name_the_executable()
    _fresh_randomness()
    _host.attach()
    _contain_loop_exits(asyncio.get_event_loop())
    return json.dumps(
        {
            "python_version": platform.python_version(),
            "sys_version": sys.version,
            "ipython_version": __import__("IPython").__version__,
            "pyodide_version": __import__("pyodide").__version__,
        }
    )


def _fresh_randomness() -> None:
    """Seed `random` (and tempfile's names) from the OS in every sandbox: a memory snapshot holds their state,
    so sandboxes started from it would otherwise all draw the same numbers. (The string-hash secret is fixed when
    the interpreter starts, so it stays the snapshot's: docs/security.md.)"""
    import random
    import tempfile

    random.seed()
    tempfile._name_sequence = None  # type: ignore[attr-defined]  # made again, from a fresh seed, when next used


def _contain_loop_exits(loop: asyncio.AbstractEventLoop) -> None:
    """A KeyboardInterrupt or SystemExit raised in an event-loop callback ends only that callback.

    Pyodide's loop re-raises them into JavaScript, where they would crash the sandbox. They happen
    when an interrupt lands in a task beside the cell's own or in the cell's wrap-up (a re-sent
    interrupt), or when a background task calls sys.exit(); the task itself still records them.
    """
    loop._keyboard_interrupt_handler = _ignore  # type: ignore[attr-defined]  # pinned Pyodide's WebLoop
    loop._system_exit_handler = _ignore  # type: ignore[attr-defined]


def _ignore(*_: object) -> None:
    return None


async def _execute(req: dict[str, Any]) -> dict[str, Any]:
    global _allow_stdin
    shell = _shell
    assert shell is not None
    _allow_stdin = shell.allow_stdin = bool(req.get("allow_stdin"))
    if isinstance(sys.stdin, InputStream):
        sys.stdin.reset()
    shell.execution_count = int(req.get("execution_count") or shell.execution_count)
    shell.last_error = None
    shell.interrupt_requested = False
    code = req["code"]
    preprocessing_exc = None
    try:
        transformed = shell.transform_cell(code)
    except Exception:
        transformed = code
        preprocessing_exc = sys.exc_info()
    await pkgs.load_for(transformed if preprocessing_exc is None else code)  # what cannot be had fails at its import
    silent = bool(req.get("silent"))
    result = None
    try:
        result = await shell.run_cell_async(
            code,
            store_history=bool(req.get("store_history")),
            silent=silent,
            transformed_cell=transformed,
            preprocessing_exc_tuple=preprocessing_exc,
            cell_id=req.get("cell_id"),
        )
    finally:  # as ipykernel does around run_cell_async (only run_cell triggers them): inline plots flush here
        shell.events.trigger("post_execute")
        if not silent:
            shell.events.trigger("post_run_cell", result)
    _host.flush_streams()
    if result.success:
        reply: dict[str, Any] = {"status": "ok"}
        reply["user_expressions"] = shell.user_expressions(req.get("user_expressions") or {})
    else:
        failure = shell.last_error
        if failure is None:
            raised = result.error_in_exec or result.error_before_exec
            failure = {"ename": type(raised).__name__, "evalue": str(raised), "traceback": []}
        reply = {"status": "error", **failure, "user_expressions": {}}
    reply["payload"] = shell.payload_manager.read_payload()
    shell.payload_manager.clear_payload()
    return reply


def _code_and_cursor(req: dict[str, Any]) -> tuple[str, int]:
    """The request's code and cursor position (the end of the code when not given, as ipykernel takes it)."""
    code = req["code"]
    cursor_pos = req.get("cursor_pos")
    return code, len(code) if cursor_pos is None else cursor_pos


def _complete(req: dict[str, Any]) -> dict[str, Any]:
    # As ipykernel does: the whole cell is the context (Jedi sees `import math` before `math.sq`).
    from IPython.core.completer import Completion, provisionalcompleter, rectify_completions

    from .quick_complete import loaded_imports

    assert _shell is not None
    code, cursor_pos = _code_and_cursor(req)
    completer = _shell.Completer
    quick = loaded_imports(code, _shell.user_ns, cursor_pos)
    namespace, use_jedi = completer.namespace, completer.use_jedi
    if quick:  # the module itself, as if the import had run (Jedi would parse it first)
        completer.namespace, completer.use_jedi = {**namespace, **quick}, False
    try:
        with provisionalcompleter():
            # One more than the kernel keeps, so that it knows there were more (a namespace of a million names).
            found = itertools.islice(completer.completions(code, cursor_pos), int(req.get("max_matches") or 5000) + 1)
            completions = list(rectify_completions(code, found))
            if quick and completions and all(c.text.startswith(".") for c in completions):
                # IPython's own matcher replaces from the dot (`.sqrt`); Jedi's, as ipykernel gives, after it
                completions = [
                    Completion(c.start + 1, c.end, c.text[1:], type=c.type, signature=c.signature) for c in completions
                ]
    finally:
        completer.namespace, completer.use_jedi = namespace, use_jedi
    start, end = (completions[0].start, completions[0].end) if completions else (cursor_pos, cursor_pos)
    types = [
        {"start": c.start, "end": c.end, "text": c.text, "type": c.type, "signature": c.signature} for c in completions
    ]
    return {
        "status": "ok",
        "matches": [c.text for c in completions],
        "cursor_start": start,
        "cursor_end": end,
        "metadata": {"_jupyter_types_experimental": types},
    }


def _inspect(req: dict[str, Any]) -> dict[str, Any]:
    from IPython.utils.tokenutil import token_at_cursor

    assert _shell is not None
    code, cursor_pos = _code_and_cursor(req)
    name = token_at_cursor(code, cursor_pos)
    try:
        bundle = _shell.object_inspect_mime(
            name,
            detail_level=int(req.get("detail_level") or 0),
            omit_sections=tuple(req.get("omit_sections") or ()),
        )
    except KeyError:
        return {"status": "ok", "found": False, "data": {}, "metadata": {}}
    if not _shell.enable_html_pager:
        bundle.pop("text/html", None)
    # The kernel cuts at max_bytes and says so: a longer text (a 30 MB docstring) need not cross the pipe.
    room = int(req.get("max_bytes") or 10 << 20) + 1
    bundle = {mime: value[:room] if isinstance(value, str) else value for mime, value in bundle.items()}
    return {"status": "ok", "found": True, "data": bundle, "metadata": {}}


def _is_complete(req: dict[str, Any]) -> dict[str, Any]:
    assert _shell is not None
    status, indent = _shell.input_transformer_manager.check_complete(req["code"])
    reply: dict[str, Any] = {"status": status}
    if status == "incomplete":
        reply["indent"] = " " * (indent or 0)
    return reply


def _configure(req: dict[str, Any]) -> dict[str, Any]:
    """Apply the kernel's settings after every sandbox start: guards, working folder, package loading, `device`."""
    from . import guards
    from .device import Device

    assert _shell is not None
    guards.install(req)
    os.environ.pop("_", None)  # the snapshot builder's command (a host path), not the guest's business
    # As ipykernel does: matplotlib, once imported, draws inline with no setup cell.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    _shell.user_ns.pop("_pyodide_core", None)  # Pyodide's bootstrap leaves it in __main__; sys.modules keeps it
    if req.get("cwd"):
        os.chdir(req["cwd"])  # SandboxKernel.working_folder: the kernel's folder, mounted
    pkgs.SETTINGS.update(
        auto_load=bool(req.get("auto_load_packages", True)),
        allow_net=list(req.get("allow_net") or []),
        wheelhouse=bool(req.get("wheelhouse")),
    )
    device = Device(req.get("skills") or {}, int(req.get("max_bytes") or 1 << 20))
    builtins.device = device  # type: ignore[attr-defined]  # survives %reset
    _shell.user_ns["device"] = device
    _shell.user_ns_hidden["device"] = device
    return {"status": "ok"}


def _warm(req: dict[str, Any]) -> dict[str, Any]:
    warm_process()
    return {"status": "ok"}


async def _pip_replay(req: dict[str, Any]) -> dict[str, Any]:
    """Install again what %pip installed before the sandbox was restarted."""
    try:
        await pkgs.pip_install(list(req["specs"]), req.get("index_urls"))
    except pkgs.PackageLoadError as exc:
        print(f"[after the restart, %pip install {' '.join(req['specs'])} failed again: {exc}]", file=sys.stderr)
    return {"status": "ok"}


def _error_reply(handler: Any) -> Any:
    """`handler`, with an exception turned into an error reply (the kernel shows it to the user)."""

    def run(*args: Any) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = handler(*args)
            return reply
        except Exception as exc:
            return {"status": "error", "ename": type(exc).__name__, "evalue": str(exc)[:2000], "traceback": []}

    return run


@_error_reply
def _checkpoint(req: dict[str, Any]) -> dict[str, Any]:
    from . import checkpoint

    assert _shell is not None
    return checkpoint.capture(req, _shell.user_ns, _shell.user_ns_hidden)


def _restore(req: dict[str, Any], data: Any) -> dict[str, Any]:
    from . import checkpoint

    assert _shell is not None
    reply: dict[str, Any] = _error_reply(checkpoint.apply)(req, _shell.user_ns, data or [])
    _fresh_randomness()  # a fork restores the same state twice: each copy draws its own numbers
    return reply


_HANDLERS = {
    Op.COMPLETE: _complete,
    Op.INSPECT: _inspect,
    Op.IS_COMPLETE: _is_complete,
    Op.CONFIGURE: _configure,
    Op.CHECKPOINT: _checkpoint,
    Op.COMM: comms.serve,
    Op.WARM: _warm,
}


_INTERRUPTED = {"ename": "KeyboardInterrupt", "evalue": "Interrupted by user", "traceback": ["KeyboardInterrupt"]}


async def handle(request_json: str, request_id: int = 0, data: Any = None) -> str:
    """Serve one kernel request (`data`: bytes the kernel sent with it, as JS Uint8Arrays); returns the reply
    content as JSON (the worker ends the request with it)."""
    try:
        return await _serve(request_json, request_id, data)
    except KeyboardInterrupt:  # landed in this glue's own code, around the request's: still the request's answer
        _host.iopub("error", _INTERRUPTED)
        return json.dumps({"status": "error", **_INTERRUPTED, "user_expressions": {}, "payload": []})


async def _serve(request_json: str, request_id: int, data: Any = None) -> str:
    global _task
    req = json.loads(request_json)
    _host.REQUEST.set(request_id)  # the cell's tasks (and their output) belong to this request
    comms.KERNEL.parent_id = str(req.get("msg_id") or "")  # the frontend's message this request serves
    op = req.get("op")
    if op == Op.EXECUTE:
        _task = asyncio.ensure_future(_execute(req))
        try:
            content = await _task
        except (KeyboardInterrupt, asyncio.CancelledError):
            # An interrupt that landed outside the cell's own code (e.g. in IPython).
            _host.iopub("error", _INTERRUPTED)
            content = {"status": "error", **_INTERRUPTED, "user_expressions": {}, "payload": []}
        finally:
            _task = None
    elif op == Op.PIP_INSTALL:
        content = await _pip_replay(req)
    elif op == Op.RESTORE:
        content = _restore(req, data)
    elif op in _HANDLERS:
        content = _HANDLERS[op](req)
    else:
        content = {"status": "error", "ename": "ValueError", "evalue": f"unknown request {op!r}", "traceback": []}
    return json.dumps(content, default=_host._json_default)


def interrupt_async() -> None:
    """Interrupt a cell that is waiting in an `await` (no Python code is running).

    The cell's task is cancelled; the shell reports the cancellation as KeyboardInterrupt.
    """
    task = _task
    if task is not None and not task.done() and _shell is not None:
        _shell.interrupt_requested = True
        task.cancel()
