"""Supervision of one running request: interrupts, cell_timeout and the restart of a guest that won't stop.

Pure logic: the kernel feeds it the time, interrupt signals and timer wake-ups; it answers with
actions and, at the end, a typed outcome (no message text is ever matched).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

RESEND_INTERRUPT_EVERY = 1.0  # seconds; a rare interrupt can be missed by the guest


class Action(enum.Enum):
    SEND_INTERRUPT = "send_interrupt"  # raise KeyboardInterrupt in the guest (again)
    RESTART = "restart"  # the guest did not stop: kill the sandbox and start a fresh one


class StopCause(enum.Enum):
    """Why a sandbox was restarted under a request."""

    TIMEOUT = "timeout"  # ran past cell_timeout and did not stop within interrupt_grace
    INTERRUPT = "interrupt"  # did not stop within interrupt_grace of a user's interrupt
    CRASH = "crash"  # the sandbox process ended by itself


@dataclass
class Supervisor:
    """The state of one request: running, then possibly interrupting (by the user or the clock)."""

    started: float
    timeout: float | None = None  # cell_timeout, seconds
    grace: float = 3.0  # interrupt_grace, seconds
    resend_every: float = RESEND_INTERRUPT_EVERY
    interrupted_at: float | None = None
    timed_out: bool = False
    sends: int = 0
    cause: StopCause | None = None  # set once RESTART was asked for
    taken: bool = False  # the guest reported a KeyboardInterrupt: no re-sends (a late one would hit its wrap-up)

    def next_wake(self) -> float | None:
        """When `tick` must next be called (None: only on an interrupt or the reply)."""
        if self.cause is not None:
            return None
        if self.interrupted_at is None:
            return None if self.timeout is None else self.started + self.timeout
        if self.taken:
            return self.interrupted_at + self.grace
        return min(self.interrupted_at + self.resend_every * self.sends, self.interrupted_at + self.grace)

    def interrupt(self, now: float) -> list[Action]:
        """The user asked to interrupt (SIGINT or interrupt_request)."""
        if self.interrupted_at is None:
            self.interrupted_at = now
        self.taken = False  # asked again: the guest may have caught the first one
        return self.tick(now)

    def tick(self, now: float) -> list[Action]:
        """Time passed: start the timeout's interrupt, re-send interrupts, or give up on the guest."""
        if self.cause is not None:
            return []
        if self.interrupted_at is None and self.timeout is not None and now >= self.started + self.timeout:
            self.timed_out = True
            self.interrupted_at = now
        if self.interrupted_at is None:
            return []
        if now >= self.interrupted_at + self.grace:
            self.cause = StopCause.TIMEOUT if self.timed_out else StopCause.INTERRUPT
            return [Action.RESTART]
        if now >= self.interrupted_at + self.resend_every * self.sends and not (self.taken and self.sends):
            self.sends += 1
            return [Action.SEND_INTERRUPT]
        return []

    @property
    def interrupting(self) -> bool:
        return self.interrupted_at is not None
