"""Launching sandboxes: provision what one needs on the host (Pyodide, the guest's wheels, `packages`, the Pyodide
index), start the process, and report its OS layers; the kernel's pool calls `launch()` for every new sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sandbox_kernel import paths
from sandbox_kernel.packages import index as packages
from sandbox_kernel.packages.checks import PackageError
from sandbox_kernel.packages.wheelhouse import PipWheelhouse
from sandbox_kernel.sandbox import preinstalled, provision
from sandbox_kernel.sandbox.oslayers.report import describe as describe_layers
from sandbox_kernel.sandbox.process import SandboxProcess
from sandbox_kernel.sandbox.spawn import Spawned
from sandbox_kernel.sandbox.startup import SandboxOptions, SandboxStartError

Configure = Callable[[SandboxProcess], Awaitable[None]]  # the kernel's first request to a started sandbox
Say = Callable[[str], None]  # a line for the person who started the kernel (stderr)


@dataclass
class LaunchSettings:
    """What launching needs of the kernel's settings."""

    options: SandboxOptions  # every field but the provisioned ones (filled per launch)
    pyodide_index: str
    packages: list[str] = field(default_factory=list)
    wheelhouse: str | None = None
    settings_error: Callable[[], str] = lambda: ""  # non-empty: no sandbox may start (the settings are wrong)


class ProvisionFailed(SandboxStartError):
    """What a sandbox needs could not be had on the host (a fetch failed, `packages` could not be resolved): a
    second try in the same launch would only fail again."""


