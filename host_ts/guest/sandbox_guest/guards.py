"""Clear errors for what the sandbox does not allow: host files, network (server sockets too), memory.

Deno's permissions and the supervisor (which makes every change that reaches a host folder: plain data files only,
within the suffixes and sizes that mount_limits allow; anything else stays in the sandbox's layer) enforce the rules; these guards refuse first where they can, and
put the supervisor's reason into the error otherwise: a message that says what IS allowed (useful to people and
to LLMs writing the code).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import posix
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import _host
from .cleantb import CleanTraceback

GUEST_WRITABLE = ("/tmp", "/home/pyodide")  # in memory, lost on restart
PACKAGES_SITE = "/lib/sandbox-packages"  # SandboxKernel.packages, read-only: the worker mounts it (snapshot_layout.ts)

# What the guards use of os, captured when the glue is imported (before any guest code runs): a notebook that
# replaces os.getcwd, os.fspath or os.path.join must not change what the guards check or what their errors say.
_getcwd = posix.getcwd
_fspath = posix.fspath
_listdir = posix.listdir
_PathLike = os.PathLike
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR
_ENCODING = sys.getfilesystemencoding()


def _text(path: Any) -> str:
    """A str, bytes or path-like path as text (os.fsdecode, without os's replaceable functions)."""
    path = _fspath(path)
    return path.decode(_ENCODING, "surrogateescape") if isinstance(path, bytes) else path


def _absolute(path: str) -> str:
    """`path` against the real working folder, normalised (as os.path.normpath(os.path.join(os.getcwd(), path)))."""
    if not path.startswith("/"):
        path = f"{_getcwd()}/{path}"
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts)


class PermissionError(CleanTraceback, builtins.PermissionError):
    """The builtin PermissionError (same name, caught the same), shown without the guard's frames."""


class OSError(CleanTraceback, builtins.OSError):
    """The builtin OSError, shown without the guard's frames."""


@dataclass
class Limits:
    mounts: list[dict[str, Any]] = field(default_factory=list)
    allow_net: list[str] = field(default_factory=list)
    memory_limit_mb: int = 0
    own_roots: tuple[str, ...] = ()  # top-level folders of the sandbox's own file system
    # How the user of the program that started the kernel writes its settings (kernel: setting_sources.py): by
    # name ("mounts": "--mount"), else `other` with {name} in it
    names: dict[str, str] = field(default_factory=dict)
    other: str = "SandboxKernel.{name}"


LIMITS = Limits()


def spelled(name: str) -> str:
    """Setting `name` as the user writes it where the kernel was started (`SandboxKernel.mounts`, `--mount`)."""
    return LIMITS.names.get(name) or LIMITS.other.replace("{name}", name)


def assigned(name: str, value: Any) -> str:
    """Setting `name` given `value`, as the user writes it: `SandboxKernel.mounts = ['x:/data']`; a flag of the
    program that started the kernel, `--mount x:/data` (a list's one item); an option, `--SandboxKernel.name='..'`."""
    written = spelled(name)
    if not written.startswith("--"):
        return f"{written} = {value!r}"
    if name in LIMITS.names:
        return f"{written} {value[0] if isinstance(value, list) else value}"
    return f"{written}={value!r}"


def roots_text() -> str:
    readable = ", ".join(m["guest"] for m in LIMITS.mounts) or "none"
    writable = ", ".join(m["guest"] for m in LIMITS.mounts if m["writable"]) or "none"
    return (
        f"Host folders visible here ({spelled('mounts')}): readable: {readable}; writable: {writable}. "
        f"The sandbox's own scratch space (in memory, lost on restart): {', '.join(GUEST_WRITABLE)}."
    )


def _mount_of(path: str) -> dict[str, Any] | None:
    """The mount that holds `path`: the innermost (the working folder inside project_folder's mount)."""
    found = None
    for mount in LIMITS.mounts:
        root = mount["guest"]
        if (path == root or path.startswith(root + "/")) and (found is None or len(root) > len(found["guest"])):
            found = mount
    return found


def _refuse(path: str, why: str, writing: bool = False) -> builtins.OSError:
    """A read refused: PermissionError (errno.EACCES: 2 in Emscripten's numbering, not 13). A write: what Linux
    gives on a read-only file system (errno.EROFS, an OSError), for the sandbox's root is one outside its scratch
    folders and mounts."""
    if writing:
        return OSError(errno.EROFS, f"Read-only file system: {why}. {roots_text()}", path)
    return PermissionError(errno.EACCES, f"{why}. {roots_text()}", path)


