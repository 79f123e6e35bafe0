"""A stand-in for a sandbox process, behind the kernel's pool: the Jupyter protocol's behaviour without Deno.

A cell's code is a little script of `;`-separated steps the fake acts out, as a guest would:
`print:TEXT`, `result:TEXT`, `set:NAME=VALUE`, `get:NAME` (a NameError if unset), `error:NAME`,
`sleep:SECONDS` (an interrupt ends it with KeyboardInterrupt), `hang` (ignores interrupts until it is killed),
`crash` (the process dies), `input:PROMPT` (asks the kernel for input and prints the answer).
Everything the fake sends goes through the kernel's real dispatcher and schema checks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sandbox_kernel.protocol import schema
from sandbox_kernel.sandbox.process import GuestListener, SandboxDied
from sandbox_kernel.sandbox.supervision import StopCause


class FakeSandbox:
    """What the kernel uses of a SandboxProcess, acting out each cell's script."""

    started = 0  # how many fakes were launched (a restart launches another)

    def __init__(self) -> None:
        FakeSandbox.started += 1
        self.number = FakeSandbox.started
        self.variables: dict[str, str] = {}
        self.death_reason: str | None = None
        self.death_reported = False
        self.snapshot = None
        self.wasm_bytes = 64 << 20
        self.interrupts = 0
        self._interrupted = asyncio.Event()
        self._dead = asyncio.Event()
        self.running = asyncio.Event()  # a cell's script has begun (tests interrupt it then)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_request = 0

    @property
    def alive(self) -> bool:
        return self.death_reason is None

    # ---- what the kernel calls ------------------------------------------------------------------------------
    async def request(self, op: str, payload: dict[str, Any], listener: GuestListener) -> dict[str, Any]:
        if not self.alive:
            raise SandboxDied(self.death_reason or "dead", started=False)
        self._interrupted.clear()
        acting = asyncio.ensure_future(self._act(op, payload, listener))
        dying = asyncio.ensure_future(self._dead.wait())
        try:
            await asyncio.wait({acting, dying}, return_when=asyncio.FIRST_COMPLETED)
            if not acting.done():
                raise SandboxDied(self.death_reason or "killed", self._cause)
            reply = acting.result()
        finally:
            acting.cancel()
            dying.cancel()
        return schema.reply(op, json.dumps(reply).encode())  # checked as a real reply is

    def interrupt(self) -> None:
        self.interrupts += 1
        self._interrupted.set()

    def answer(self, number: int, content: dict[str, Any]) -> None:
        future = self._answers.pop(number, None)
        if future is not None and not future.done():
            future.set_result(content)

    async def kill(self, why: str, cause: StopCause = StopCause.CRASH) -> None:
        self._die(why, cause)

    def kill_soon(self, why: str) -> None:
        self._die(why, StopCause.CRASH)

    def kill_now(self) -> None:
        self._die("killed", StopCause.CRASH)

    def cpu_seconds(self) -> float:
        return 0.0

    def send_data(self, parts: list[bytes]) -> None:
        pass

    def _die(self, why: str, cause: StopCause) -> None:
        if self.death_reason is None:
            self.death_reason, self._cause = why, cause
            self._dead.set()

    # ---- the guest's side --------------------------------------------------------------------------------
    async def _act(self, op: str, payload: dict[str, Any], listener: GuestListener) -> dict[str, Any]:
        self.running.set()
        if op != "execute":
            return {"status": "ok", "matches": [], "cursor_start": 0, "cursor_end": 0, "metadata": {}}
        for step in filter(None, payload["code"].split(";")):
            verb, _, arg = step.partition(":")
            if verb == "print":
                listener.on_stream("stdout", arg + "\n")
            elif verb == "result":
                bundle = {"data": {"text/plain": arg}, "metadata": {}, "execution_count": payload["execution_count"]}
                self._event(listener, {"type": "iopub", "msg_type": "execute_result", "content": bundle})
            elif verb == "set":
                name, _, value = arg.partition("=")
                self.variables[name] = value
            elif verb == "get":
                if arg not in self.variables:
                    return self._error("NameError", f"name '{arg}' is not defined", listener)
                self._event(listener, self._result(self.variables[arg], payload))
            elif verb == "error":
                return self._error(arg, "as the script says", listener)
            elif verb == "sleep":
                try:
                    await asyncio.wait_for(self._interrupted.wait(), float(arg))
                except asyncio.TimeoutError:
                    continue
                return self._error("KeyboardInterrupt", "Interrupted by user", listener)
            elif verb == "hang":
                await asyncio.Event().wait()
            elif verb == "crash":
                self._die("the sandbox crashed (a test's fake)", StopCause.CRASH)
                await asyncio.Event().wait()
            elif verb == "input":
                value = await self._ask(arg, listener)
                listener.on_stream("stdout", f"{value}\n")
        return {"status": "ok", "user_expressions": {}, "payload": []}

    def _result(self, text: str, payload: dict[str, Any]) -> dict[str, Any]:
        content = {"data": {"text/plain": repr(text)}, "metadata": {}, "execution_count": payload["execution_count"]}
        return {"type": "iopub", "msg_type": "execute_result", "content": content}

    def _error(self, ename: str, evalue: str, listener: GuestListener) -> dict[str, Any]:
        content = {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
        self._event(listener, {"type": "iopub", "msg_type": "error", "content": content})
        return {"status": "error", **content, "user_expressions": {}, "payload": []}

    async def _ask(self, prompt: str, listener: GuestListener) -> str:
        self._next_request += 1
        number = self._next_request
        self._answers[number] = asyncio.get_running_loop().create_future()
        self._event(listener, {"type": "input_request", "n": number, "prompt": prompt, "password": False})
        answer = await self._answers[number]
        return str(answer.get("value", answer))

    @staticmethod
    def _event(listener: GuestListener, event: dict[str, Any]) -> None:
        listener.on_event(json.dumps(event).encode())
