"""SandboxKernel: an ipykernel Kernel whose cells run in a Deno + Pyodide sandbox."""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ipykernel.kernelbase import Kernel
from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.utils.importstring import import_item

from sandbox_kernel import __version__, paths
from sandbox_kernel.checkpoints import cells as checkpoint_cells
from sandbox_kernel.checkpoints import file as checkpoint_file
from sandbox_kernel.checkpoints.cells import CheckpointCollector, CheckpointFolder, KernelMagic
from sandbox_kernel.jupyter.guest_services import GuestServiceDesk, PipReplays, RequestContext
from sandbox_kernel.jupyter.history import History
from sandbox_kernel.jupyter.output import OutputRouter, guest_text, size_of
from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.jupyter.stdin_gate import StdinGate
from sandbox_kernel.packages import index as packages
from sandbox_kernel.protocol import schema as guest_schema
from sandbox_kernel.protocol.dispatcher import RequestDispatcher
from sandbox_kernel.sandbox import host_places, mounts, netpolicy, private_folders, provision
from sandbox_kernel.sandbox.oslayers.report import describe as describe_layers
from sandbox_kernel.sandbox.oslayers.spec import LAYERS, MODES
from sandbox_kernel.sandbox.pool import SandboxPool
from sandbox_kernel.sandbox.process import GuestListener, SandboxDied, SandboxOptions, SandboxProcess, SandboxStartError
from sandbox_kernel.sandbox.supervision import Action, StopCause, Supervisor
from sandbox_kernel.skills import loader as skill_loader
from sandbox_kernel.skills.audit import AuditLog
from sandbox_kernel.skills.calls import SkillService
from sandbox_kernel.skills.gatekeeper import Gatekeeper, check_policy

SIMPLE_REQUEST_TIMEOUT = 30.0  # seconds for completion, inspection, is_complete, configure
REPLAY_TIMEOUT = 120.0  # seconds for one %pip install replayed after a restart
MAX_CHECKPOINT_PART = 8 << 20  # bytes of a checkpoint per message, either way
WORKING_FOLDER = "/work"  # where working_folder puts the kernel's folder in the guest
KERNEL_INFO_WAIT = 30.0  # seconds kernel_info waits for the sandbox (a first start fetches and builds)
SHORT_EVALUE = 1000  # characters of an error's message kept when the cell's output budget is spent
OVER_BUDGET = {
    "status": "error",
    "ename": "OutputTruncated",
    "evalue": "this value passed the cell's max_output_bytes",
    "traceback": [],
}
ERROR_NAMES = {
    StopCause.TIMEOUT: "SandboxTimeout",
    StopCause.INTERRUPT: "SandboxRestarted",
    StopCause.CRASH: "SandboxRestarted",
}


def _ok_reply() -> dict[str, Any]:
    """The execute reply of a cell the kernel handled itself (%checkpoint, %restore) without an error."""
    return {"status": "ok", "user_expressions": {}, "payload": []}


