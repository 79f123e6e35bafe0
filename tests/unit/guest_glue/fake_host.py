"""Stand-ins for what only Pyodide's worker gives the guest glue: the `_sandbox_host` JS module and the modules
`js`, `pyodide` (code, ffi, http), `pyodide_js`, `micropip` (and `cloudpickle` where it is not installed).

Used in the pytest process (fixtures in conftest.py) and in `fake_worker.py` (the glue booted in a child process).
Their signatures follow host_ts/guest_stubs/, which mirror worker.ts's `host` object and the pinned Pyodide.
"""

from __future__ import annotations

import ast
import base64
import json
import pickle
import re
import textwrap
import types
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

GUEST_DIR = Path(__file__).resolve().parents[3] / "host_ts" / "guest"  # the glue, as the sandbox mounts it
INTERRUPT = object()  # an answer of wait_reply: the kernel interrupted the request (JS undefined, Python None)


class FakeHost:
    """The worker's `_sandbox_host` functions, recording every call in `log` (in order).

    `answers` are the kernel's answers to `_host.request`, taken in order (INTERRUPT: interrupted). `max_event_bytes`
    is the kernel's event limit (emit and send_blob refuse larger ones, as worker.ts does).
    """

    def __init__(self, answers: list[Any] | None = None, max_event_bytes: int = 1 << 20) -> None:
        self.answers = list(answers or [])
        self.max_event_bytes = max_event_bytes
        self.refusals: list[str] = []
        self.files_full_reasons: list[str] = []
        self.files_held_mib = 3  # what `files_mib` answers: the in-memory files of a fresh sandbox  # what `files_full` answers, in order (memory_budget.ts's refusals)
        self.interrupt_sleep = False
        self.log: list[tuple[Any, ...]] = []
        self.on_write: Callable[[str], None] | None = None
        self.rooms: dict[int, float] = {}  # what `file_room` answers for an fd (none: not a host file)
        self.shell_results: list[dict[str, Any]] = []  # what `shell` answers, in order (ShellResult's fields)
        self.shell_limit_bytes = 16 << 20  # host_ts/shell_limits.ts at memory_limit_mb=1024

    # -- the JS functions -------------------------------------------------------------------------------------
    def write(self, kind: int, text: str, rid: int = 0) -> None:
        self.log.append(("write", kind, text, rid))
        if self.on_write is not None:
            self.on_write(text)

    def emit(self, text: str, rid: int = 0) -> bool:
        if len(text.encode()) > self.max_event_bytes:
            self.log.append(("emit-refused", len(text.encode()), rid))
            return False
        self.log.append(("emit", json.loads(text), rid))
        return True

    def send_blob(self, buffer: Any, rid: int = 0) -> bool:
        data = bytes(buffer)
        if len(data) > self.max_event_bytes:
            self.log.append(("blob-refused", len(data), rid))
            return False
        self.log.append(("blob", data, rid))
        return True

    def wait_reply(self, n: int) -> str | None:
        asked = [entry[1] for entry in self.log if entry[0] == "emit" and "n" in entry[1]]
        assert asked and asked[-1]["n"] == n, f"wait_reply({n}) for no request emitted just before: {asked[-1:]}"
        self.log.append(("wait", n))
        assert self.answers, f"no answer scripted for {asked[-1]}"
        answer = self.answers.pop(0)
        return None if answer is INTERRUPT else json.dumps(answer)

    def take_refusal(self) -> str | None:
        self.log.append(("take_refusal",))
        return self.refusals.pop(0) if self.refusals else None

    def file_room(self, fd: int) -> float | None:
        self.log.append(("file_room", fd))
        return self.rooms.get(fd)

    def files_full(self) -> str | None:
        self.log.append(("files_full",))
        return self.files_full_reasons.pop(0) if self.files_full_reasons else None

    def files_mib(self) -> int:
        self.log.append(("files_mib",))
        return self.files_held_mib

    def sleep(self, ms: float) -> bool:
        self.log.append(("sleep", ms))
        return self.interrupt_sleep

    async def shell(self, request: str, python: Any, write_refusal: Any) -> str:
        self.log.append(("shell", json.loads(request), python))
        self.write_refusal = write_refusal  # the guards' words the shell refuses writes with
        assert self.shell_results, f"no shell result scripted for {json.loads(request)['script']!r}"
        scripted = self.shell_results.pop(0)
        if callable(scripted):  # acts on the request (e.g. writes the file a redirection names)
            scripted = scripted(json.loads(request))
        result = {"stdout": "", "stderr": "", "exitCode": 0, "interrupted": False, **scripted}
        return json.dumps(result)

    # -- what the tests read ----------------------------------------------------------------------------------
    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        """The JSON events emitted (of one `type`, if given)."""
        return [e[1] for e in self.log if e[0] == "emit" and (type_ is None or e[1].get("type") == type_)]

    def iopub(self, msg_type: str) -> list[dict[str, Any]]:
        """The contents of the IOPub messages of `msg_type`."""
        return [e["content"] for e in self.events("iopub") if e["msg_type"] == msg_type]

    def writes(self) -> list[tuple[int, str, int]]:
        """(kind, text, request) of each stream write that reached the host."""
        return [(e[1], e[2], e[3]) for e in self.log if e[0] == "write"]

    def text(self, kind: int = 1) -> str:
        return "".join(text for k, text, _ in self.writes() if k == kind)

    def blobs(self) -> list[bytes]:
        return [e[1] for e in self.log if e[0] == "blob"]

    def calls(self) -> list[str]:
        return [e[0] for e in self.log]


