"""The supervision state machine: interrupts, cell_timeout and giving up on a guest that will not stop."""

from __future__ import annotations

import pytest

from sandbox_kernel.sandbox.supervision import Action, StopCause, Supervisor

SEND, RESTART = Action.SEND_INTERRUPT, Action.RESTART


def test_no_timeout_waits_for_ever():
    s = Supervisor(started=0.0)
    assert s.next_wake() is None
    assert s.tick(1e9) == []
    assert s.cause is None and not s.timed_out


def test_timeout_interrupts_then_resends_then_restarts():
    s = Supervisor(started=10.0, timeout=5.0, grace=3.0, resend_every=1.0)
    assert s.next_wake() == 15.0
    assert s.tick(14.9) == []
    assert s.tick(15.0) == [SEND]
    assert s.timed_out and s.interrupting
    assert s.next_wake() == 16.0
    assert s.tick(15.5) == []
    assert s.tick(16.0) == [SEND]
    assert s.tick(17.0) == [SEND]
    assert s.next_wake() == 18.0
    assert s.tick(18.0) == [RESTART]
    assert s.cause is StopCause.TIMEOUT
    assert s.tick(99.0) == [] and s.next_wake() is None  # nothing after giving up


def test_user_interrupt_restarts_with_its_own_cause():
    s = Supervisor(started=0.0, timeout=None, grace=2.0, resend_every=1.0)
    assert s.interrupt(5.0) == [SEND]
    assert s.interrupt(5.2) == []  # a second press before the resend time does not spam the guest
    assert s.tick(6.0) == [SEND]
    assert s.tick(7.0) == [RESTART]
    assert s.cause is StopCause.INTERRUPT and not s.timed_out


def test_interrupt_before_timeout_is_not_a_timeout():
    s = Supervisor(started=0.0, timeout=10.0, grace=3.0)
    s.interrupt(1.0)
    s.tick(11.0)  # the clock passes the timeout while already interrupting
    assert not s.timed_out


@pytest.mark.parametrize(("grace", "resend", "sends"), [(3.0, 1.0, 3), (0.5, 1.0, 1), (2.5, 0.5, 5)])
def test_interrupts_sent_before_giving_up(grace, resend, sends):
    s = Supervisor(started=0.0, timeout=1.0, grace=grace, resend_every=resend)
    actions = []
    t = 0.0
    while s.cause is None:
        wake = s.next_wake()
        assert wake is not None and wake >= t
        t = wake
        actions += s.tick(t)
    assert actions.count(SEND) == sends and actions[-1] is RESTART


def test_no_resend_once_the_guest_took_the_interrupt_but_the_grace_still_ends_it():
    """A re-sent interrupt would land in the cell's wrap-up and show a second KeyboardInterrupt."""
    s = Supervisor(started=0.0, timeout=1.0, grace=3.0, resend_every=1.0)
    assert s.tick(1.0) == [SEND]
    s.taken = True  # the guest showed a KeyboardInterrupt
    assert s.next_wake() == 4.0
    assert s.tick(2.0) == [] and s.tick(3.0) == []
    assert s.tick(4.0) == [RESTART]  # a guest that only claims to have stopped is still restarted


def test_a_new_press_after_a_caught_interrupt_sends_again():
    s = Supervisor(started=0.0, grace=5.0, resend_every=1.0)
    assert s.interrupt(1.0) == [SEND]
    s.taken = True
    assert s.interrupt(2.5) == [SEND]  # the user asks again: the guest may have caught the first one
