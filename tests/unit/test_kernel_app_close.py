"""The kernel process's orderly close: the control thread ends before ipykernel closes IOPub."""

from __future__ import annotations

from ipykernel.kernelapp import IPKernelApp

from sandbox_kernel.jupyter.app import SandboxKernelApp


class FakeControlThread:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def is_alive(self) -> bool:
        return "control joined" not in self.events

    def stop(self) -> None:
        self.events.append("control stopped")

    def join(self) -> None:
        self.events.append("control joined")


def test_the_control_thread_is_joined_before_ipykernel_closes_iopub(monkeypatch):
    """After a shutdown_request the control thread publishes "idle"; IOPub must still be open then."""
    events: list[str] = []
    monkeypatch.setattr(IPKernelApp, "close", lambda self: events.append("ipykernel closes iopub"))
    app = SandboxKernelApp()
    app.control_thread = FakeControlThread(events)
    app.close()
    assert events == ["control stopped", "control joined", "ipykernel closes iopub"]
