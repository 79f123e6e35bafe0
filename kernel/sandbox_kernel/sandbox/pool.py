"""The sandbox processes of one kernel: the current one, a pre-warmed spare, restarts and death reports."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from sandbox_kernel.sandbox.process import SandboxProcess
from sandbox_kernel.sandbox.supervision import StopCause

Launch = Callable[[], Coroutine[Any, Any, SandboxProcess]]
Prepare = Callable[[SandboxProcess], Awaitable[None]]


def quiet(task: asyncio.Future[Any]) -> None:
    """Retrieve a background task's exception so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _kill_result(task: asyncio.Task[SandboxProcess]) -> None:
    """Kill the sandbox a launch produced, which nobody will use."""
    if not task.cancelled() and not task.exception():
        task.result().kill_now()


class SandboxPool:
    """Owns every sandbox process of a kernel; the kernel asks it for the current one."""

    def __init__(
        self,
        launch: Launch,
        prepare: Prepare,
        keep_spare: bool,
        log: logging.Logger,
        spare_after_restart: bool = False,
        warm: Prepare | None = None,
    ) -> None:
        self._launch = launch
        self._warm = warm  # run on a spare while it waits, so that its first cell is as quick as later ones
        self._prepare = prepare  # run on a sandbox before it becomes current (e.g. %pip replays)
        self.keep_spare = keep_spare  # a pre-warmed spare beside the current sandbox
        self.spare_after_restart = spare_after_restart  # keep one from the first restart on
        self.log = log
        self.current: SandboxProcess | None = None
        self._starting: asyncio.Task[SandboxProcess] | None = None
        self._spare: asyncio.Task[SandboxProcess] | None = None
        self._unreported: str | None = None

    def start_soon(self, spare_now: bool = True) -> None:
        """Make a sandbox current in the background: the spare if there is a live one, else a new one. The next
        spare is launched once it is current, or, with `spare_now` false, when start_spare() is called."""
        self._starting = asyncio.get_running_loop().create_task(self._promote(spare_now))
        self._starting.add_done_callback(quiet)

    def start_spare(self) -> None:
        """Launch the spare, if the policy keeps one and there is none."""
        if self.keep_spare and self._spare is None:
            self._spare = asyncio.get_running_loop().create_task(self._launch_spare())
            self._spare.add_done_callback(quiet)

    async def _launch_spare(self) -> SandboxProcess:
        sandbox = await self._launch()
        if self._warm is not None:
            try:
                await self._warm(sandbox)
            except Exception as exc:  # a cold spare still serves: its first cell is only slower
                if sandbox.alive:  # else it was stopped meanwhile (a shutdown): its end is logged, not a failure
                    self.log.warning("warming the spare sandbox failed: %r", exc)
        return sandbox

    async def _promote(self, spare_now: bool) -> SandboxProcess:
        spare, self._spare = self._spare, None
        sandbox = None
        if spare is not None:
            # One still starting is awaited: it began before any new launch could, so it is ready sooner.
            try:
                await asyncio.wait({spare})
            except asyncio.CancelledError:  # this start was abandoned (a restart): the spare serves the next one
                if self._spare is None:
                    self._spare = spare
                else:
                    spare.add_done_callback(_kill_result)
                raise
            if not spare.cancelled() and not spare.exception() and spare.result().alive:
                sandbox = spare.result()
        if sandbox is None:
            sandbox = await self._launch()
        self.current = sandbox
        try:
            await self._prepare(sandbox)
        except BaseException:
            await sandbox.kill("its start failed")
            raise
        if spare_now:
            self.start_spare()
        return sandbox

    @property
    def is_up(self) -> bool:
        """Whether a live sandbox is current (else a request waits for one to start)."""
        starting = self._starting
        if starting is None or not starting.done() or starting.cancelled() or starting.exception():
            return False
        return starting.result().alive

    async def get(self) -> SandboxProcess:
        """The running sandbox, starting a new one if there is none or it died."""
        starting = self._starting
        if starting is None or (
            starting.done() and (starting.cancelled() or starting.exception() or not starting.result().alive)
        ):
            dead = self.current
            if dead is not None and dead.death_reason and not dead.death_reported:
                self._unreported = dead.death_reason
                dead.death_reported = True
            if dead is not None:
                self._restarting()
            self.start_soon()
        assert self._starting is not None
        return await asyncio.shield(self._starting)

    async def restart(self, why: str, cause: StopCause, spare_now: bool = True) -> None:
        """Kill the current sandbox (its pending request fails with `why`) and start a fresh one (the next spare:
        see start_soon)."""
        old, self.current = self.current, None
        starting = self._starting
        if starting is not None and not starting.done():
            starting.cancel()  # a start under way is abandoned (its sandbox is killed): it would become current later
        if old is not None:
            old.death_reported = True
            await old.kill(why, cause)
        self._restarting()
        self.start_soon(spare_now)

    def died_under_request(self, sandbox: SandboxProcess) -> None:
        """A request learnt of the sandbox's death and told the user: start the next one now."""
        sandbox.death_reported = True
        if self.current is sandbox:  # not restarted yet (a restart clears `current` first)
            self.current = None
            self._restarting()
            self.start_soon()

    def expect_restarts(self, why: str) -> None:
        """Restarts are likely from now on (e.g. a checkpoint was taken, to be restored): under the 'auto' policy,
        keep a spare from now on, and launch it now."""
        self._restarting(why)
        self.start_spare()

    def _restarting(self, why: str = "after a restart") -> None:
        if self.spare_after_restart and not self.keep_spare:
            self.keep_spare = True
            self.log.info("keeping a spare sandbox from now on, %s (SandboxKernel.spare_sandbox='auto')", why)

    def take_unreported_death(self) -> str | None:
        """Why the previous sandbox died between requests, once, if nobody was told yet."""
        reason, self._unreported = self._unreported, None
        return reason

    @staticmethod
    def kill_all_now() -> None:
        """Kill every sandbox process of this kernel (current, spare, starting) at once."""
        for sandbox in list(SandboxProcess.live):
            sandbox.kill_now()