class FakeUint8Array:
    """A JS Uint8Array as Pyodide hands it to Python: `length`, and `assign_to(buffer)` copies it out."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.length = len(data)

    def assign_to(self, target: memoryview) -> None:
        target[:] = self._data


def _find_imports(source: str) -> list[str]:
    """Pyodide's pyodide.code.find_imports (314.0.7): modules and their parents, sorted; [] for bad syntax."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            modules = [node.module]
        for module in modules:
            parts = module.split(".")
            names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(names)


class FakeProxy:
    """pyodide.ffi.create_proxy's result: callable until destroyed."""

    def __init__(self, function: Callable[..., Any], record: list[tuple[Any, ...]]) -> None:
        self._function = function
        self._record = record
        self.destroyed = False

    def __call__(self, *args: Any) -> Any:
        assert not self.destroyed, "a destroyed proxy was called"
        return self._function(*args)

    def destroy(self) -> None:
        self.destroyed = True
        self._record.append(("destroy", self))


def _drive(awaitable: Awaitable[Any]) -> Any:
    """pyodide.ffi.run_sync for coroutines that never wait on the event loop (the fakes' own)."""
    coroutine: Coroutine[Any, Any, Any] = awaitable  # type: ignore[assignment]
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("run_sync was given a coroutine that waits on the event loop; the fakes never do")