class SandboxLauncher:
    """Starts configured sandboxes, and keeps what the latest one reported (its guest's facts, its OS layers)."""

    def __init__(
        self,
        settings: LaunchSettings,
        configure: Configure,
        log: logging.Logger,
        say: Say,
        early: Spawned | None = None,
    ) -> None:
        self.settings = settings
        self.early = early  # a sandbox spawned before the kernel's loop ran (jupyter/early_start.py), not yet taken
        self._configure = configure
        self.log = log
        self._say_line = say
        self._said: set[str] = set()  # what this kernel already told (a fetch tried again says nothing new)
        self.guest_info: dict[str, Any] = {}  # what the latest sandbox's guest reported at its start
        self.os_report: dict[str, Any] = {}  # the OS layers of the latest sandbox (oslayers.launch)
        self.layers_known = asyncio.Event()  # the first sandbox's launcher has reported
        self.pyodide_index: packages.PyodideIndex | None = None
        self.pip_wheelhouse: PipWheelhouse | None = None  # %pip install from SandboxKernel.wheelhouse
        self._pyodide_verified = False  # the cached Pyodide's contents were checked by this kernel process
        self._pyodide_lock = asyncio.Lock()
        self._snapshot_task: asyncio.Task[Path] | None = None
        self._snapshot_checked = False  # this kernel looked for the start-up snapshot (and built it, if it could)
        wheelhouse = Path(settings.wheelhouse) if settings.wheelhouse else None
        self._packages = (
            preinstalled.PreinstalledPackages(list(settings.packages), wheelhouse, self._say)
            if settings.packages
            else None
        )

    async def launch(self) -> SandboxProcess:
        """A started and configured sandbox (not yet the kernel's current one).

        A start that fails is often a damaged cache: the Pyodide files' contents are checked then, and
        when they were damaged (and could be fetched again) the start is tried once more.
        """
        try:
            return await self._launch_once()
        except ProvisionFailed:
            raise
        except preinstalled.SiteDamaged:
            problems = []  # SandboxKernel.packages' folder was unpacked again: start once more
        except SandboxStartError:
            problems = await asyncio.to_thread(provision.pyodide_problems, True)
            if not problems:
                raise
        try:
            if problems:
                await self._ensure_pyodide(thorough=True, problems=problems)
        except provision.ProvisionError as exc:
            raise SandboxStartError(str(exc)) from None
        return await self._launch_once()

    async def _launch_once(self) -> SandboxProcess:
        error = self.settings.settings_error()
        if error:  # only completion, inspection, is_complete get here: a cell answers with the error first
            raise SandboxStartError(error)
        try:
            options, site_check = await self._provisioned()
        except (PackageError, provision.ProvisionError) as exc:
            raise ProvisionFailed(str(exc)) from None
        except Exception as exc:  # a bug or a damaged file we do not check: the user still gets a reply
            self.log.exception("preparing the sandbox failed")
            raise SandboxStartError(f"preparing the sandbox failed: {type(exc).__name__}: {exc}") from None
        sandbox = SandboxProcess(options, self.log, self._say, on_layers=self._log_os_layers)
        try:
            self.guest_info = await sandbox.start(self._take_early(options))
            if site_check is not None:
                await self._site_passed(site_check)
            self._check_snapshot(sandbox)
            await self._configure(sandbox)
        except BaseException:
            await sandbox.kill("its start failed")
            raise
        return sandbox

    def _take_early(self, options: SandboxOptions) -> Spawned | None:
        """The early-spawned sandbox, once, if it was started with exactly these options (else it is killed)."""
        early, self.early = self.early, None
        if early is None:
            return None
        if early.options != options:
            self.log.info("the sandbox spawned early does not match the kernel's settings: starting another")
            early.discard()
            return None
        self.log.info("the first sandbox was spawned as the kernel process began (SandboxKernel.early_start)")
        return early

    def discard_early(self, why: str) -> None:
        """Kill the early-spawned sandbox, if it was never taken (e.g. the settings turned out to be wrong)."""
        early, self.early = self.early, None
        if early is not None:
            self.log.info("the sandbox spawned as the kernel process began is not used: %s", why)
            early.discard()

    def cached_options(self) -> SandboxOptions | None:
        """The sandbox's options when everything it needs is on this machine already (Pyodide and the guest's wheels
        cached, `packages` resolved and unpacked before, the `wheelhouse`'s folder made, a Pyodide index read without
        the network), else None; the same options as `_provisioned` then gives (the launcher compares them).
        Synchronous and quick: for the early start, before the kernel's event loop runs."""
        settings = self.settings
        if not packages.offline_index(settings.pyodide_index):
            return None
        guest_site = provision.guest_site_dir()
        if provision.pyodide_problems() or not (guest_site / ".complete").is_file():
            return None
        index = self._make_index()
        packages_site = self._packages.made_site(index.abi_version) if self._packages else None
        if self._packages and packages_site is None:
            return None  # to be resolved or unpacked: the kernel's own start does it
        pip_folder = PipWheelhouse(Path(settings.wheelhouse), index.abi_version).folder if settings.wheelhouse else None
        if pip_folder is not None and not pip_folder.is_dir():
            return None
        return self._with(paths.pyodide_dir(provision.deno_dir()), guest_site, index, packages_site, pip_folder)

    def _with(
        self,
        pyodide_dir: Path,
        guest_site: Path,
        index: packages.PyodideIndex,
        packages_site: Path | None,
        pip_folder: Path | None,
    ) -> SandboxOptions:
        """The settings' options with what provisioning found; the host folders a sandbox may read, in one order
        for every caller (the launcher takes an early sandbox only if its options are the same): the `packages`
        folder (read-only: no sandbox may write there, Deno and Landlock), the Pyodide index's cache, and the folder
        %pip install takes SandboxKernel.wheelhouse's wheels from (never the wheelhouse itself)."""
        extra_read = [folder for folder in (packages_site, index.cache, pip_folder) if folder is not None]
        return replace(
            self.settings.options,
            pyodide_dir=pyodide_dir,
            guest_site=guest_site,
            packages_site=packages_site,
            extra_read=extra_read,
            pyodide_lock=index.lock_text,
            pyodide_packages=index.cache,
        )

    async def provision(self) -> SandboxOptions:
        """Everything a sandbox needs, provisioned on the host and checked, without starting one: what `sandbox-kernel
        fetch --to` runs to bake the kernel's settings into a cache."""
        options, site_check = await self._provisioned()
        if site_check is not None:
            with contextlib.suppress(preinstalled.SiteDamaged):  # it was unpacked again: the cache now holds it
                await self._site_passed(site_check)
        return options

    async def _provisioned(self) -> tuple[SandboxOptions, preinstalled.SiteCheck | None]:
        """The sandbox's options with Pyodide, the guest's wheels, `packages` and the Pyodide index provisioned on
        the host (cached), and the check of the `packages` folder, running (awaited before the first request)."""
        pyodide_dir = await self._ensure_pyodide(thorough=not self._pyodide_verified)
        self._pyodide_verified = True
        guest_site = await provision.ensure_guest_site(self._say)
        index = await self._index()
        site_check = await self._packages.prepare(index.abi_version) if self._packages else None
        packages_site = site_check.site if site_check else None
        pip_folder = None
        if self.settings.wheelhouse:
            if self.pip_wheelhouse is None:
                self.pip_wheelhouse = PipWheelhouse(Path(self.settings.wheelhouse), index.abi_version)
            try:
                await asyncio.to_thread(self.pip_wheelhouse.prepare)
                pip_folder = self.pip_wheelhouse.folder
            except OSError as exc:  # a read-only cache: sandboxes start; %pip install from the wheelhouse says why not
                what = "The wheels %pip install takes from SandboxKernel.wheelhouse"
                self._warn_once(paths.cache_not_writable(what, exc, paths.FIX_PIP))
        return self._with(pyodide_dir, guest_site, index, packages_site, pip_folder), site_check

    async def _site_passed(self, check: preinstalled.SiteCheck) -> None:
        """The `packages` folder's check, awaited once the sandbox is up (before any request): a failed one unpacks
        the folder again and raises SiteDamaged (the caller starts another sandbox)."""
        assert self._packages is not None
        try:
            await self._packages.passed(check)
        except preinstalled.SiteDamaged:
            try:
                await self._packages.remake(check, (await self._index()).abi_version)
            except PackageError as exc:
                raise ProvisionFailed(str(exc)) from None
            raise

    async def _index(self) -> packages.PyodideIndex:
        """SandboxKernel.pyodide_index, read once per kernel."""
        if self.pyodide_index is None:
            await asyncio.to_thread(self._make_index)
        assert self.pyodide_index is not None
        return self.pyodide_index

    def _make_index(self) -> packages.PyodideIndex:
        """Read SandboxKernel.pyodide_index's lock (a remote index's over the network) and make its package cache."""
        if self.pyodide_index is None:
            source = self.settings.pyodide_index
            cache = packages.index_cache(source)
            bundled = paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json"
            index = packages.PyodideIndex(source, cache, bundled, ca_pem=self.settings.options.ca_pem)
            try:  # made now, so that the sandbox's private root holds it when packages arrive later
                cache.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a read-only cache: a sandbox still starts; an import that needs a fetch says why
                self._warn_once(paths.cache_not_writable("Pyodide packages from SandboxKernel.pyodide_index", exc))
            for note in index.notes:
                self.log.warning("SandboxKernel.pyodide_index: %s; using Pyodide's own lock file", note)
            self.pyodide_index = index
        return self.pyodide_index

    def _warn_once(self, message: str) -> None:
        """A warning for the kernel's log, once per kernel (every sandbox start would find the same)."""
        if message not in self._said:
            self._said.add(message)
            self.log.warning("%s", message)

    def _say(self, message: str) -> None:
        """Tell the person who started the kernel, once per kernel: every sandbox (the spare, each restart, each
        request while starts fail) provisions again, and would repeat the same line."""
        if message not in self._said:
            self._said.add(message)
            self._say_line(message)

    async def _ensure_pyodide(self, thorough: bool, problems: list[str] | None = None) -> Path:
        """The cached Pyodide, checked (contents too with `thorough`) and fetched again if damaged; one at a time.
        A sandbox spawned early from damaged files is not used."""
        async with self._pyodide_lock:
            if problems is None:
                problems = await asyncio.to_thread(provision.pyodide_problems, thorough)
            if problems:
                self.discard_early("the cached Pyodide is damaged")
            return await provision.ensure_pyodide(self._say, thorough, problems)

    def _log_os_layers(self, report: dict[str, Any]) -> None:
        """Log the layers once per kernel, and again only when they change (warning when any is missing)."""
        self.layers_known.set()
        if report == self.os_report:
            return
        self.os_report = report
        log = self.log.warning if report.get("missing") else self.log.info
        log("%s", describe_layers(report))

    def _check_snapshot(self, sandbox: SandboxProcess) -> None:
        """Build the start-up snapshot in the background if this start could not use one (once per kernel); in a
        cache this kernel may not write, say once why sandboxes start without one, and build nothing."""
        if not self.settings.options.use_snapshot or self.guest_info.get("snapshot") or self._snapshot_checked:
            return
        self._snapshot_checked = True
        broken = sandbox.snapshot is not None  # there was one, and it could not be restored
        if not paths.cache_writable(provision.snapshot_path().parent):
            self.log.warning("%s", provision.snapshot_not_writable(broken))
            return
        if broken:
            self.log.warning("the start-up snapshot %s could not be restored; rebuilding it", sandbox.snapshot)
            provision.drop_snapshot()
        self._snapshot_task = asyncio.get_event_loop().create_task(provision.build_snapshot(self._say))
        self._snapshot_task.add_done_callback(self._snapshot_built)

    def _snapshot_built(self, task: asyncio.Task[Path]) -> None:
        """Say why a snapshot could not be built (sandboxes of this kernel start without one; the next kernel tries)."""
        if not task.cancelled() and task.exception() is not None:
            self.log.warning(
                "the start-up snapshot could not be built; sandboxes start without it: %s", task.exception()
            )
