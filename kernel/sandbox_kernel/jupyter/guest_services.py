"""What the kernel does for the guest's requests during one kernel request (the dispatcher's handlers)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sandbox_kernel.packages import index as packages
from sandbox_kernel.packages.checks import PackageError
from sandbox_kernel.packages.wheelhouse import PipWheelhouse
from sandbox_kernel.protocol.dispatcher import error_answer
from sandbox_kernel.skills.approvals import Approval, imitates_kernel
from sandbox_kernel.skills.calls import SkillService

MAX_PIP_REPLAYS = 50  # %pip installs remembered for replay after a restart


@dataclass
class RequestContext:
    """Who asked the kernel what: the Jupyter request the guest's requests belong to."""

    allow_stdin: bool
    in_cell: bool  # an execute_request (skills run only while a cell runs)
    execution_count: int
    ident: Any
    parent: Any


Ask = Callable[[str, bool, Any, Any, dict[str, Any] | None], Awaitable[str]]


class PipReplays:
    """What %pip installed, to install again after a sandbox restart (bounded, no duplicates)."""

    def __init__(self, limit: int = MAX_PIP_REPLAYS) -> None:
        self.limit = limit
        self.installs: list[dict[str, Any]] = []

    def add(self, specs: list[str], index_urls: list[str] | None) -> bool:
        install = {"specs": list(specs), "index_urls": list(index_urls) if index_urls else None}
        if install in self.installs:
            return True
        if len(self.installs) >= self.limit:
            return False
        self.installs.append(install)
        return True

    def forget(self, names: list[str]) -> None:
        """%pip uninstall removed these projects: their specs are not installed again after a restart."""
        gone = {_project(name) for name in names}
        kept = []
        for install in self.installs:
            specs = [spec for spec in install["specs"] if _project(spec) not in gone]
            if specs:
                kept.append({**install, "specs": specs})
        self.installs = kept


def _project(requirement: str) -> str:
    """A requirement's project name, canonical (`Six>=1.1` -> `six`)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[;@ ]", requirement.strip(), maxsplit=1)[0]).lower()


class GuestServiceDesk:
    """Serves input(), skill calls and package loads for one kernel request (see dispatcher.GuestServices)."""

    def __init__(
        self,
        context: RequestContext,
        ask: Ask,
        show: Callable[[str], None],
        skills: SkillService,
        pyodide_index: packages.PyodideIndex | None,
        pip_replays: PipReplays,
        pip_wheelhouse: PipWheelhouse | None = None,
    ) -> None:
        self.context = context
        self.pip_wheelhouse = pip_wheelhouse
        self._ask = ask
        self._show = show
        self.skills = skills
        self.pyodide_index = pyodide_index
        self.pip_replays = pip_replays

    async def input_request(self, event: dict[str, Any]) -> dict[str, Any]:
        prompt = event["prompt"]
        if imitates_kernel(prompt):
            return error_answer(
                "PermissionError",
                "this input() prompt reads like the kernel's own approval prompt ('[sandbox-kernel]', 'Allow "
                "Skill.method(...)', '[y]es once'): guest code may not ask the person in the kernel's name",
            )
        if not self.context.allow_stdin:
            return error_answer("StdinNotImplementedError", "this frontend does not support input requests")
        value = await self._ask(prompt, event["password"], self.context.ident, self.context.parent, None)
        return {"value": value}

    async def _ask_approval(self, approval: Approval) -> str | None:
        if not self.context.allow_stdin:
            return None
        return await self._ask(approval.prompt, False, self.context.ident, self.context.parent, approval.metadata)

    async def skill_call(self, event: dict[str, Any]) -> dict[str, Any]:
        if not self.context.in_cell:
            return self.skills.refuse(
                event, "skills can only be called while a cell runs", self.context.execution_count
            )
        return await self.skills.call(event, self._ask_approval, self.context.execution_count, self._show)

    def skill_calls_refused(self, reason: str, calls: dict[str, int], unnamed: int) -> None:
        self.skills.record_refused(self.context.execution_count, reason, calls, unnamed)

    async def load_packages(self, event: dict[str, Any]) -> dict[str, Any]:
        """Fetch the Pyodide packages that provide `imports` (or are named) into the guest's package folder."""
        index = self.pyodide_index
        if index is None:
            return {"value": []}
        wanted = {index.by_import[i] for i in event.get("imports", []) if i in index.by_import}
        wanted |= {index.canonical(n) for n in event.get("packages", []) if index.canonical(n) in index.packages}
        names = sorted(wanted)
        try:
            await asyncio.to_thread(index.fetch, names)
        except PackageError as exc:
            return error_answer("PackageError", str(exc))
        return {"value": names}

    async def wheelhouse_wheels(self, event: dict[str, Any]) -> dict[str, Any]:
        """%pip install: the wheels of `specs` and their dependencies from SandboxKernel.wheelhouse, resolved on the
        host into the folder the sandbox reads them from; their paths. A spec that is not a requirement (an option,
        a path, a URL) is refused before pip runs."""
        house = self.pip_wheelhouse
        if house is None:
            return error_answer("PackageError", "SandboxKernel.wheelhouse is not set")
        try:
            specs = house.checked(list(event["specs"]))
        except PackageError as exc:
            return error_answer("InvalidRequirement", str(exc))
        try:
            wheels = await house.wheels(specs)
        except PackageError as exc:
            return error_answer("PackageError", str(exc))
        return {"value": [str(wheel) for wheel in wheels]}

    async def pip_uninstalled(self, event: dict[str, Any]) -> dict[str, Any]:
        self.pip_replays.forget(list(event["names"]))
        return {"value": True}

    async def pip_installed(self, event: dict[str, Any]) -> dict[str, Any]:
        if not self.pip_replays.add(event["specs"], event.get("index_urls")):
            return error_answer(
                "PackageError",
                f"more than {self.pip_replays.limit} %pip installs this session: later ones are not installed "
                "again after a sandbox restart (use SandboxKernel.packages for a fixed set)",
            )
        return {"value": True}
