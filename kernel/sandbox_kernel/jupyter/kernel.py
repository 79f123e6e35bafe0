"""SandboxKernel: the Jupyter face of the kernel, an ipykernel Kernel whose cells run in a Deno + Pyodide sandbox.

It keeps only the protocol's handlers and kernel_info; settings live in settings.py, running a cell in
cell_runner.py, the kernel's own magics in magics.py, the routes of a request in channels.py, and launching
sandboxes in sandbox/launcher.py (docs/architecture.md draws how they meet).
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ipykernel.kernelbase import Kernel
from traitlets import Any as TraitAny

from sandbox_kernel import __version__
from sandbox_kernel.checkpoints import kernel_folder
from sandbox_kernel.checkpoints.cells import CheckpointFolder
from sandbox_kernel.jupyter import early_start, replies, settings
from sandbox_kernel.jupyter.cell_runner import SIMPLE_REQUEST_TIMEOUT, CellOutcome, CellRequest, CellRunner, error_reply
from sandbox_kernel.jupyter.channels import KernelChannels
from sandbox_kernel.jupyter.comm_relay import COMM_MESSAGES, CommRelay
from sandbox_kernel.jupyter.early_completion import early_completions
from sandbox_kernel.jupyter.guest_services import PipReplays
from sandbox_kernel.jupyter.history import History
from sandbox_kernel.jupyter.magics import MAX_CHECKPOINT_PART, CheckpointSettings, KernelMagics
from sandbox_kernel.jupyter.output import guest_text
from sandbox_kernel.jupyter.sanitize import OutputSanitizer
from sandbox_kernel.jupyter.setting_sources import Sources
from sandbox_kernel.jupyter.settings import SandboxSettings
from sandbox_kernel.jupyter.stdin_gate import StdinGate
from sandbox_kernel.jupyter.widget_guard import WidgetGuard
from sandbox_kernel.protocol import schema as guest_schema
from sandbox_kernel.protocol.dispatcher import TEST_NO_CLEANING, cleaning_off
from sandbox_kernel.sandbox import mounts, private_folders, provision
from sandbox_kernel.sandbox.launcher import SandboxLauncher
from sandbox_kernel.sandbox.pool import SandboxPool, quiet
from sandbox_kernel.sandbox.process import SandboxProcess

REPLAY_TIMEOUT = 120.0  # seconds for one %pip install replayed after a restart
EARLY_COMPLETION_WAIT = 0.5  # seconds a completion waits for a starting sandbox before the host answers it
KERNEL_INFO_WAIT = 30.0  # seconds kernel_info waits for the sandbox (a first start fetches and builds)


def sweep_left_behind() -> list[Path]:
    """Remove the private folders and checkpoint folders of kernels that were killed (in a worker thread)."""
    return [*private_folders.sweep(), *kernel_folder.sweep()]


class SandboxKernel(SandboxSettings, Kernel):
    """Forwards every request to one persistent sandbox process."""

    implementation = "sandbox-kernel"
    implementation_version = __version__
    language = "python"
    _execute_sleep = 0.0  # ipykernel sleeps after each cell to let its own output threads flush; ours do not
    help_links = [  # noqa: RUF012
        {"text": "Python", "url": "https://docs.python.org/3/"},
        {"text": "Pyodide", "url": "https://pyodide.org/en/stable/"},
        {"text": "IPython", "url": "https://ipython.readthedocs.io/en/stable/"},
    ]

    # In-process tests put a fake sandbox behind the pool here (tests/inprocess); never a setting.
    sandbox_launch = TraitAny(None, allow_none=True, help="A callable that starts a sandbox (tests only).")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        config_files = list(getattr(self.parent, "loaded_config_files", None) or [])  # the app's, when it made us
        self._settings = settings.resolve(self, Path.cwd(), config_files)
        # What is wrong with the settings (the app adds what it found before the kernel was made): while there is
        # anything, no sandbox starts and every cell answers with SandboxSettingsError.
        self.settings_problems: list[str] = self._settings.problems
        # What the program that started the kernel says of its settings: where they were given, how its user
        # writes them, whether it shows their problems itself (the app sets it: setting_sources.py)
        self.setting_sources = Sources()
        if self._settings.ca_note:
            self.log.info("%s", self._settings.ca_note)
        for warning in self._settings.ca_warnings:
            self.log.warning("%s", warning)
        if cleaning_off():
            self.log.warning("%s=1: TEST MODE, the sandbox's output reaches the browser uncleaned", TEST_NO_CLEANING)
        self._history = History()
        self._next_count = 1
        self._reply_metadata: dict[str, Any] = {}
        self._versions = provision.guest_versions()  # the guest's Python, Pyodide and IPython, known on the host
        self._pip_replays = PipReplays()
        sanitizer = OutputSanitizer(trusted=self.trust_output, image_hosts=self._settings.image_hosts)
        request_bytes = settings.request_bytes(self)
        max_event_bytes = settings.max_event_bytes(self)
        launching = settings.launch_settings(self, self._settings, lambda: self.settings_error)
        early = None if self.sandbox_launch else early_start.take()  # the first sandbox, spawned before ipykernel
        self._launcher = SandboxLauncher(launching, self._configure, self.log, self._say, early)
        auto = self.spare_sandbox == "auto"
        from_start = self.spare_sandbox is True or (auto and bool(self.cell_timeout))
        launch = self.sandbox_launch or self._launcher.launch
        self._pool = SandboxPool(launch, self._prepare, from_start, self.log, spare_after_restart=auto, warm=self._warm)
        self._widgets = WidgetGuard(sanitizer, frozenset(self.widget_modules))
        self._channels = KernelChannels(
            self, sanitizer, self._settings.skills, self._pip_replays, lambda: self._launcher.pyodide_index,
            self.max_output_bytes, request_bytes, self._widgets, lambda: self._launcher.pip_wheelhouse,
        )  # fmt: skip
        self._runner = CellRunner(
            self._pool, self._channels, sanitizer, self.log, self.cell_timeout, self.interrupt_grace,
            lambda: self.settings_error, lambda: self._next_count,
        )  # fmt: skip
        # Kept across Kernel > Restart (a new process with the same connection file); removed at the last shutdown.
        connection_file = getattr(self.parent, "abs_connection_file", None)
        self._checkpoints = CheckpointFolder(kernel_folder.for_kernel(connection_file), self.max_checkpoints)
        part_bytes = min(MAX_CHECKPOINT_PART, max_event_bytes, self.max_frame_bytes - 16)
        magic_settings = CheckpointSettings(
            self.max_checkpoint_bytes, part_bytes, self._versions["pyodide_version"],
            lambda: [m.guest for m in self._settings.mounts],
        )  # fmt: skip
        self._comms = CommRelay(self._runner, self._widgets)
        for msg_type in COMM_MESSAGES:
            self.shell_handlers[msg_type] = self._comms.relay
        self._magics = KernelMagics(self._runner, self._pool, self._checkpoints, self._pip_replays, magic_settings)
        self._sweep: asyncio.Task[list[Path]] | None = None
        atexit.register(SandboxPool.kill_all_now)
        if not connection_file:  # a per-process folder: it ends with the process
            atexit.register(shutil.rmtree, self._checkpoints.folder, True)

    @property
    def settings_error(self) -> str:
        """The whole message a user sees while the settings are wrong ('' when they are fine)."""
        return self._settings.error

    async def _configure(self, sandbox: SandboxProcess) -> None:
        """A started sandbox learns its limits (to explain them), before it takes any cell."""
        config = settings.guest_config(self, self._settings, self.setting_sources)
        await self._runner.background_request(sandbox, "configure", config, SIMPLE_REQUEST_TIMEOUT)

    async def _warm(self, sandbox: SandboxProcess) -> None:
        """A spare runs its traceback, display and completion paths once while it waits (see api.warm_process)."""
        await self._runner.background_request(sandbox, "warm", {}, SIMPLE_REQUEST_TIMEOUT)

    async def _prepare(self, sandbox: SandboxProcess) -> None:
        """Before a sandbox becomes current: the comms of the one before are gone; %pip installs are replayed."""
        self._widgets.forget_all()
        await self._replay_pip(sandbox)

    async def _replay_pip(self, sandbox: SandboxProcess) -> None:
        """Install again, in a new sandbox, what %pip installed before the restart (bounded in time)."""
        for install in self._pip_replays.installs:
            try:
                await self._runner.background_request(sandbox, "pip_install", install, REPLAY_TIMEOUT)
            except (asyncio.TimeoutError, guest_schema.InvalidGuestMessage) as exc:
                self.log.warning("replaying %%pip install %s failed: %r", guest_text(" ".join(install["specs"])), exc)

    def _say(self, message: str) -> None:
        print(message, file=sys.__stderr__, flush=True)

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
        reported = self._launcher.guest_info
        return {**self._versions, **{k: str(v) for k, v in reported.items() if k in self._versions}}

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
        skills = self._settings.skills
        facts = {
            "os_sandbox": self._launcher.os_report,
            "settings_error": self.settings_error,
            "settings_problems": list(self.settings_problems),
            "checkpoint_folder": str(self._checkpoints.folder),  # clients of this user may put checkpoints here
            "max_checkpoints": self.max_checkpoints,  # named ones kept at once (the MCP server keeps as many)
            "mounts": mounts.guest_config(self._settings.mounts),  # guest paths and rules, as the guest knows them
            "tls_trust": self._settings.ca_note,  # with allow_net: the CA certificates TLS trusts, and from where
            "skills": skills.gatekeeper.described(),  # each method with its policy
            "skill_approver": bool(skills.approver),  # 'ask' calls go to it, not to the frontend
            "settings": settings.reported(self),  # what the kernel runs with (remote clients cannot read its config)
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

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """Answered once the first sandbox's OS layers are known (its launcher reports them ~50 ms after the
        spawn, long before Python is up), or its start failed, or after KERNEL_INFO_WAIT seconds at most: a start
        that fails or hangs is told at the first cell. The versions in the reply are known on the host."""
        if not self.settings_problems and not self._launcher.layers_known.is_set():
            started: asyncio.Future[Any] = asyncio.ensure_future(self._pool.get())  # a wait: it starts nothing
            started.add_done_callback(quiet)  # a start that fails after this answer is told at the first cell
            layers: asyncio.Future[Any] = asyncio.ensure_future(self._launcher.layers_known.wait())
            done, _ = await asyncio.wait({started, layers}, timeout=KERNEL_INFO_WAIT, return_when="FIRST_COMPLETED")
            layers.cancel()
            if started in done and started.exception() is not None:
                self.log.error("sandbox start failed: %s", started.exception())
            elif not done:
                self.log.warning("kernel_info answered before the sandbox was up (%.0f s)", KERNEL_INFO_WAIT)
            if started not in done:
                started.cancel()
        await super().kernel_info_request(stream, ident, parent)  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped

    def _parent_metadata(self) -> dict[str, Any]:
        """The metadata of the shell request being served (a %checkpoint_put part is there)."""
        parent = self.get_parent("shell")  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        metadata = parent.get("metadata")
        return metadata if isinstance(metadata, dict) else {}

    def _parent_id(self) -> str:
        """The msg_id of the shell request being served (the guest's widgets capture output by it)."""
        parent = self.get_parent("shell")  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        return str(parent.get("header", {}).get("msg_id", ""))

    async def comm_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """The comms open now, as the kernel recorded them (the sandbox's own word is not needed)."""
        assert self.session is not None
        self.session.send(stream, "comm_info_reply", self._comms.comm_info(parent["content"]), parent, ident)

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        super().start()  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        loop = asyncio.get_event_loop()
        loop.add_signal_handler(signal.SIGINT, self._runner.on_sigint)
        assert self.session is not None
        self._channels.stdin = StdinGate(self.session, self.stdin_socket, self.log)
        if self.settings_problems:
            if self.setting_sources.reported:  # its launcher (the agent API, the CLI) shows them: said once, there
                self.log.info("the kernel's settings are wrong; its launcher reports them")
            else:
                self.log.error("%s", self.settings_error)
            self._launcher.discard_early("the settings are wrong")
        else:
            loop.call_soon(self._pool.start_soon)
        self._sweep = loop.create_task(asyncio.to_thread(sweep_left_behind))  # folders of killed kernels

    def pre_handler_hook(self) -> None:
        """SIGINT is handled by the cell runner, never as KeyboardInterrupt in the kernel."""

    def post_handler_hook(self) -> None:
        pass

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        # Runs on the control thread: kill synchronously; the main loop notices the exit.
        SandboxPool.kill_all_now()
        if not restart:  # a restart is a new process with this kernel's checkpoints
            kernel_folder.remove(self._checkpoints.folder)
        return {"status": "ok", "restart": restart}

    # ---- requests ----------------------------------------------------------------------
    def finish_metadata(self, parent: Any, metadata: dict[str, Any], reply_content: dict[str, Any]) -> dict[str, Any]:
        """The reply's metadata: ipykernel's, plus what the kernel itself says about the cell."""
        metadata = super().finish_metadata(parent, metadata, reply_content)  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
        if self._reply_metadata:
            metadata["sandbox_kernel"] = self._reply_metadata
        return metadata

    async def do_execute(  # the parameters are ipykernel's Kernel.do_execute, fixed by the protocol
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
        router = self._channels.router()
        store_history = store_history and not silent
        count = self._next_count
        entry = self._history.add(count, code) if store_history else None
        self._reply_metadata = {"timed_out": False, "restarted": False}
        started = time.monotonic()
        try:
            outcome = await self._magics.run(code, count, router, self._parent_metadata())
            if outcome is None:
                request = CellRequest(
                    code, count, silent, store_history, user_expressions or {}, allow_stdin, cell_id,
                    extra={"msg_id": self._parent_id()},
                )  # fmt: skip
                outcome = await self._runner.run(request, router)
        except Exception as exc:  # no path may end without an execute_reply
            self.log.exception("executing a cell failed in the kernel")
            outcome = CellOutcome(
                error_reply("SandboxKernelError", f"the kernel failed to run this cell: {exc!r}", router)
            )
        finally:
            router.flush()
            if store_history:
                self._next_count += 1
        if entry is not None:
            entry.output = router.last_result_text
        reply = outcome.reply
        reply["execution_count"] = self._next_count - 1
        metrics = {"wall_s": round(time.monotonic() - started, 6), **outcome.metrics(), "output_bytes": router.spent}
        self._reply_metadata = {**outcome.metadata(), "metrics": metrics}
        self._settings.skills.audit.record(kind="cell", execution_count=reply["execution_count"], **metrics)
        return reply

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        if not isinstance(code, str):
            return replies.empty_complete(0, "code is not a string")
        pos = len(code) if cursor_pos is None else cursor_pos
        if not replies.within(pos, len(code)):
            return replies.empty_complete(len(code), f"cursor_pos is not a position within the code (0..{len(code)})")
        empty = replies.empty_complete(pos, replies.NO_ANSWER)
        answer = asyncio.ensure_future(self._complete_in_sandbox(code, pos, empty))
        if self._pool.is_up:
            return await answer
        # The sandbox is starting: its namespace will be a fresh one, which the host can name in time for JupyterLab.
        done, _ = await asyncio.wait({answer}, timeout=EARLY_COMPLETION_WAIT)
        early = early_completions(code, pos)
        if answer in done or not early["matches"]:  # (modules, attributes, paths: only the sandbox can tell)
            return await answer
        answer.cancel()
        return early

    async def _complete_in_sandbox(self, code: str, pos: int, empty: dict[str, Any]) -> dict[str, Any]:
        payload = {"code": code, "cursor_pos": pos, "max_matches": replies.MAX_MATCHES}
        reply = await self._runner.simple_request("complete", payload, empty)
        return reply if reply is empty else replies.bound_complete(reply, code, pos, self.max_output_bytes)

    async def do_inspect(
        self, code: str, cursor_pos: int | None, detail_level: int = 0, omit_sections: Any = ()
    ) -> dict[str, Any]:
        payload = {
            "code": code,
            "cursor_pos": cursor_pos,
            "detail_level": detail_level,
            "omit_sections": list(omit_sections),
            "max_bytes": self.max_output_bytes,
        }
        none = {"status": "ok", "found": False, "data": {}, "metadata": {replies.NOTE: {"cut": replies.NO_ANSWER}}}
        reply = await self._runner.simple_request("inspect", payload, none)
        return reply if reply is none else replies.bound_inspect(reply, self._runner.sanitizer, self.max_output_bytes)

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        reply = await self._runner.simple_request("is_complete", {"code": code}, {"status": "unknown"})
        return replies.bound_is_complete(reply)

    async def do_history(  # the parameters are ipykernel's Kernel.do_history, fixed by the protocol
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