def check_path(path: Any, writing: bool) -> None:
    """Raise a PermissionError that names the roots if `path` may not be used this way."""
    if isinstance(path, int):
        return
    given = _text(path)
    path = _absolute(given)
    if writing and (path == PACKAGES_SITE or path.startswith(PACKAGES_SITE + "/")):
        raise _refuse(
            path,
            f"{PACKAGES_SITE} holds {spelled('packages')}, unpacked once on the host and read-only in every sandbox "
            "(%pip install puts packages in site-packages)",
            writing,
        )
    mount = _mount_of(path)
    if mount is not None:
        return  # a write the host folder may not take stays in the sandbox's layer over it (rwfs.ts)
    top = path.split("/")[1] if path != "/" else ""
    if top and LIMITS.own_roots and top not in LIMITS.own_roots:
        why = f"{path!r} is not in the sandbox: the host's files are not visible here"
        hint = above_hint(given)
        raise _refuse(path, f"{why}. {hint}" if hint else why, writing)


_WRITE_EVENTS = {
    "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.chmod", "os.utime", "os.truncate",
    "shutil.rmtree", "shutil.move",
}  # fmt: skip
_COPY_EVENTS = {"shutil.copyfile", "os.link"}  # (source: read, destination: written)
_READ_EVENTS = {"os.listdir", "os.scandir"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    try:
        _check_event(event, args)
    except (PermissionError, OSError):  # the guards' own (this module's classes)
        raise
    except Exception:
        return  # nothing the guards can explain (e.g. the working folder was removed): Deno's permissions decide


def _check_event(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = args
        if path is None:
            return
        writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool(flags and flags & _WRITE_FLAGS)
        check_path(path, writing)
    elif event in _WRITE_EVENTS:
        for arg in args[:2]:
            if isinstance(arg, (str, bytes, _PathLike)):
                check_path(arg, True)
    elif event == "os.symlink" and len(args) >= 2 and all(isinstance(a, (str, bytes, _PathLike)) for a in args[:2]):
        check_path(_link_target(_text(args[0]), _text(args[1])), False)
        check_path(args[1], True)
    elif event in _COPY_EVENTS and len(args) >= 2:
        for arg, writing in ((args[0], False), (args[1], True)):
            if isinstance(arg, (str, bytes, _PathLike)):
                check_path(arg, writing)
    elif event in _READ_EVENTS and args and isinstance(args[0], (str, bytes, _PathLike)):
        check_path(args[0], False)


def _link_target(target: str, link: str) -> str:
    """Where a symlink at `link` to `target` leads: a relative target is relative to the link's folder (not to the
    working folder)."""
    if target.startswith("/"):
        return target
    folder = _absolute(link).rsplit("/", 1)[0]
    return f"{folder}/{target}" if folder else f"/{target}"


def explained(error: builtins.OSError) -> builtins.OSError:
    """`error` with the host's reason when the supervisor refused a change to a read-write mount."""
    why = _host.take_refusal()
    if why is None or not isinstance(error, builtins.OSError):
        return error
    kind = PermissionError if isinstance(error, builtins.PermissionError) else OSError
    return kind(error.errno, why, error.filename)


def _bound(data: Any) -> int:
    """At most how many bytes writing `data` (text or a buffer) adds to a file (UTF-8's 4 bytes a character, with
    room for a '\r' before each newline)."""
    if isinstance(data, str):
        return 4 * len(data) + 4
    try:
        return memoryview(data).nbytes
    except TypeError:
        return 0  # not a buffer: the file's own write raises TypeError


def _bare(error: builtins.OSError) -> builtins.OSError:
    """`error` without what it was raised through (its frames would keep the file they hold open)."""
    error.__traceback__ = error.__context__ = error.__cause__ = None
    error.__suppress_context__ = True
    return error


class ExplainedFile:
    """A file on a read-write mount: a write the host refuses (size limits) raises with the host's reason, at the
    write() that crosses the limit. Python's buffers would keep such a write until a flush or close (or, for a file
    never closed, a garbage collection that only prints "Exception ignored"): so while the bytes written since the
    host last answered may not fit the room it reported (`_host.file_room`), each write goes to the host at once."""

    def __init__(self, file: Any, newline: Any = None) -> None:
        self._file = file
        self._newline = newline if isinstance(newline, str) else None  # open()'s: how "\n" is written
        self._pending = 0  # at most this many bytes written since the room was last read
        self._room = self._read_room()

    def _read_room(self) -> int | None:
        try:
            return _host.file_room(self._file.fileno())
        except (builtins.OSError, ValueError, AttributeError):
            return None

    def _write_now(self, data: Any) -> builtins.OSError | None:
        """Write `data` and flush it to the host, where the limits are checked exactly: the host's refusal is
        returned (with no traceback: nothing in it holds this file, so a file nobody names closes as usual), and a
        write the host refused keeps none of its bytes in Python's buffers (nothing fails again at close)."""
        binary = getattr(self._file, "buffer", None)
        if binary is not None and not isinstance(data, str):
            self._file.write(data)  # the text layer's own TypeError (it writes nothing)
        try:
            self._call("flush")
        except builtins.OSError as exc:
            return _bare(exc)
        if binary is None:  # a binary file: its bytes as they are
            raw, encoded = self._file, bytes(memoryview(data))
        else:
            if "\n" in data and self._newline not in (None, "", "\n"):
                data = data.replace("\n", self._newline)
            encoded = self._encoded(data, at_start=binary.tell() == 0)
            raw = binary
        target = getattr(raw, "raw", raw)
        _host.take_refusal()
        try:
            view, done = memoryview(encoded), 0
            while done < len(view):
                written = target.write(view[done:])
                if not written:
                    break
                done += written
        except builtins.OSError as exc:
            return _bare(explained(exc))
        finally:
            if target is not raw:
                raw.seek(0, os.SEEK_CUR)  # the buffered layer learns where the raw file is now
            if raw is not self._file:  # ... and the text layer: its encoder adds no BOM past the start (as io does)
                with contextlib.suppress(builtins.OSError, ValueError):
                    self._file.seek(self._file.tell())
            self._room, self._pending = self._read_room(), 0
        return None

    def _encoded(self, text: str, at_start: bool) -> bytes:
        """`text` as the text layer would encode it there: a BOM (utf-16, utf-32, utf-8-sig) only at the file's
        start, as io.TextIOWrapper sets its encoder's state (its own encoder is out of reach)."""
        import codecs

        encoder = codecs.getincrementalencoder(self._file.encoding)(self._file.errors or "strict")
        if not at_start:
            encoder.setstate(0)
        return encoder.encode(text, True)

    def _call(self, name: str, *args: Any) -> Any:
        __tracebackhide__ = True
        _host.take_refusal()  # forget any earlier one
        try:
            return getattr(self._file, name)(*args)
        except builtins.OSError as exc:
            raise explained(exc) from None

    def write(self, data: Any) -> Any:
        __tracebackhide__ = True
        bound = _bound(data)
        if self._room is None or self._pending + bound <= self._room:
            self._pending += bound
            return self._call("write", data)
        error = self._write_now(data)
        if error is None:  # what io returns: characters for text, bytes for a buffer (memoryview(...).nbytes)
            return len(data) if isinstance(data, str) else _bound(data)
        del self, data  # the traceback keeps this frame: it must not keep the file open
        raise error

    def writelines(self, lines: Any) -> Any:
        __tracebackhide__ = True
        for line in lines:
            self.write(line)

    def flush(self) -> Any:
        __tracebackhide__ = True
        try:
            return self._call("flush")
        finally:
            self._room, self._pending = self._read_room(), 0

    def truncate(self, *size: Any) -> Any:
        __tracebackhide__ = True
        return self._call("truncate", *size)

    def close(self) -> Any:
        __tracebackhide__ = True
        return self._call("close")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> ExplainedFile:
        self._file.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        __tracebackhide__ = True
        try:
            return self._file.__exit__(*exc)
        except builtins.OSError as error:
            raise explained(error) from None

    def __iter__(self) -> Any:
        return iter(self._file)


def _guard_open() -> None:
    real_open = io.open

    def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _host.take_refusal()  # forget any earlier one
        try:
            handle = real_open(file, mode, *args, **kwargs)
        except FileNotFoundError as exc:
            hint = missing_file_hint(file)
            if hint is None:
                raise
            raise FileNotFoundError(exc.errno, f"{exc.strerror}. {hint}", exc.filename) from None
        except builtins.OSError as exc:
            raise explained(exc) from None
        if isinstance(file, (str, bytes, _PathLike)) and any(c in mode for c in "wax+"):
            path = _absolute(_text(file))
            mount = _mount_of(path)
            if mount is not None and mount.get("limited"):
                return ExplainedFile(handle, kwargs.get("newline", args[3] if len(args) > 3 else None))
        return handle

    builtins.open = open
    io.open = open
    import IPython.core.interactiveshell as ipython_shell

    setattr(ipython_shell, "io_open", open)  # noqa: B010  # the `open` IPython puts in the user's namespace calls this


# os functions that change files: a refusal by the host reaches Python with the host's reason.
_EXPLAINED_OS = (
    "open", "mkdir", "rename", "replace", "remove", "unlink", "rmdir", "chmod", "truncate", "ftruncate", "utime",
    "symlink", "link",
)  # fmt: skip


def _explain(function: Any) -> Any:
    def explaining(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _host.take_refusal()
        try:
            return function(*args, **kwargs)
        except builtins.OSError as exc:
            raise explained(exc) from None

    explaining.__name__ = function.__name__
    explaining.__qualname__ = function.__qualname__
    explaining.__doc__ = function.__doc__
    explaining.__wrapped__ = function  # type: ignore[attr-defined]
    return explaining


def write_refusal(path: str) -> str:
    """The words of the guards' refusal of a write to the absolute `path` ('' when they let it through): the shell
    refuses with them, so that `!cmd` says what open() says (one source of truth)."""
    if not isinstance(path, str) or not path.startswith("/"):
        return ""
    try:
        check_path(path, True)
    except (PermissionError, OSError) as exc:  # the guards' own
        return str(exc.strerror)
    return ""


def _guard_os() -> None:
    for name in _EXPLAINED_OS:
        if hasattr(os, name):  # Pyodide's os has no link
            setattr(os, name, _explain(getattr(os, name)))


def missing_file_hint(file: Any) -> str | None:
    """For a relative path that is not there: where the sandbox looks, and how host files get in."""
    if not isinstance(file, (str, _PathLike)) or _text(file).startswith("/"):
        return None
    cwd = _getcwd()
    if _mount_of(cwd) is not None:
        return above_hint(file)  # None: in a host folder already (working_folder, mounts), an ordinary miss
    return (
        f"The sandbox's working folder is {cwd}, its own (host files are not there). To open files next to the "
        f"notebook, set {assigned('working_folder', 'ro')} (or {assigned('working_folder', 'rw')}); for other host "
        "folders, "
        f"{assigned('mounts', ['host_folder:/data'])}, then open('/data/...')"
    )


def above_hint(file: Any) -> str | None:
    """For a relative path that climbs out of the working folder (a host folder) to where no mount is: how to show
    the folders above it."""
    if not isinstance(file, (str, _PathLike)) or _text(file).startswith("/"):
        return None
    cwd = _getcwd()
    target = _absolute(_text(file))
    if _mount_of(cwd) is None or _mount_of(target) is not None:
        return None
    outer = [m["guest"] for m in LIMITS.mounts if cwd.startswith(m["guest"] + "/")]
    if outer:  # project_folder is set: the path climbs above it too
        return (
            f"The path goes above {min(outer, key=len)}, the folder {spelled('project_folder')} shows: name a "
            f"folder higher up there (e.g. '../..'), or mount the folder with {spelled('mounts')}"
        )
    return (
        f"The path goes above the working folder {cwd}, and the sandbox shows nothing of the host there: to reach "
        f"the folder above the notebook's, set {assigned('project_folder', '..')} (mounted read-only at /project, "
        "with the working folder in its own place inside it); for other host folders, "
        f"{assigned('mounts', ['host_folder:/data'])}, then open('/data/...')"
    )


def blocked_url(url: str, error: BaseException) -> PermissionError:
    host = urlsplit(url).netloc or url
    allowed = ", ".join(LIMITS.allow_net) or "none"
    return PermissionError(
        f"network access to {host} is blocked ({type(error).__name__}). Hosts the sandbox may reach "
        f"({spelled('allow_net')}): {allowed}. Loopback and private addresses stay blocked unless listed."
    )


def _guard_fetch() -> None:
    import pyodide.http

    original = pyodide.http.pyfetch

    async def pyfetch(url: str, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return await original(url, **kwargs)
        except Exception as exc:
            if "net access" in str(exc) or "NotCapable" in str(exc) or "NetworkError" in str(exc):
                raise blocked_url(url, exc) from None
            raise

    # The wrapper takes the URL as a string; given a JS Request, a refusal's message cannot be made (urlsplit fails).
    pyodide.http.pyfetch = pyfetch  # type: ignore[assignment]


def _guard_urllib() -> None:
    import urllib.request

    def urlopen(url: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        target = url if isinstance(url, str) else getattr(url, "full_url", str(url))
        raise OSError(
            f"urllib cannot open connections in the sandbox (no sockets): use "
            f"`await pyodide.http.pyfetch({target!r})`. Allowed hosts ({spelled('allow_net')}): "
            f"{', '.join(LIMITS.allow_net) or 'none'}"
        )

    urllib.request.urlopen = urlopen


def no_server_message() -> str:
    return (
        "socket.listen: the sandbox accepts no connections: it has no server sockets (neither has Pyodide in a "
        f"browser). It may fetch from the hosts of {spelled('allow_net')} with `await pyodide.http.pyfetch(url)`; "
        f"allowed now: {', '.join(LIMITS.allow_net) or 'none'}"
    )


def _guard_sockets() -> None:
    import socket

    def listen(self: socket.socket, *backlog: int) -> None:
        __tracebackhide__ = True
        raise OSError(errno.EOPNOTSUPP, no_server_message())

    socket.socket.listen = listen  # type: ignore[method-assign, assignment]


def memory_message() -> str:
    return (
        f"the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb={LIMITS.memory_limit_mb} MiB "
        "(raise it to allow more)"
    )


# What CPython raises on 32-bit WebAssembly for a size or count that does not fit its Py_ssize_t (2**31 or more):
# a 64-bit build tries to allocate it and raises MemoryError.
INDEX_SIZED = "cannot fit 'int' into an index-sized integer"
FILES_WORTH_NAMING_MIB = 16  # a MemoryError names what the files hold from this on (a fresh sandbox's: ~3 MiB)


def budget_error(etype: type, evalue: BaseException) -> BaseException | None:
    """The error a cell shows for one of the sandbox's memory budget (None for any other): MemoryError that names
    SandboxKernel.memory_limit_mb, also for sizes wasm32 cannot address; OSError(ENOSPC) with the budget's numbers
    for full in-memory files."""
    if issubclass(etype, MemoryError):
        if "SandboxKernel." in str(evalue):  # the glue's own (the shell's limits) say which limit
            return None
        held = _host.files_mib()
        if held < FILES_WORTH_NAMING_MIB:
            return MemoryError(memory_message())
        return MemoryError(
            f"{memory_message()}; the sandbox's in-memory files hold {held} MiB of it (delete files in /tmp or "
            "/home/pyodide to free it)"
        )
    if issubclass(etype, OverflowError) and str(evalue) == INDEX_SIZED:
        return MemoryError(
            f"{memory_message()}; no size or count of 2**31 or more fits its 32-bit (wasm32) memory at all"
        )
    if isinstance(evalue, builtins.OSError) and evalue.errno == errno.ENOSPC:
        why = _host.files_full()  # taken either way: a refusal the cell caught must not explain a later error
        # Only the in-memory files' bare ENOSPC (Emscripten's own words) is the budget's: an ENOSPC that already
        # says why (a host folder's max_total_bytes, explained()) is about something else.
        generic = evalue.strerror in (None, "", os.strerror(errno.ENOSPC))
        return builtins.OSError(errno.ENOSPC, why) if why and generic else None
    return None


def install(config: dict[str, Any]) -> None:
    """Apply the kernel's limits (called after every sandbox start)."""
    first = not LIMITS.own_roots
    LIMITS.mounts = list(config.get("mounts") or [])
    LIMITS.allow_net = list(config.get("allow_net") or [])
    LIMITS.memory_limit_mb = int(config.get("memory_limit_mb") or 0)
    names = config.get("setting_names") or {}
    LIMITS.names = {str(k): str(v) for k, v in dict(names.get("names") or {}).items()}
    LIMITS.other = str(names.get("other") or Limits.other)
    # "share" (and the like) under sys.prefix: where wheels' data files (`*.data/data/share/...`) install.
    data_root = sysconfig.get_path("data").strip("/").split("/")[0]
    LIMITS.own_roots = tuple(sorted({*_listdir("/"), "tmp", "home", "lib", "dev", "proc", "share", data_root} - {""}))
    if first:
        sys.addaudithook(_audit)
        _guard_open()
        _guard_os()
        _guard_fetch()
        _guard_urllib()
        _guard_sockets()
