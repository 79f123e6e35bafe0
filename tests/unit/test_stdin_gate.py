"""The stdin gate over real zmq sockets: one prompt at a time, and replies only count for their own prompt."""

from __future__ import annotations

import asyncio
import logging

import zmq
from jupyter_client.session import Session

from sandbox_kernel.jupyter.stdin_gate import StdinGate


class Frontend:
    """The client end of the stdin channel (a DEALER, as jupyter_client uses)."""

    def __init__(self, ctx: zmq.Context, url: str, session: Session) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.connect(url)
        self.session = session

    def prompts(self) -> list[dict]:
        found = []
        while self.sock.poll(200):
            _, msg = self.session.recv(self.sock)
            found.append(msg)
        return found

    def reply(self, value: str, parent: dict | None) -> None:
        self.session.send(self.sock, "input_reply", {"value": value}, parent=parent or {})


def harness():
    ctx = zmq.Context()
    session = Session(key=b"k")
    kernel = ctx.socket(zmq.ROUTER)
    port = kernel.bind_to_random_port("tcp://127.0.0.1")
    frontend = Frontend(ctx, f"tcp://127.0.0.1:{port}", session)
    frontend.session.send(frontend.sock, "hello", {})  # so the ROUTER learns the DEALER's identity
    assert kernel.poll(2000)
    ident = kernel.recv_multipart()[0]
    return ctx, StdinGate(session, kernel, logging.getLogger("test")), frontend, [ident]


def test_concurrent_prompts_are_asked_one_at_a_time_and_answers_match_them():
    async def go():
        ctx, gate, frontend, ident = harness()
        first = asyncio.ensure_future(gate.ask("guest's own prompt: ", False, ident, {}))
        second = asyncio.ensure_future(gate.ask("[sandbox-kernel] Allow S.m()? ", False, ident, {}, {"approval": 1}))
        await asyncio.sleep(0.05)
        shown = await asyncio.to_thread(frontend.prompts)
        assert [m["content"]["prompt"] for m in shown] == ["guest's own prompt: "]  # the second waits its turn
        frontend.reply("a", shown[0]["header"])  # the person types 'a' into the guest's prompt
        assert await first == "a"
        shown = await asyncio.to_thread(frontend.prompts)
        assert [m["content"]["prompt"] for m in shown] == ["[sandbox-kernel] Allow S.m()? "]
        assert shown[0]["metadata"] == {"approval": 1}
        frontend.reply("a", shown[0]["header"] | {"msg_id": "an-older-prompt"})  # answers another prompt: dropped
        await asyncio.sleep(0.1)
        assert not second.done()
        frontend.reply("n", shown[0]["header"])
        assert await second == "n"  # the approval got its own answer, "no"
        ctx.destroy(linger=0)

    asyncio.run(go())


def test_a_reply_without_parent_answers_the_open_prompt():
    """jupyter_client's `input()` sends no parent header; with one prompt open at a time that is unambiguous."""

    async def go():
        ctx, gate, frontend, ident = harness()
        asked = asyncio.ensure_future(gate.ask("name? ", False, ident, {}))
        await asyncio.to_thread(frontend.prompts)
        frontend.reply("Ada", None)
        assert await asked == "Ada"
        ctx.destroy(linger=0)

    asyncio.run(go())


def test_stale_replies_sent_before_a_prompt_are_dropped():
    async def go():
        ctx, gate, frontend, ident = harness()
        frontend.reply("stale yes", None)  # typed ahead, before any prompt
        await asyncio.sleep(0.1)
        asked = asyncio.ensure_future(gate.ask("Allow? ", False, ident, {}))
        shown = await asyncio.to_thread(frontend.prompts)
        await asyncio.sleep(0.1)
        assert not asked.done()
        frontend.reply("n", shown[0]["header"])
        assert await asked == "n"
        ctx.destroy(linger=0)

    asyncio.run(go())