class FakePyodide:
    """The modules of Pyodide (and the guest wheels) the glue imports, with a record of what it asked of them."""

    def __init__(self) -> None:
        self.record: list[tuple[Any, ...]] = []
        self.can_run_sync = True
        self.pip_error: BaseException | None = None
        self.fetch_error: BaseException | None = None
        self.probe_answers: dict[str, str] = {}  # url -> why a JavaScript fetch of it failed ('' or absent: it did not)
        self.load_messages = ["Loading demo"]
        self.lock: dict[str, dict[str, Any]] = {}  # micropip's view of Pyodide's lock file (name -> entry)
        self.installed: set[str] = set()  # canonical names micropip or loadPackage installed

    def modules(self) -> dict[str, types.ModuleType]:
        record = self.record

        js = types.ModuleType("js")
        js.Object = types.SimpleNamespace(fromEntries=lambda pairs: {"<js Object>": dict(pairs)})  # type: ignore[attr-defined]

        code = types.ModuleType("pyodide.code")
        code.find_imports = _find_imports  # type: ignore[attr-defined]

        def run_js(source: str) -> Callable[[str], Any]:
            async def probe(url: str) -> str:
                record.append(("probe", url))
                return self.probe_answers.get(url, "")

            assert "fetch(url" in source, source
            return probe

        code.run_js = run_js  # type: ignore[attr-defined]

        ffi = types.ModuleType("pyodide.ffi")

        def create_proxy(function: Callable[..., Any]) -> FakeProxy:
            proxy = FakeProxy(function, record)
            record.append(("create_proxy", proxy))
            return proxy

        def to_js(value: Any, dict_converter: Callable[[Any], Any] | None = None) -> Any:
            if isinstance(value, dict) and dict_converter is not None:
                return dict_converter([[k, v] for k, v in value.items()])
            return value

        ffi.create_proxy = create_proxy  # type: ignore[attr-defined]
        ffi.to_js = to_js  # type: ignore[attr-defined]
        ffi.can_run_sync = lambda: self.can_run_sync  # type: ignore[attr-defined]
        ffi.run_sync = _drive  # type: ignore[attr-defined]

        http = types.ModuleType("pyodide.http")

        async def pyfetch(url: Any, /, **kwargs: Any) -> Any:
            record.append(("pyfetch", url, kwargs))
            if self.fetch_error is not None:
                raise self.fetch_error
            return {"fetched": url}

        http.pyfetch = pyfetch  # type: ignore[attr-defined]

        pyodide = types.ModuleType("pyodide")
        pyodide.__path__ = []  # a package: `import pyodide.http` finds the submodules in sys.modules
        pyodide.__version__ = "0.0-fake"  # type: ignore[attr-defined]
        pyodide.code, pyodide.ffi, pyodide.http = code, ffi, http  # type: ignore[attr-defined]

        pyodide_js = types.ModuleType("pyodide_js")

        async def load_package(names: Any, options: Any) -> None:
            record.append(("loadPackage", names, options))
            callback = options["<js Object>"]["messageCallback"]
            for message in self.load_messages:
                callback(message)
            self.installed.update(str(name) for name in names if not str(name).endswith(".whl"))

        pyodide_js.loadPackage = load_package  # type: ignore[attr-defined]

        micropip = types.ModuleType("micropip")
        micropip.__path__ = []  # type: ignore[attr-defined]  # a package: micropip._compat is in sys.modules
        compat = types.ModuleType("micropip._compat")

        class Layer:  # micropip's compatibility layer: the lock it reads, the loadPackage it calls
            lockfile_packages = self.lock

            @staticmethod
            async def loadPackage(names: Any) -> None:
                record.append(("micropip loadPackage", list(names)))  # Pyodide's own: it never raises

        compat.compatibility_layer = Layer  # type: ignore[attr-defined]
        self.layer = Layer

        async def install(specs: Any, index_urls: Any = None, pre: bool = False) -> None:
            """As micropip 0.11.1 with the default index: names in the lock from Pyodide, the rest from the index."""
            record.append(("micropip.install", specs, index_urls, pre))
            if self.pip_error is not None:
                raise self.pip_error
            names = [re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower() for spec in specs]
            from_lock = [name for name in names if index_urls is None and Layer.lockfile_packages.get(name)]
            self.installed.update(name for name in names if name not in from_lock)
            if from_lock:
                await Layer.loadPackage(from_lock)

        micropip.install = install  # type: ignore[attr-defined]
        micropip._compat = compat  # type: ignore[attr-defined]

        found = {
            "js": js, "pyodide": pyodide, "pyodide.code": code, "pyodide.ffi": ffi, "pyodide.http": http,
            "pyodide_js": pyodide_js, "micropip": micropip, "micropip._compat": compat,
        }  # fmt: skip
        try:
            import cloudpickle  # noqa: F401  # the guest's own wheel, if this environment has it
        except ImportError:
            found["cloudpickle"] = fake_cloudpickle()
        return found


def fake_cloudpickle() -> types.ModuleType:
    """cloudpickle.dumps as plain pickle (what the glue needs of it: bytes that pickle.loads reads)."""
    module = types.ModuleType("cloudpickle")
    module.dumps = lambda value, protocol=None: pickle.dumps(value, protocol=protocol)  # type: ignore[attr-defined]
    return module


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
