"""SandboxKernel: an ipykernel Kernel whose cells run in a Deno + Pyodide sandbox."""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import signal
import sys
from pathlib import Path
from typing import Any

import zmq
from ipykernel.kernelbase import Kernel
from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.utils.importstring import import_item

from . import __version__, mounts, netpolicy, packages, paths, provision, skill_loader
from .audit import AuditLog
from .gatekeeper import Gatekeeper, check_policy
from .guest_events import InvalidGuestEvent, input_request
from .history import History
from .output import OutputRouter
from .sandbox import Sandbox, SandboxDied, SandboxOptions, SandboxStartError
from .skill_calls import SkillService

RESEND_INTERRUPT_EVERY = 1.0  # seconds; a rare interrupt can be missed by the guest


class SandboxKernel(Kernel):
    """Forwards every request to one persistent sandbox process."""

    implementation = "sandbox-kernel"
    implementation_version = __version__
    language = "python"

    cell_timeout = Float(
        None,
        allow_none=True,
        help="Seconds a cell may run. On expiry the cell is interrupted; if it does not stop "
        "within interrupt_grace, the sandbox is restarted. None (default): no limit.",
    ).tag(config=True)
    interrupt_grace = Float(3.0, help="Seconds an interrupted cell gets to stop before the sandbox is restarted.").tag(
        config=True
    )
    start_timeout = Float(120.0, help="Seconds the sandbox may take to start.").tag(config=True)
    max_frame_bytes = Int(64 << 20, help="Largest message accepted from the sandbox, in bytes.").tag(config=True)
    mounts = List(
        Unicode(),
        help="Host folders shown in the sandbox: 'host_folder:/guest/path[:ro|rw]' (default ro). "
        "Relative host folders are relative to the kernel's working directory.",
    ).tag(config=True)
    mount_limits = Dict(
        help="Per guest mount path: {'suffixes': ['.csv', ...], 'max_file_bytes': N} for files written there."
    ).tag(config=True)
    allow_net = List(
        Unicode(),
        help="Hosts the sandbox may connect to: 'host', 'host:port', 'IP' or 'IP:port'. None by default; "
        "loopback, private and link-local addresses stay blocked unless listed as IPs.",
    ).tag(config=True)
    memory_limit_mb = Int(1024, help="Memory for the sandbox: WebAssembly memory and the JS heap, each, in MiB.").tag(
        config=True
    )
    max_output_bytes = Int(
        10 << 20, help="Output one cell may send to the frontend; the rest is dropped with a notice."
    ).tag(config=True)
    packages = List(
        Unicode(),
        help="Packages installed in the sandbox at every start, e.g. ['six', 'attrs==23.2']: resolved on the host "
        "(pip, or SandboxKernel.wheelhouse); pure-Python or Pyodide wheels only.",
    ).tag(config=True)
    wheelhouse = Unicode(
        None, allow_none=True, help="A local folder of wheels to resolve `packages` from (offline)."
    ).tag(config=True)
    pyodide_index = Unicode(
        help="Where Pyodide's compiled packages (numpy, ...) come from: a URL or a local folder with pyodide-lock.json. "
        "Default: the CDN of the pinned Pyodide version."
    ).tag(config=True)
    spare_sandbox = Bool(
        True, help="Keep a second, pre-warmed sandbox so that a restart after a crash or timeout is instant."
    ).tag(config=True)
    use_snapshot = Bool(
        True, help="Start sandboxes from a memory snapshot of initialised Python (built once, cached per version)."
    ).tag(config=True)
    auto_load_packages = Bool(
        True, help="Load Pyodide packages that a cell imports before it runs (as Pyodide's loadPackagesFromImports)."
    ).tag(config=True)
    skills_path = Unicode(
        None, allow_none=True, help="A folder of skill files: every *.py in it, classes named ...Skill."
    ).tag(config=True)
    load_skill_entry_points = Bool(
        True, help="Also load skills from installed packages (entry-point group sandbox_kernel.skills)."
    ).tag(config=True)
    skill_policy = Dict(
        value_trait=Unicode(),
        help="Per 'Skill' or 'Skill.method': 'allow' (default), 'deny' or 'ask' (ask the person via stdin).",
    ).tag(config=True)
    skill_approver = Unicode(
        "", help="Import path of a callable(skill, method, args, kwargs) -> True/'once'/'always'/False for 'ask'."
    ).tag(config=True)
    skill_timeout = Float(30.0, help="Seconds one skill call may take on the host.").tag(config=True)
    skill_max_bytes = Int(1 << 20, help="Largest skill arguments or result, in bytes of JSON.").tag(config=True)
    audit_log = Unicode(help="JSON-lines file that records every skill call ('' to disable).").tag(config=True)

    @default("pyodide_index")
    def _default_pyodide_index(self) -> str:
        return packages.default_pyodide_index()

    @default("audit_log")
    def _default_audit_log(self) -> str:
        return str(Path(jupyter_data_dir()) / "sandbox-kernel" / "audit.jsonl")

    @validate("cell_timeout", "interrupt_grace", "start_timeout", "skill_timeout")
    def _positive_seconds(self, proposal: Any) -> Any:
        value = proposal["value"]
        if value is not None and value <= 0:
            name = proposal["trait"].name
            raise TraitError(f"SandboxKernel.{name} must be a positive number of seconds, got {value!r}")
        return value

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._history = History()
        self._skills = self._load_skills()
        try:
            self._mounts = mounts.parse_all(list(self.mounts), Path.cwd(), dict(self.mount_limits))
            allowed, _ = netpolicy.deno_flags(list(self.allow_net))
        except (mounts.MountError, netpolicy.NetPolicyError) as exc:
            raise TraitError(str(exc)) from None
        problems = netpolicy.private_resolutions(allowed)
        if problems:
            raise TraitError("; ".join(problems))
        self._blocking: set[asyncio.Task[None]] = set()
        self._pyodide_index: packages.PyodideIndex | None = None
        self._pip_installs: list[dict[str, Any]] = []  # replayed after a sandbox restart
        self._snapshot_task: asyncio.Task[Path] | None = None
        self._spare: asyncio.Task[Sandbox] | None = None
        self._launching: set[Sandbox] = set()
        self._next_count = 1
        self._sandbox: Sandbox | None = None
        self._starting: asyncio.Task[Sandbox] | None = None
        self._guest_info: dict[str, Any] = {}
        self._interrupted = asyncio.Event()
        self._running = False
        self._unreported_death: str | None = None
        atexit.register(self._kill_sandbox_now)

    # ---- skills --------------------------------------------------------------------
    def _load_skills(self) -> SkillService:
        try:
            found = skill_loader.load_directory(Path(self.skills_path)) if self.skills_path else []
            if self.load_skill_entry_points:
                found += skill_loader.load_entry_points()
        except skill_loader.SkillLoadError as exc:
            raise TraitError(str(exc)) from None
        by_name = {skill.name: skill for skill in found}
        problems = check_policy(self.skill_policy, by_name)
        if problems:
            raise TraitError("SandboxKernel.skill_policy: " + "; ".join(problems))
        approver = import_item(self.skill_approver) if self.skill_approver else None
        return SkillService(
            Gatekeeper(by_name, dict(self.skill_policy)),
            AuditLog(Path(self.audit_log) if self.audit_log else None),
            self.skill_timeout,
            self.skill_max_bytes,
            approver,
        )

    def _guest_config(self) -> dict[str, Any]:
        """What the guest needs to know to explain its limits (no host paths, no secrets)."""
        return {
            "skills": skill_loader.catalog(self._skills.gatekeeper.skills),
            "max_bytes": self.skill_max_bytes,
            "mounts": mounts.guest_config(self._mounts),
            "allow_net": list(self.allow_net),
            "memory_limit_mb": self.memory_limit_mb,
            "auto_load_packages": self.auto_load_packages,
            "pyodide_index": self.pyodide_index,
        }

    # ---- execution count (as IPython counts: only cells stored in history) ------------
    @property  # type: ignore[override]
    def execution_count(self) -> int:
        """The number the next stored cell gets (what execute_input shows)."""
        return self._next_count

    @execution_count.setter
    def execution_count(self, value: int) -> None:
        """Ignore the base class's increment for every non-silent request."""

    # ---- kernel_info -------------------------------------------------------------------
    @property
    def language_info(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "name": "python",
            "version": self._guest_info.get("python_version", "3"),
            "mimetype": "text/x-python",
            "codemirror_mode": {"name": "ipython", "version": 3},
            "pygments_lexer": "ipython3",
            "nbconvert_exporter": "python",
            "file_extension": ".py",
        }

    @property
    def banner(self) -> str:  # type: ignore[override]
        info = self._guest_info
        return (
            f"Python {info.get('python_version', '?')} (Pyodide {info.get('pyodide_version', '?')}, "
            f"IPython {info.get('ipython_version', '?')}) in a WebAssembly sandbox\n"
            f"sandbox-kernel {__version__}: no host files, network or processes unless configured.\n"
        )

    help_links = [  # noqa: RUF012
        {"text": "Python", "url": "https://docs.python.org/3/"},
        {"text": "Pyodide", "url": "https://pyodide.org/en/stable/"},
        {"text": "IPython", "url": "https://ipython.readthedocs.io/en/stable/"},
    ]

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        try:
            await self._get_sandbox()
        except SandboxStartError as exc:
            self.log.error("sandbox start failed: %s", exc)
        await super().kernel_info_request(stream, ident, parent)

    # ---- sandbox lifecycle -------------------------------------------------------------
    def start(self) -> None:
        super().start()
        loop = asyncio.get_event_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        self._starting = loop.create_task(self._start_sandbox())

    def pre_handler_hook(self) -> None:
        """SIGINT is handled by _on_sigint, never as KeyboardInterrupt in the kernel."""

    def post_handler_hook(self) -> None:
        pass

    def _say(self, message: str) -> None:
        print(message, file=sys.__stderr__, flush=True)

    async def _package_options(self) -> dict[str, Any]:
        """Wheels for `packages` and the Pyodide index, both resolved on the host (cached)."""
        await provision.ensure_pyodide(self._say)
        extra: dict[str, Any] = {"extra_wheels": [], "extra_read": []}
        if self.packages:
            wheelhouse = Path(self.wheelhouse) if self.wheelhouse else None
            folder, wheels = await packages.preinstall_wheels(list(self.packages), wheelhouse, self._say)
            extra = {"extra_wheels": wheels, "extra_read": [folder]}
        if self._pyodide_index is None:
            digest = hashlib.sha256(self.pyodide_index.encode()).hexdigest()[:12]
            cache = paths.cache_dir() / "pyodide-packages" / paths.pyodide_version() / digest
            bundled = paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json"
            self._pyodide_index = await asyncio.to_thread(packages.PyodideIndex, self.pyodide_index, cache, bundled)
            await asyncio.to_thread(cache.mkdir, parents=True, exist_ok=True)
        index = self._pyodide_index
        extra["extra_read"].append(index.cache)
        extra["pyodide_lock"] = index.lock_text
        extra["pyodide_packages"] = index.cache
        return extra

    def _options(self, **extra: Any) -> SandboxOptions:
        return SandboxOptions(
            **extra,
            start_timeout=self.start_timeout,
            max_frame_bytes=self.max_frame_bytes,
            reply_bytes=2 * self.skill_max_bytes + (64 << 10),
            use_snapshot=self.use_snapshot,
            mounts=self._mounts,
            allow_net=list(self.allow_net),
            memory_limit_mb=self.memory_limit_mb,
        )

    async def _launch(self) -> Sandbox:
        """A started and configured sandbox (not yet the kernel's current one)."""
        try:
            extra = await self._package_options()
        except (packages.PackageError, provision.ProvisionError) as exc:
            raise SandboxStartError(str(exc)) from None
        sandbox = Sandbox(self._options(**extra), self.log, self._say)
        self._launching.add(sandbox)  # so that shutdown can kill it mid-start
        try:
            self._guest_info = await sandbox.start()
            self._check_snapshot(sandbox)
            await sandbox.request("configure", self._guest_config(), lambda event: None)
        except BaseException:
            await sandbox.kill("its start failed")
            raise
        finally:
            self._launching.discard(sandbox)
        return sandbox

    async def _start_sandbox(self) -> Sandbox:
        """Make a sandbox current: the pre-warmed spare if there is one, else a new one."""
        spare, self._spare = self._spare, None
        sandbox = None
        if spare is not None and spare.done() and not spare.cancelled() and not spare.exception():
            sandbox = spare.result() if spare.result().alive else None
        elif spare is not None:
            spare.cancel()
        if sandbox is None:
            sandbox = await self._launch()
        self._sandbox = sandbox
        try:
            if self._pip_installs:  # what %pip installed before a restart
                router = OutputRouter(self._publisher(), self.log)
                router.set_request_handler(self._request_handler(sandbox, False, False, self._next_count))
                for install in self._pip_installs:
                    await sandbox.request("pip_install", install, router.on_event)
                router.flush()
        except BaseException:
            await sandbox.kill("its start failed")
            raise
        if self.spare_sandbox:
            self._spare = asyncio.get_event_loop().create_task(self._launch())
            self._spare.add_done_callback(lambda t: t.cancelled() or t.exception())
        return sandbox

    async def _get_sandbox(self) -> Sandbox:
        """The running sandbox, starting a new one if there is none or it died."""
        starting = self._starting
        if starting is None or (
            starting.done() and (starting.cancelled() or starting.exception() or not starting.result().alive)
        ):
            dead = self._sandbox
            if dead is not None and dead.death_reason and not dead.death_reported:
                self._unreported_death = dead.death_reason
                dead.death_reported = True
            self._restart_sandbox_soon()
        assert self._starting is not None
        return await asyncio.shield(self._starting)

    def _check_snapshot(self, sandbox: Sandbox) -> None:
        """Build the start-up snapshot in the background if this start could not use one."""
        if not self.use_snapshot or self._guest_info.get("snapshot") or self._snapshot_task is not None:
            return
        if sandbox.snapshot is not None:
            self.log.warning("the start-up snapshot %s could not be restored; rebuilding it", sandbox.snapshot)
            provision.drop_snapshot()
        self._snapshot_task = asyncio.get_event_loop().create_task(provision.build_snapshot(self._say))
        self._snapshot_task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _restart_sandbox_soon(self) -> None:
        self._starting = asyncio.get_event_loop().create_task(self._start_sandbox())
        self._starting.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _restart_sandbox(self, why: str) -> None:
        """Kill the current sandbox and start a fresh one in the background."""
        old = self._sandbox
        if old is not None:
            await old.kill(why)
        self._restart_sandbox_soon()

    def _kill_sandbox_now(self) -> None:
        """Kill every sandbox process of this kernel (current, spare, starting) at once."""
        others = (
            [self._spare.result()]
            if self._spare and self._spare.done() and not self._spare.cancelled() and not self._spare.exception()
            else []
        )
        for sandbox in [self._sandbox, *others, *self._launching]:
            if sandbox is not None:
                sandbox.kill_now()

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        # Runs on the control thread: kill synchronously; the main loop notices the exit.
        self._kill_sandbox_now()
        return {"status": "ok", "restart": restart}

    # ---- interrupts --------------------------------------------------------------------
    def _on_sigint(self) -> None:
        if self._running:
            self._interrupted.set()

    async def _supervise(
        self, sandbox: Sandbox, op: str, payload: dict[str, Any], router: OutputRouter, timeout: float | None
    ) -> dict[str, Any]:
        """Run one request; interrupt on SIGINT or timeout; restart if it will not stop."""
        loop = asyncio.get_running_loop()
        self._interrupted.clear()
        self._running = True
        task = asyncio.ensure_future(sandbox.request(op, payload, router.on_event))
        flag = asyncio.ensure_future(self._interrupted.wait())
        started = loop.time()
        interrupted_at: float | None = None
        timed_out = False
        restarted = False
        sends = 0
        try:
            while not task.done():
                now = loop.time()
                if interrupted_at is None:
                    wake = started + timeout if timeout else None
                else:
                    wake = min(interrupted_at + RESEND_INTERRUPT_EVERY * sends, interrupted_at + self.interrupt_grace)
                await asyncio.wait(
                    {task, flag},
                    timeout=None if wake is None else max(0.0, wake - now),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if task.done():
                    break
                now = loop.time()
                if flag.done():
                    self._interrupted.clear()
                    flag = asyncio.ensure_future(self._interrupted.wait())
                    if interrupted_at is None:
                        interrupted_at = now
                if timeout and interrupted_at is None and now >= started + timeout:
                    timed_out = True
                    interrupted_at = now
                if interrupted_at is not None:
                    if now >= interrupted_at + self.interrupt_grace:
                        why = (
                            f"the cell ran past cell_timeout={timeout:g}s and did not stop within interrupt_grace={self.interrupt_grace:g}s"
                            if timed_out
                            else f"the cell did not stop within {self.interrupt_grace:g}s of the interrupt"
                        )
                        await self._restart_sandbox(why)
                        restarted = True
                        raise SandboxDied(why)
                    if now >= interrupted_at + RESEND_INTERRUPT_EVERY * sends:
                        sandbox.interrupt()
                        sends += 1
                    for blocking in self._blocking:
                        blocking.cancel()
            reply = task.result()
            if timed_out and reply.get("status") == "error":
                reply = {
                    **reply,
                    "ename": "SandboxTimeout",
                    "evalue": f"the cell ran past cell_timeout={timeout:g}s and was interrupted; variables were kept.",
                }
                router.notice(f"SandboxTimeout: {reply['evalue']}\n")
            return reply
        except SandboxDied:
            sandbox.death_reported = True
            if self._sandbox is sandbox and not restarted:
                self._restart_sandbox_soon()
            raise
        finally:
            self._running = False
            flag.cancel()
            if not task.done():
                task.cancel()
            for blocking in self._blocking:
                blocking.cancel()
            self._blocking.clear()

    # ---- stdin -------------------------------------------------------------------------
    async def _ask_frontend(self, prompt: str, password: bool, ident: Any, parent: Any) -> str:
        """input_request to the frontend, polled without blocking the event loop."""
        assert self.session is not None
        sock = self.stdin_socket
        while True:  # drop stale replies
            try:
                sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
        self.session.send(sock, "input_request", {"prompt": prompt, "password": password}, parent, ident=ident)
        while True:
            if sock.poll(0):
                _, reply = self.session.recv(sock, zmq.NOBLOCK)
                if reply is not None:
                    return str(reply["content"].get("value", ""))
            await asyncio.sleep(0.01)

    def _request_handler(self, sandbox: Sandbox, allow_stdin: bool, in_cell: bool, count: int) -> Any:
        """Serves the guest's blocking requests (input(), skill calls) of one kernel request."""
        ident = self._get_shell_context_var(self._shell_parent_ident)
        parent = self.get_parent("shell")

        async def ask(prompt: str, password: bool = False) -> str | None:
            if not allow_stdin:
                return None
            return await self._ask_frontend(prompt, password, ident, parent)

        async def serve(event: dict[str, Any]) -> None:
            number = event.get("n")
            if not isinstance(number, int):
                return
            try:
                if event["type"] == "load_packages":
                    answer = await self._load_packages(event)
                elif event["type"] == "pip_installed":
                    self._pip_installs.append({"specs": list(event["specs"]), "index_urls": event.get("index_urls")})
                    answer = {"value": True}
                elif event["type"] == "skill_call":
                    if not in_cell:
                        answer: dict[str, Any] = {
                            "error": {"type": "SkillRefused", "message": "skills can only be called while a cell runs"}
                        }
                    else:
                        answer = await self._skills.call(event, ask, count)
                else:
                    number, prompt, password = input_request(event)
                    value = await ask(prompt, password)
                    answer = (
                        {"value": value} if value is not None else {"error": "this frontend does not support input"}
                    )
            except asyncio.CancelledError:
                return  # interrupted: the guest raises KeyboardInterrupt by itself
            except (ValueError, KeyError) as exc:
                answer = {"error": {"type": "SkillError", "message": f"bad request from the sandbox: {exc}"}}
            sandbox.answer(number, answer)

        def on_request(event: dict[str, Any]) -> None:
            task = asyncio.ensure_future(serve(event))
            self._blocking.add(task)
            task.add_done_callback(self._blocking.discard)

        return on_request

    async def _load_packages(self, event: dict[str, Any]) -> dict[str, Any]:
        """Fetch the Pyodide packages that provide `imports` into the guest's package folder."""
        index = self._pyodide_index
        if index is None:
            return {"value": []}
        wanted = {index.by_import[i] for i in event.get("imports", []) if i in index.by_import}
        wanted |= {index.canonical(n) for n in event.get("packages", []) if index.canonical(n) in index.packages}
        names = sorted(wanted)
        try:
            await asyncio.to_thread(index.fetch, names)
        except packages.PackageError as exc:
            return {"error": {"type": "PackageError", "message": str(exc)}}
        return {"value": names}

    # ---- requests ----------------------------------------------------------------------
    def _publisher(self) -> Any:
        parent = self.get_parent("shell")

        def send(msg_type: str, content: dict[str, Any]) -> None:
            assert self.session is not None
            topic = self._topic(f"stream.{content['name']}" if msg_type == "stream" else msg_type)
            self.session.send(self.iopub_socket, msg_type, content, parent, ident=topic)

        return send

    def _error_reply(self, ename: str, evalue: str, router: OutputRouter) -> dict[str, Any]:
        content = {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
        router.publish("error", content)
        return {
            "status": "error",
            **content,
            "execution_count": self.execution_count,
            "user_expressions": {},
            "payload": [],
        }

    async def do_execute(  # type: ignore[override]
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: Any = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        router = OutputRouter(self._publisher(), self.log, max_bytes=self.max_output_bytes)
        store_history = store_history and not silent
        count = self._next_count
        entry = self._history.add(count, code) if store_history else None
        try:
            sandbox = await self._get_sandbox()
        except (SandboxStartError, SandboxDied) as exc:
            return self._error_reply("SandboxUnavailable", f"the sandbox could not be started: {exc}", router)
        router.set_request_handler(self._request_handler(sandbox, allow_stdin, True, count))
        if self._unreported_death:
            router.notice(
                f"SandboxRestarted: {self._unreported_death}; the sandbox was restarted and all variables were lost.\n"
            )
            self._unreported_death = None
        payload = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": user_expressions or {},
            "allow_stdin": allow_stdin,
            "execution_count": count,
            "cell_id": cell_id,
        }
        try:
            reply = await self._supervise(sandbox, "execute", payload, router, self.cell_timeout)
        except InvalidGuestEvent as exc:
            return self._error_reply("SandboxProtocolError", f"the sandbox sent an invalid reply ({exc})", router)
        except SandboxDied as exc:
            reason = exc.reason
            if "cell_timeout" in reason:
                ename = "SandboxTimeout"
            else:
                ename = "SandboxRestarted"
            return self._error_reply(ename, f"{reason}; the sandbox was restarted and all variables were lost.", router)
        finally:
            for mount in self._mounts:
                for notice in await asyncio.to_thread(mounts.enforce_limits, mount):
                    router.notice(f"[{notice}]\n")
            router.flush()
            if store_history:
                self._next_count += 1
        if entry is not None:
            entry.output = router.last_result_text
        reply["execution_count"] = self._next_count - 1
        return reply

    async def _simple_request(self, op: str, payload: dict[str, Any], fallback: dict[str, Any]) -> dict[str, Any]:
        try:
            sandbox = await self._get_sandbox()
            router = OutputRouter(self._publisher(), self.log)
            router.set_request_handler(self._request_handler(sandbox, False, False, self._next_count))
            return await asyncio.wait_for(sandbox.request(op, payload, router.on_event), timeout=30)
        except (SandboxStartError, SandboxDied, asyncio.TimeoutError, ValueError) as exc:
            self.log.warning("%s failed: %s", op, exc)
            return fallback

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:  # type: ignore[override]
        pos = len(code) if cursor_pos is None else cursor_pos
        empty = {"status": "ok", "matches": [], "cursor_start": pos, "cursor_end": pos, "metadata": {}}
        return await self._simple_request("complete", {"code": code, "cursor_pos": pos}, empty)

    async def do_inspect(
        self, code: str, cursor_pos: int | None, detail_level: int = 0, omit_sections: Any = ()
    ) -> dict[str, Any]:  # type: ignore[override]
        payload = {
            "code": code,
            "cursor_pos": cursor_pos,
            "detail_level": detail_level,
            "omit_sections": list(omit_sections),
        }
        return await self._simple_request(
            "inspect", payload, {"status": "ok", "found": False, "data": {}, "metadata": {}}
        )

    async def do_is_complete(self, code: str) -> dict[str, Any]:  # type: ignore[override]
        return await self._simple_request("is_complete", {"code": code}, {"status": "unknown"})

    async def do_history(
        self,
        hist_access_type: str,
        output: bool,
        raw: bool,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:  # type: ignore[override]
        try:
            history = self._history.query(hist_access_type, output, raw, session, start, stop, n, pattern, unique)
        except ValueError as exc:
            return {"status": "error", "ename": "ValueError", "evalue": str(exc), "traceback": [], "history": []}
        return {"status": "ok", "history": history}