class SandboxKernel(Kernel):
    """Forwards every request to one persistent sandbox process."""

    implementation = "sandbox-kernel"
    implementation_version = __version__
    language = "python"
    _execute_sleep = 0.0  # ipykernel sleeps after each cell to let its own output threads flush; ours do not

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
        10 << 20,
        help="Output one cell may send to the frontend (every message, and its reply's payload); the rest is "
        "dropped with a notice.",
    ).tag(config=True)
    trust_output = Bool(
        False,
        help="Send the guest's output unchanged, JavaScript and scripts in HTML included. Only for code you trust: "
        "JupyterLab runs such output with the rights of your Jupyter session.",
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
        help="Where Pyodide's compiled packages (numpy, ...) come from: an http(s) URL, a file:// URL or a local "
        "folder, each with its pyodide-lock.json (without one, Pyodide's own lock names the files). "
        "Default: the CDN of the pinned Pyodide version."
    ).tag(config=True)
    spare_sandbox = Enum(
        ["auto", True, False],
        default_value="auto",
        help="Keep a second, pre-warmed sandbox so that a restart after a crash or timeout is instant (~0.1 s "
        "instead of ~0.4 s), at the cost of a second Deno process (~150 MiB PSS). 'auto': from the start when "
        "cell_timeout is set, otherwise from the first restart or checkpoint (of any client) on.",
    ).tag(config=True)
    max_checkpoint_bytes = Int(
        512 << 20, help="Largest session state %checkpoint may save (and %restore read back), in bytes."
    ).tag(config=True)
    max_checkpoints = Int(
        20, help="Named checkpoints one kernel keeps (%checkpoint NAME; reusing a name replaces that one)."
    ).tag(config=True)
    use_snapshot = Bool(
        True, help="Start sandboxes from a memory snapshot of initialised Python (built once, cached per version)."
    ).tag(config=True)
    auto_load_packages = Bool(
        True, help="Load Pyodide packages that a cell imports before it runs (as Pyodide's loadPackagesFromImports)."
    ).tag(config=True)
    skills = List(
        Unicode(),
        help="Skills the guest may call, by name or import path: a shipped example ('TimeSkill', 'KeyValueSkill', "
        "'SignerSkill'), 'package.module.Class' or 'package.module' (its ...Skill classes). None by default.",
    ).tag(config=True)
    skills_path = Unicode(
        None, allow_none=True, help="A folder of skill files: every *.py in it, classes named ...Skill."
    ).tag(config=True)
    load_skill_entry_points = Bool(
        False, help="Also load skills that installed packages publish (entry-point group sandbox_kernel.skills)."
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
    working_folder = Enum(
        ("off", "ro", "rw"),
        "off",
        help="Mount the kernel's working folder (in JupyterLab: the notebook's folder) at /work, read-only ('ro') or "
        "read-write ('rw'), and make it the guest's working folder, so that open('data.csv') finds the file next "
        "to the notebook. 'off': the guest sees no host file unless `mounts` names it.",
    ).tag(config=True)
    os_sandbox = Enum(
        MODES,
        "auto",
        help="OS confinement of the sandbox process behind Deno's permissions (Linux): 'auto' uses every layer "
        "available and logs which; 'required' refuses to start when one of os_layers is missing; 'off' uses none.",
    ).tag(config=True)
    os_layers = List(
        Enum(LAYERS),
        list(LAYERS),
        help="The OS layers os_sandbox applies: 'namespaces' (user, IPC, UTS and, without allow_net, network), "
        "'landlock' (files, TCP ports, signals), 'seccomp' (dangerous system calls, new processes).",
    ).tag(config=True)

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
        # What is wrong with the settings (the app adds what it found before the kernel was made): while
        # there is anything, no sandbox starts and every cell answers with SandboxSettingsError.
        self.settings_problems: list[str] = []
        self._history = History()
        self._mounts: list[mounts.Mount] = []
        allowed: list[str] = []
        try:
            self._mounts = mounts.parse_all(self._mount_specs(), Path.cwd(), dict(self.mount_limits))
        except mounts.MountError as exc:
            self.settings_problems.append(f"SandboxKernel.mounts, mount_limits or working_folder: {exc}")
        # Before any skill is imported: nothing the kernel loads may lie where guest code can write.
        self.settings_problems += self._host_place_problems()
        try:
            self._skills = self._load_skills() if not self.settings_problems else self._no_skills()
        except TraitError as exc:
            self.settings_problems.append(str(exc))
            self._skills = self._no_skills()
        try:
            allowed, _ = netpolicy.deno_flags(list(self.allow_net))
            self.settings_problems += [f"SandboxKernel.allow_net: {p}" for p in netpolicy.private_resolutions(allowed)]
        except netpolicy.NetPolicyError as exc:
            self.settings_problems.append(f"SandboxKernel.allow_net: {exc}")
        image_hosts = [netpolicy.split_entry(entry)[0] for entry in allowed]
        self._sanitizer = OutputSanitizer(trusted=self.trust_output, image_hosts=image_hosts)
        self._pyodide_index: packages.PyodideIndex | None = None
        self._pip_replays = PipReplays()
        self._snapshot_task: asyncio.Task[Path] | None = None
        auto = self.spare_sandbox == "auto"
        from_start = self.spare_sandbox is True or (auto and bool(self.cell_timeout))
        self._pool = SandboxPool(self._launch, self._replay_pip, from_start, self.log, spare_after_restart=auto)
        self._stdin: StdinGate | None = None
        self._next_count = 1
        self._guest_info: dict[str, Any] = {}
        self._pyodide_verified = False  # the cached Pyodide's contents were checked by this kernel process
        self._pyodide_lock = asyncio.Lock()
        self._os_report: dict[str, Any] = {}  # the OS layers of the latest sandbox (oslayers.launch)
        self._layers_known = asyncio.Event()  # the first sandbox's launcher has reported
        self._versions = provision.guest_versions()  # the guest's Python, Pyodide and IPython, known on the host
        self._interrupted = asyncio.Event()
        self._sweep: asyncio.Task[list[Path]] | None = None
        self._running = False
        self._reply_metadata: dict[str, Any] = {}
        self._checkpoints = CheckpointFolder(private_folders.make(), self.max_checkpoints)
        atexit.register(SandboxPool.kill_all_now)
        atexit.register(shutil.rmtree, self._checkpoints.folder, True)

    # ---- skills --------------------------------------------------------------------
    def _load_skills(self) -> SkillService:
        try:
            found = skill_loader.load_configured(list(self.skills))
            if self.skills_path:
                found += skill_loader.load_directory(Path(self.skills_path))
            if self.load_skill_entry_points:
                found += skill_loader.load_entry_points()
            by_name = skill_loader.by_name(found)
        except skill_loader.SkillLoadError as exc:
            raise TraitError(str(exc)) from None
        problems = check_policy(self.skill_policy, by_name)
        if problems:
            raise TraitError("SandboxKernel.skill_policy: " + "; ".join(problems))
        try:
            approver = import_item(self.skill_approver) if self.skill_approver else None
        except (ImportError, ValueError) as exc:
            raise TraitError(
                f"SandboxKernel.skill_approver {self.skill_approver!r} cannot be imported: {exc}"
            ) from None
        return SkillService(
            Gatekeeper(by_name, dict(self.skill_policy)),
            AuditLog(Path(self.audit_log) if self.audit_log else None),
            self.skill_timeout,
            self.skill_max_bytes,
            approver,
        )

    def _host_place_problems(self) -> list[str]:
        """Mounts that would show guest code the kernel's secrets or let it change what the host runs."""
        problems = []
        if self.working_folder != "off":
            problem = host_places.working_folder_problem(Path.cwd())
            if problem:
                problems.append(f"SandboxKernel.working_folder: {problem}")
        loaded = self._config_files
        extra = [host_places.Place(Path(p).resolve(), "a configuration file the kernel loaded") for p in loaded]
        for name, value in (("skills_path", self.skills_path), ("wheelhouse", self.wheelhouse)):
            if value:
                extra.append(host_places.Place(Path(value).resolve(), f"SandboxKernel.{name}"))
        local_index = host_places.local_folder(self.pyodide_index)
        if local_index is not None:
            extra.append(host_places.Place(local_index, "SandboxKernel.pyodide_index"))
        if self.audit_log:
            extra.append(host_places.Place(Path(self.audit_log).resolve(), "the audit log", secret=True))
        places = host_places.kernel_places(extra)
        found = host_places.mount_problems(self._mounts, places)
        problems += [f"SandboxKernel.mounts or working_folder: {p}" for p in found]
        return problems

    @property
    def _config_files(self) -> list[str]:
        """The configuration files the kernel's application loaded (none when the kernel is made another way)."""
        return list(getattr(self.parent, "loaded_config_files", None) or [])

    def _mount_specs(self) -> list[str]:
        """`mounts`, and the kernel's working folder at WORKING_FOLDER when `working_folder` asks for it."""
        specs = list(self.mounts)
        if self.working_folder != "off":
            specs.append(f"{Path.cwd()}:{WORKING_FOLDER}:{self.working_folder}")
        return specs

    def _no_skills(self) -> SkillService:
        """No skill at all (while the settings are wrong)."""
        return SkillService(Gatekeeper({}, {}), AuditLog(None), self.skill_timeout, self.skill_max_bytes, None)

    @property
    def settings_error(self) -> str:
        """The whole message a user sees while the settings are wrong ('' when they are fine)."""
        if not self.settings_problems:
            return ""
        listed = "\n".join(f"- {problem}" for problem in self.settings_problems)
        return (
            "the kernel's settings are wrong, so no code runs until they are fixed and the kernel is restarted:\n"
            f"{listed}"
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
            "cwd": WORKING_FOLDER if self.working_folder != "off" else None,
        }

    # ---- execution count (as IPython counts: only cells stored in history) ------------
    @property
    def execution_count(self) -> int:
        """The number the next stored cell gets (what execute_input shows)."""
        return self._next_count

    @execution_count.setter
    def execution_count(self, value: int) -> None:
        """Ignore the base class's increment for every non-silent request."""

    # ---- kernel_info -------------------------------------------------------------------
    @property
    def _guest_versions(self) -> dict[str, str]:
        """The guest's versions: as the running guest reports them, else as the host knows them."""
        return {**self._versions, **{k: str(v) for k, v in self._guest_info.items() if k in self._versions}}

    @property
    def language_info(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "name": "python",
            "version": self._guest_versions["python_version"],
            "mimetype": "text/x-python",
            "codemirror_mode": {"name": "ipython", "version": 3},
            "pygments_lexer": "ipython3",
            "nbconvert_exporter": "python",
            "file_extension": ".py",
        }

    @property
    def kernel_info(self) -> dict[str, Any]:
        """ipykernel's kernel_info, plus what confines this kernel's sandbox (for agents and tools)."""
        facts = {
            "os_sandbox": self._os_report,
            "settings_error": self.settings_error,
            "settings_problems": list(self.settings_problems),
            "checkpoint_folder": str(self._checkpoints.folder),  # clients of this user may put checkpoints here
            "max_checkpoints": self.max_checkpoints,  # named ones kept at once (the MCP server keeps as many)
            "mounts": mounts.guest_config(self._mounts),  # guest paths and rules, as the guest knows them
            "skills": self._skills.gatekeeper.described(),  # each method with its policy
            "skill_approver": bool(self._skills.approver),  # 'ask' calls go to it, not to the frontend
        }
        return {**super().kernel_info, "sandbox_kernel": facts}

    @property
    def banner(self) -> str:  # type: ignore[override]
        info = self._guest_versions
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
        """Answered once the first sandbox's OS layers are known (its launcher reports them ~50 ms after the
        spawn, long before Python is up), or its start failed, or after KERNEL_INFO_WAIT seconds at most: a start
        that fails or hangs is told at the first cell. The versions in the reply are known on the host."""
        if not self.settings_problems and not self._layers_known.is_set():
            started: asyncio.Future[Any] = asyncio.ensure_future(asyncio.shield(self._pool.get()))
            layers: asyncio.Future[Any] = asyncio.ensure_future(self._layers_known.wait())
            done, _ = await asyncio.wait({started, layers}, timeout=KERNEL_INFO_WAIT, return_when="FIRST_COMPLETED")
            layers.cancel()
            if started in done and started.exception() is not None:
                self.log.error("sandbox start failed: %s", started.exception())
            elif not done:
                self.log.warning("kernel_info answered before the sandbox was up (%.0f s)", KERNEL_INFO_WAIT)
            if started not in done:
                started.cancel()
        await super().kernel_info_request(stream, ident, parent)

    # ---- sandbox lifecycle -------------------------------------------------------------
    def start(self) -> None:
        super().start()
        loop = asyncio.get_event_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        assert self.session is not None
        self._stdin = StdinGate(self.session, self.stdin_socket, self.log)
        if self.settings_problems:
            self.log.error("%s", self.settings_error)
        else:
            loop.call_soon(self._pool.start_soon)
        self._sweep = loop.create_task(asyncio.to_thread(private_folders.sweep))  # folders of killed kernels

    def pre_handler_hook(self) -> None:
        """SIGINT is handled by _on_sigint, never as KeyboardInterrupt in the kernel."""

    def post_handler_hook(self) -> None:
        pass

    def _say(self, message: str) -> None:
        print(message, file=sys.__stderr__, flush=True)

    async def _package_options(self) -> dict[str, Any]:
        """Pyodide, the guest's wheels, `packages` and the Pyodide index: provisioned on the host (cached)."""
        pyodide_dir = await self._ensure_pyodide(thorough=not self._pyodide_verified)
        self._pyodide_verified = True
        guest_site = await provision.ensure_guest_site(self._say)
        if self._pyodide_index is None:
            digest = hashlib.sha256(self.pyodide_index.encode()).hexdigest()[:12]
            cache = paths.cache_dir() / "pyodide-packages" / paths.pyodide_version() / digest
            bundled = paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json"
            self._pyodide_index = await asyncio.to_thread(packages.PyodideIndex, self.pyodide_index, cache, bundled)
            await asyncio.to_thread(cache.mkdir, parents=True, exist_ok=True)
            for note in self._pyodide_index.notes:
                self.log.warning("SandboxKernel.pyodide_index: %s; using Pyodide's own lock file", note)
        index = self._pyodide_index
        extra: dict[str, Any] = {
            "pyodide_dir": pyodide_dir, "guest_site": guest_site, "extra_wheels": [], "extra_read": [],
        }  # fmt: skip
        if self.packages:
            wheelhouse = Path(self.wheelhouse) if self.wheelhouse else None
            folder, wheels = await packages.preinstall_wheels(
                list(self.packages), wheelhouse, self._say, index.abi_version
            )
            extra.update(extra_wheels=wheels, extra_read=[folder])
        extra["extra_read"].append(index.cache)
        extra["pyodide_lock"] = index.lock_text
        extra["pyodide_packages"] = index.cache
        return extra

    def _options(self, **extra: Any) -> SandboxOptions:
        return SandboxOptions(
            **extra,
            start_timeout=self.start_timeout,
            max_frame_bytes=self.max_frame_bytes,
            max_event_bytes=self._max_event_bytes,
            reply_bytes=2 * self.skill_max_bytes + (64 << 10),
            use_snapshot=self.use_snapshot,
            mounts=self._mounts,
            allow_net=list(self.allow_net),
            memory_limit_mb=self.memory_limit_mb,
            os_sandbox=self.os_sandbox,
            os_layers=list(self.os_layers),
        )

    @property
    def _request_bytes(self) -> int:
        """The largest request the guest's glue makes: skill arguments plus room for the rest."""
        return self.skill_max_bytes + (64 << 10)

    @property
    def _max_event_bytes(self) -> int:
        """The largest guest event the host passes on: a cell's whole output budget, or a request."""
        return max(self.max_output_bytes, self._request_bytes) + (64 << 10)

    async def _ensure_pyodide(self, thorough: bool, problems: list[str] | None = None) -> Path:
        """The cached Pyodide, checked (contents too with `thorough`) and fetched again if damaged; one at a time."""
        async with self._pyodide_lock:
            return await provision.ensure_pyodide(self._say, thorough, problems)

    async def _launch(self) -> SandboxProcess:
        """A started and configured sandbox (not yet the kernel's current one).

        A start that fails is often a damaged cache: the Pyodide files' contents are checked then, and
        when they were damaged (and could be fetched again) the start is tried once more.
        """
        try:
            return await self._launch_once()
        except SandboxStartError:
            problems = await asyncio.to_thread(provision.pyodide_problems, True)
            if not problems:
                raise
        try:
            await self._ensure_pyodide(thorough=True, problems=problems)
        except provision.ProvisionError as exc:
            raise SandboxStartError(str(exc)) from None
        return await self._launch_once()

    async def _launch_once(self) -> SandboxProcess:
        if self.settings_problems:  # only completion, inspection, is_complete: a cell answers with the error first
            raise SandboxStartError(self.settings_error)
        try:
            extra = await self._package_options()
        except (packages.PackageError, provision.ProvisionError) as exc:
            raise SandboxStartError(str(exc)) from None
        except Exception as exc:  # a bug or a damaged file we do not check: the user still gets a reply
            self.log.exception("preparing the sandbox failed")
            raise SandboxStartError(f"preparing the sandbox failed: {type(exc).__name__}: {exc}") from None
        sandbox = SandboxProcess(self._options(**extra), self.log, self._say, on_layers=self._log_os_layers)
        try:
            self._guest_info = await sandbox.start()
            self._check_snapshot(sandbox)
            await self._background_request(sandbox, "configure", self._guest_config(), SIMPLE_REQUEST_TIMEOUT)
        except BaseException:
            await sandbox.kill("its start failed")
            raise
        return sandbox

    def _log_os_layers(self, report: dict[str, Any]) -> None:
        """Log the layers once per kernel, and again only when they change (warning when any is missing)."""
        self._layers_known.set()
        if report == self._os_report:
            return
        self._os_report = report
        log = self.log.warning if report.get("missing") else self.log.info
        log("%s", describe_layers(report))

    async def _background_request(
        self, sandbox: SandboxProcess, op: str, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """A request of the kernel's own (no cell): its output goes to whichever cell is current."""
        router = OutputRouter(self._publisher(), self.max_output_bytes)
        dispatcher = self._dispatcher(router, sandbox, False, False)
        try:
            return await asyncio.wait_for(sandbox.request(op, payload, dispatcher), timeout)
        finally:
            dispatcher.finish()

    async def _replay_pip(self, sandbox: SandboxProcess) -> None:
        """Install again, in a new sandbox, what %pip installed before the restart (bounded in time)."""
        for install in self._pip_replays.installs:
            try:
                await self._background_request(sandbox, "pip_install", install, REPLAY_TIMEOUT)
            except (asyncio.TimeoutError, guest_schema.InvalidGuestMessage) as exc:
                self.log.warning("replaying %%pip install %s failed: %r", guest_text(" ".join(install["specs"])), exc)

    def _check_snapshot(self, sandbox: SandboxProcess) -> None:
        """Build the start-up snapshot in the background if this start could not use one."""
        if not self.use_snapshot or self._guest_info.get("snapshot") or self._snapshot_task is not None:
            return
        if sandbox.snapshot is not None:
            self.log.warning("the start-up snapshot %s could not be restored; rebuilding it", sandbox.snapshot)
            provision.drop_snapshot()
        self._snapshot_task = asyncio.get_event_loop().create_task(provision.build_snapshot(self._say))
        self._snapshot_task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        # Runs on the control thread: kill synchronously; the main loop notices the exit.
        SandboxPool.kill_all_now()
        shutil.rmtree(self._checkpoints.folder, ignore_errors=True)
        return {"status": "ok", "restart": restart}

    # ---- interrupts --------------------------------------------------------------------
    def _on_sigint(self) -> None:
        if self._running:
            self._interrupted.set()

    async def _supervise(
        self,
        sandbox: SandboxProcess,
        payload: dict[str, Any],
        dispatcher: RequestDispatcher,
        op: str = "execute",
        listener: GuestListener | None = None,
    ) -> tuple[dict[str, Any], Supervisor]:
        """Run one cell (request `op`); interrupt on SIGINT or cell_timeout; restart the sandbox if it will not
        stop. What the sandbox sends goes to `listener` (default: the dispatcher)."""
        loop = asyncio.get_running_loop()
        supervisor = Supervisor(started=loop.time(), timeout=self.cell_timeout, grace=self.interrupt_grace)
        self._interrupted.clear()
        self._running = True
        task = asyncio.ensure_future(sandbox.request(op, payload, listener or dispatcher))
        flag = asyncio.ensure_future(self._interrupted.wait())
        try:
            while not task.done():
                wake = supervisor.next_wake()
                timeout = None if wake is None else max(0.0, wake - loop.time())
                await asyncio.wait({task, flag}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    break
                if flag.done():
                    self._interrupted.clear()
                    flag = asyncio.ensure_future(self._interrupted.wait())
                    dispatcher.interrupt_shown = False
                    actions = supervisor.interrupt(loop.time())
                else:
                    # Untrusted, but it can only stop the re-sends: the restart after the grace still comes.
                    supervisor.taken = dispatcher.interrupt_shown
                    actions = supervisor.tick(loop.time())
                for action in actions:
                    if action is Action.SEND_INTERRUPT:
                        sandbox.interrupt()
                        dispatcher.cancel_open()
                    elif action is Action.RESTART and supervisor.cause is not None:
                        await self._pool.restart(self._stop_reason(supervisor), supervisor.cause)
            return task.result(), supervisor
        except SandboxDied:
            self._pool.died_under_request(sandbox)
            raise
        finally:
            self._running = False
            flag.cancel()
            if not task.done():
                task.cancel()

    def _stop_reason(self, supervisor: Supervisor) -> str:
        if supervisor.cause is StopCause.TIMEOUT:
            return (
                f"the cell ran past cell_timeout={self.cell_timeout:g}s and did not stop within "
                f"interrupt_grace={self.interrupt_grace:g}s"
            )
        return f"the cell did not stop within {self.interrupt_grace:g}s of the interrupt"

    # ---- requests ----------------------------------------------------------------------
    def _publisher(self) -> Any:
        parent = self.get_parent("shell")

        def send(msg_type: str, content: dict[str, Any], metadata: dict[str, Any]) -> None:
            assert self.session is not None
            topic = self._topic(f"stream.{content['name']}" if msg_type == "stream" else msg_type)
            self.session.send(self.iopub_socket, msg_type, content, parent, ident=topic, metadata=metadata)

        return send

    async def _ask(self, prompt: str, password: bool, ident: Any, parent: Any, metadata: dict[str, Any] | None) -> str:
        assert self._stdin is not None
        return await self._stdin.ask(prompt, password, ident, parent, metadata)

    def _dispatcher(
        self, router: OutputRouter, sandbox: SandboxProcess, allow_stdin: bool, in_cell: bool
    ) -> RequestDispatcher:
        context = RequestContext(
            allow_stdin=allow_stdin,
            in_cell=in_cell,
            execution_count=self._next_count,
            ident=self._get_shell_context_var(self._shell_parent_ident),
            parent=self.get_parent("shell"),
        )

        async def ask(prompt: str, password: bool, ident: Any, parent: Any, metadata: dict[str, Any] | None) -> str:
            router.flush()  # what the cell printed before the prompt reaches the frontend first
            return await self._ask(prompt, password, ident, parent, metadata)

        desk = GuestServiceDesk(
            context,
            ask,
            lambda text: router.notice(text, "approval_view", "stdout"),
            self._skills,
            self._pyodide_index,
            self._pip_replays,
        )
        return RequestDispatcher(
            router,
            self._sanitizer,
            desk,
            sandbox.answer,
            self.log,
            self._request_bytes,
            on_broken=lambda why: sandbox.kill_soon(f"it broke the protocol ({why})"),
        )

    def _error_reply(self, ename: str, evalue: str, router: OutputRouter) -> dict[str, Any]:
        content = {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
        router.kernel_message("error", content, ename)
        return {"status": "error", **content, "user_expressions": {}, "payload": []}

    def _clean_reply(self, reply: dict[str, Any], router: OutputRouter) -> dict[str, Any]:
        """The guest's execute reply: pager pages and expression values cleaned, everything within budget."""
        payload = []
        for item in reply["payload"]:
            if isinstance(item.get("data"), dict):
                item = {**item, "data": self._sanitizer.bundle(item["data"]).data}
            if router.spend(size_of(item)):
                payload.append(item)
        expressions = {}
        for name, value in reply["user_expressions"].items():
            if isinstance(value, dict) and isinstance(value.get("data"), dict):
                value = {**value, "data": self._sanitizer.bundle(value["data"], value.get("metadata")).data}
            expressions[name] = value if router.spend(size_of(value)) else OVER_BUDGET
        clean = {**reply, "payload": payload, "user_expressions": expressions}
        if reply["status"] == "error" and not router.spend(size_of([reply["evalue"], reply["traceback"]])):
            clean["evalue"] = reply["evalue"][:SHORT_EVALUE] + " [... cut: max_output_bytes]"
            clean["traceback"] = []
        return clean

    def finish_metadata(self, parent: Any, metadata: dict[str, Any], reply_content: dict[str, Any]) -> dict[str, Any]:
        """The reply's metadata: ipykernel's, plus what the kernel itself says about the cell."""
        metadata = super().finish_metadata(parent, metadata, reply_content)
        if self._reply_metadata:
            metadata["sandbox_kernel"] = self._reply_metadata
        return metadata

    async def do_execute(
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
        router = OutputRouter(self._publisher(), self.max_output_bytes)
        store_history = store_history and not silent
        count = self._next_count
        entry = self._history.add(count, code) if store_history else None
        facts: dict[str, Any] = {"timed_out": False, "restarted": False}
        self._reply_metadata = facts
        metrics: dict[str, Any] = {"cpu_s": 0.0, "peak_memory_bytes": None, "skill_calls": 0}
        started = time.monotonic()
        try:
            reply = await self._kernel_magic(code, router, facts, metrics)
            if reply is None:
                reply = await self._execute(
                    code, silent, store_history, user_expressions, allow_stdin, cell_id, router, facts, metrics
                )
        except Exception as exc:  # no path may end without an execute_reply
            self.log.exception("executing a cell failed in the kernel")
            reply = self._error_reply("SandboxKernelError", f"the kernel failed to run this cell: {exc!r}", router)
        finally:
            router.flush()
            if store_history:
                self._next_count += 1
        if entry is not None:
            entry.output = router.last_result_text
        reply["execution_count"] = self._next_count - 1
        facts["metrics"] = cell = {
            "wall_s": round(time.monotonic() - started, 6),
            **metrics,
            "output_bytes": router.spent,
        }
        self._skills.audit.record(kind="cell", execution_count=reply["execution_count"], **cell)
        return reply

    async def _execute(
        self,
        code: str,
        silent: bool,
        store_history: bool,
        user_expressions: dict[str, Any] | None,
        allow_stdin: bool,
        cell_id: str | None,
        router: OutputRouter,
        facts: dict[str, Any],
        metrics: dict[str, Any],
        op: str = "execute",
        extra: dict[str, Any] | None = None,
        listen: Callable[[SandboxProcess, RequestDispatcher], GuestListener] | None = None,
    ) -> dict[str, Any]:
        """Run one cell; `facts` (the reply's sandbox_kernel metadata) learns whether it timed out or restarted,
        `metrics` what the sandbox spent on it (CPU, wasm memory, skill calls). A kernel magic runs as request `op`
        with `extra` in its payload; `listen`, called just before the request is sent, gives its listener."""
        if self.settings_problems:
            return self._error_reply("SandboxSettingsError", self.settings_error, router)
        payload = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": user_expressions or {},
            "allow_stdin": allow_stdin,
            "execution_count": self._next_count,
            "cell_id": cell_id,
            **(extra or {}),
        }
        for attempt in range(2):  # a sandbox that died before the cell began is replaced once
            try:
                sandbox = await self._pool.get()
            except (SandboxStartError, SandboxDied) as exc:
                return self._error_reply("SandboxUnavailable", f"the sandbox could not be started: {exc}", router)
            death = self._pool.take_unreported_death()
            if death:
                facts["restarted"] = True
                router.notice(
                    f"SandboxRestarted: {death}; the sandbox was restarted and all variables were lost.\n", "restarted"
                )
            dispatcher = self._dispatcher(router, sandbox, allow_stdin, True)
            cpu_before = sandbox.cpu_seconds()
            try:
                listener = listen(sandbox, dispatcher) if listen is not None else None
                reply, supervisor = await self._supervise(sandbox, payload, dispatcher, op, listener)
                break
            except guest_schema.InvalidGuestMessage as exc:
                return self._error_reply("SandboxProtocolError", f"the sandbox sent an invalid reply ({exc})", router)
            except SandboxDied as exc:
                facts.update(restarted=True, timed_out=exc.cause is StopCause.TIMEOUT)
                if attempt == 0 and not exc.started and exc.cause is StopCause.CRASH:
                    # It died before this cell began (e.g. of something a previous cell left behind).
                    router.notice(
                        f"SandboxRestarted: {exc.reason}; the sandbox was restarted and all variables were lost.\n",
                        "restarted",
                    )
                    continue
                return self._error_reply(
                    ERROR_NAMES[exc.cause],
                    f"{exc.reason}; the sandbox was restarted and all variables were lost.",
                    router,
                )
            finally:
                dispatcher.finish()
                cpu_after = sandbox.cpu_seconds()
                if cpu_before is not None and cpu_after is not None:
                    metrics["cpu_s"] = round(metrics["cpu_s"] + cpu_after - cpu_before, 3)
                metrics["peak_memory_bytes"] = sandbox.wasm_bytes or None
                metrics["skill_calls"] += dispatcher.requests.get("skill_call", 0)
        reply = {"user_expressions": {}, "payload": [], **reply}
        if op != "execute" and reply["status"] == "error" and reply["ename"] != "KeyboardInterrupt":
            # The guest did not show it; the kernel does, with the guest's words escaped (they are its own message).
            return self._error_reply(guest_text(reply["ename"]), guest_text(reply["evalue"], 1000), router)
        reply = self._clean_reply(reply, router)
        if supervisor.timed_out and reply.get("status") == "error":
            evalue = f"the cell ran past cell_timeout={self.cell_timeout:g}s and was interrupted; variables were kept."
            router.notice(f"SandboxTimeout: {evalue}\n", "timeout")
            reply = {**reply, "ename": "SandboxTimeout", "evalue": evalue}
            facts["timed_out"] = True
        return reply

    # ---- %checkpoint and %restore ----------------------------------------------------------
    async def _kernel_magic(
        self, code: str, router: OutputRouter, facts: dict[str, Any], metrics: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Run the cell as %checkpoint or %restore if it is one; None for any other cell."""
        try:
            magic = checkpoint_cells.parse(code)
        except checkpoint_cells.MagicUsageError as exc:
            return self._error_reply("UsageError", str(exc), router)
        if magic is None:
            return None
        if self.settings_problems:
            return self._error_reply("SandboxSettingsError", self.settings_error, router)
        if magic.command == "restore":
            return await self._restore(magic, router, facts, metrics)
        if magic.name is None:
            names = self._checkpoints.names()
            router.stream("stdout", f"Checkpoints: {', '.join(names)}\n" if names else "No checkpoints yet.\n")
            return _ok_reply()
        return await self._checkpoint(magic.name, router, facts, metrics)

    @property
    def _checkpoint_part_bytes(self) -> int:
        """Bytes per checkpoint part, either way: one fits in an event (the ring's limit) and in a frame."""
        return min(MAX_CHECKPOINT_PART, self._max_event_bytes, self.max_frame_bytes - 16)

    async def _checkpoint(
        self, name: str, router: OutputRouter, facts: dict[str, Any], metrics: dict[str, Any]
    ) -> dict[str, Any]:
        """%checkpoint NAME: the guest's state, sealed in a file of the kernel's checkpoint folder."""
        folder = self._checkpoints
        if not folder.room_for(name):
            return self._error_reply(
                "CheckpointError",
                f"this kernel already keeps {folder.max_count} checkpoints ({', '.join(folder.names())}; "
                "SandboxKernel.max_checkpoints): reuse a name to replace one",
                router,
            )
        collectors: list[CheckpointCollector] = []

        def listen(sandbox: SandboxProcess, dispatcher: RequestDispatcher) -> GuestListener:
            collectors.append(CheckpointCollector(dispatcher, self.max_checkpoint_bytes))
            return collectors[-1]

        extra = {"exclude": [m.guest for m in self._mounts], "part_bytes": self._checkpoint_part_bytes}
        reply = await self._execute(
            "", True, False, None, False, None, router, facts, metrics, op="checkpoint", extra=extra, listen=listen
        )
        if reply["status"] != "ok":
            return reply
        collector = collectors[-1]
        if collector.too_large:
            return self._error_reply(
                "CheckpointTooLarge",
                f"the session's state is larger than SandboxKernel.max_checkpoint_bytes={self.max_checkpoint_bytes}"
                "; free some (del large variables, remove files in /tmp) or raise the limit",
                router,
            )
        payload = collector.payload()
        if len(payload) != reply["bytes"]:
            why = f"{len(payload)} of {reply['bytes']} bytes arrived"
            return self._error_reply("SandboxProtocolError", f"the checkpoint did not arrive whole ({why})", router)
        summary = {k: reply[k] for k in ("variables", "variable_count", "files", "not_kept")}
        header = {
            "name": name,
            "created": time.time(),
            "pyodide": self._versions["pyodide_version"],
            "sandbox_kernel": __version__,
            "summary": summary,
            "pip": list(self._pip_replays.installs),
        }
        path = folder.path(name)
        size = await asyncio.to_thread(checkpoint_file.write, path, header, payload)
        left_out = "".join(
            f"\n  not kept: {guest_text(n)} ({guest_text(why)})" for n, why in summary["not_kept"].items()
        )
        router.stream(
            "stdout",
            f"Checkpoint {name!r}: {summary['variable_count']} variables, {summary['files']} files, "
            f"{size / 1e6:.1f} MB.{left_out}\n",
        )
        facts["checkpoint"] = {"name": name, "path": str(path), "bytes": size, **summary}
        self._pool.expect_restarts("as a checkpoint was taken")  # its restore then finds a sandbox ready
        return _ok_reply()

    async def _restore(
        self, magic: KernelMagic, router: OutputRouter, facts: dict[str, Any], metrics: dict[str, Any]
    ) -> dict[str, Any]:
        """%restore NAME: a fresh sandbox, given the checkpoint's state."""
        assert magic.name is not None
        path = self._checkpoints.path(magic.name)
        if not path.is_file():
            names = self._checkpoints.names()
            known = f"this kernel has {', '.join(names)}" if names else "make one with %checkpoint NAME"
            return self._error_reply("CheckpointError", f"no checkpoint named {magic.name!r} ({known})", router)
        try:
            header, payload = await asyncio.to_thread(
                checkpoint_file.read, path, self.max_checkpoint_bytes, self._versions["pyodide_version"]
            )
        except checkpoint_file.CheckpointError as exc:
            return self._error_reply("CheckpointError", str(exc), router)
        # The next spare starts once the state is in: booting it meanwhile would take CPU from the restore.
        await self._pool.restart("a checkpoint is being restored", StopCause.INTERRUPT, spare_now=False)
        step = self._checkpoint_part_bytes

        def send(sandbox: SandboxProcess, dispatcher: RequestDispatcher) -> GuestListener:
            sandbox.send_data([payload[start : start + step] for start in range(0, len(payload), step)])
            return dispatcher

        extra = {"exclude": [m.guest for m in self._mounts]}
        try:
            reply = await self._execute(
                "", True, False, None, False, None, router, facts, metrics, op="restore", extra=extra, listen=send
            )
        finally:
            self._pool.start_spare()
        if reply["status"] != "ok":
            return reply
        self._pip_replays.installs = [i for i in header.get("pip", []) if isinstance(i, dict)]
        missing = "".join(
            f"\n  not restored: {guest_text(n)} ({guest_text(why)})" for n, why in reply["not_restored"].items()
        )
        router.stream(
            "stdout",
            f"Restored checkpoint {magic.name!r} in a fresh sandbox: {reply['variable_count']} variables, "
            f"{reply['files']} files.{missing}\n",
        )
        facts["restored"] = {"name": magic.name, "variable_count": reply["variable_count"], "files": reply["files"]}
        return _ok_reply()

    async def _simple_request(self, op: str, payload: dict[str, Any], fallback: dict[str, Any]) -> dict[str, Any]:
        router = OutputRouter(self._publisher(), self.max_output_bytes)
        try:
            sandbox = await self._pool.get()
            dispatcher = self._dispatcher(router, sandbox, False, False)
            try:
                return await asyncio.wait_for(sandbox.request(op, payload, dispatcher), SIMPLE_REQUEST_TIMEOUT)
            finally:
                dispatcher.finish()
        except (SandboxStartError, SandboxDied, asyncio.TimeoutError, guest_schema.InvalidGuestMessage) as exc:
            self.log.warning("%s failed: %s", op, exc)
            return fallback

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        pos = len(code) if cursor_pos is None else cursor_pos
        empty = {"status": "ok", "matches": [], "cursor_start": pos, "cursor_end": pos, "metadata": {}}
        return await self._simple_request("complete", {"code": code, "cursor_pos": pos}, empty)

    async def do_inspect(
        self, code: str, cursor_pos: int | None, detail_level: int = 0, omit_sections: Any = ()
    ) -> dict[str, Any]:
        payload = {
            "code": code,
            "cursor_pos": cursor_pos,
            "detail_level": detail_level,
            "omit_sections": list(omit_sections),
        }
        reply = await self._simple_request(
            "inspect", payload, {"status": "ok", "found": False, "data": {}, "metadata": {}}
        )
        return {**reply, "data": self._sanitizer.bundle(reply["data"]).data}

    async def do_is_complete(self, code: str) -> dict[str, Any]:
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
    ) -> dict[str, Any]:
        try:
            history = self._history.query(hist_access_type, output, raw, session, start, stop, n, pattern, unique)
        except ValueError as exc:
            return {"status": "error", "ename": "ValueError", "evalue": str(exc), "traceback": [], "history": []}
        return {"status": "ok", "history": history}
