"""SandboxKernel.packages for each sandbox the kernel starts: resolved by pip (cached), unpacked and compiled once
into a folder every sandbox mounts read-only, and that folder checked at the kernel's first start without delaying it.

The check of a folder already made runs beside the sandbox's start (hashing every file takes ~50 ms for ten small
packages, ~200 ms with sympy): the launcher awaits it before the sandbox takes its first request, and a folder that
fails it is unpacked again and the sandbox started again, so no request runs on a damaged folder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox_kernel.packages import index, unpacked
from sandbox_kernel.packages.checks import PackageError, pip_requirement
from sandbox_kernel.sandbox import bytecode
from sandbox_kernel.sandbox.startup import SandboxStartError


class SiteDamaged(SandboxStartError):
    """The folder a sandbox was started with failed its check: it was made again; start another sandbox."""


@dataclass
class SiteCheck:
    """The folder given to a sandbox, and its check, running in a thread (None: made and checked just now)."""

    folder: Path
    site: Path
    running: asyncio.Future[list[str]] | None


class PreinstalledPackages:
    """The kernel's `packages`: one resolution and one unpacked folder, checked at the kernel's first sandbox start."""

    def __init__(self, specs: list[str], wheelhouse: Path | None, say: Callable[[str], None]) -> None:
        self.specs = specs
        self.wheelhouse = wheelhouse
        self._say = say
        self._verified: set[Path] = set()  # folders whose files' contents this kernel hashed

    def made_site(self, abi_version: str) -> Path | None:
        """The unpacked folder when these packages were resolved and unpacked before, else None (a start makes it).
        Synchronous and quick, for the early start; its check still runs beside that start (`prepare`)."""
        try:
            specs = [pip_requirement(spec, "SandboxKernel.packages") for spec in self.specs]
        except PackageError:
            return None  # the kernel's own start says what is wrong
        folder = index.resolution_folder(specs, self.wheelhouse, abi_version)
        return folder / unpacked.SITE if index.is_resolved(folder) and unpacked.is_made(folder) else None

    async def prepare(self, abi_version: str) -> SiteCheck:
        """The unpacked folder for a sandbox about to start: made now if it is not; else, at this kernel's first
        start, every file checked beside the start. Later starts of this kernel (restarts, spares) reuse that check:
        no guest can write the folder, and listing it again cost ~20 ms of CPU beside every start (measured)."""
        folder, _ = await index.preinstall_wheels(self.specs, self.wheelhouse, self._say, abi_version)
        if folder in self._verified and unpacked.is_made(folder):
            return SiteCheck(folder, folder / unpacked.SITE, None)
        if not unpacked.is_made(folder):
            return SiteCheck(folder, await self._make(folder, abi_version), None)
        running = asyncio.ensure_future(asyncio.to_thread(unpacked.site_problems, folder, True))
        running.add_done_callback(lambda f: f.cancelled() or f.exception())  # awaited unless the start failed
        return SiteCheck(folder, folder / unpacked.SITE, running)

    async def passed(self, check: SiteCheck) -> None:
        """Wait for the check; SiteDamaged when the folder differs from what was unpacked."""
        if check.running is None:
            return
        problems = await check.running
        if problems:
            raise SiteDamaged(
                f"SandboxKernel.packages, unpacked in {check.site}, differ from what was unpacked "
                f"({'; '.join(problems[:3])}) and were unpacked again"
            )
        self._verified.add(check.folder)

    async def remake(self, check: SiteCheck, abi_version: str) -> None:
        """After SiteDamaged: check the folder again under its lock and unpack it again (said once)."""
        await self._make(check.folder, abi_version)

    async def _make(self, folder: Path, abi_version: str) -> Path:
        """Unpack and compile (or check) the folder; wheels changed since pip resolved them are resolved again."""
        try:
            site = await asyncio.to_thread(unpacked.ensure_site, folder, True, self._say, bytecode.compile_folder)
        except unpacked.WheelsDamaged as exc:
            self._say(f"sandbox-kernel: {exc}: resolving SandboxKernel.packages again")
            folder, _ = await index.preinstall_wheels(self.specs, self.wheelhouse, self._say, abi_version, again=True)
            site = await asyncio.to_thread(unpacked.ensure_site, folder, True, self._say, bytecode.compile_folder)
        self._verified.add(folder)
        return site
