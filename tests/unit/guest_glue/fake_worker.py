"""The guest glue booted in a plain CPython process, served as worker.ts serves it (without Deno or Pyodide).

Run by conftest.Guest: `python fake_worker.py GUEST_DIR`. It boots the glue with a FakeHost as `_sandbox_host`
and fake Pyodide modules, prints `{"facts": ...}` (what `attach` returns), then reads JSON commands, one a line:

- `{"setup": CODE}`: run test set-up code here (globals: api, host, fakes); answers `{}`.
- `{"request": REQUEST, "id": N, "answers": [...], "data": [BASE64...], "interrupt_on": TEXT}`: serve REQUEST with
  `api.handle` as request N; `answers` are the kernel's answers to the glue's questions (null: interrupted);
  `data` the bytes sent with it; when a stream write contains `interrupt_on`, the kernel interrupts the waiting
  cell (as worker.ts calls `interrupt_async`). Answers `{"reply": REPLY, "log": [...]}`: what the glue sent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import traceback
from typing import Any

sys.path.insert(0, sys.argv[1])
from fake_host import INTERRUPT, FakeHost, FakePyodide, FakeUint8Array

PROTOCOL_IN = os.fdopen(os.dup(0), "r")  # booting replaces sys.stdin and sys.stdout
PROTOCOL_OUT = os.fdopen(os.dup(1), "w")


def send(answer: dict[str, Any]) -> None:
    PROTOCOL_OUT.write(json.dumps(answer, default=lambda b: base64.b64encode(b).decode("ascii")) + "\n")
    PROTOCOL_OUT.flush()


def serve(loop: asyncio.AbstractEventLoop, api: Any, host: FakeHost, command: dict[str, Any]) -> dict[str, Any]:
    host.log.clear()
    host.answers = [INTERRUPT if a is None else a for a in command.get("answers", [])]
    marker = command.get("interrupt_on")

    def interrupt_on_marker(text: str) -> None:  # as worker.ts does when the kernel interrupts an awaiting cell
        if marker and marker in text:
            loop.call_soon(api.interrupt_async)

    host.on_write = interrupt_on_marker
    data = [FakeUint8Array(base64.b64decode(d)) for d in command["data"]] if command.get("data") else None
    reply = loop.run_until_complete(api.handle(json.dumps(command["request"]), command["id"], data))
    host.on_write = None
    return {"reply": json.loads(reply), "log": host.log}


def main() -> None:
    fakes = FakePyodide()
    sys.modules.update(fakes.modules())
    host = FakeHost()
    sys.modules["_sandbox_host"] = host  # type: ignore[assignment]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from sandbox_guest import api

    send({"facts": json.loads(api.attach(restored=False))})
    scope = {"api": api, "host": host, "fakes": fakes}
    for line in PROTOCOL_IN:
        command = json.loads(line)
        try:
            if "setup" in command:
                exec(command["setup"], scope)
                send({})
            else:
                send(serve(loop, api, host, command))
        except BaseException:
            send({"crash": traceback.format_exc()})


if __name__ == "__main__":
    main()
    PROTOCOL_OUT.flush()
    os._exit(0)  # skips tearing down the interpreter (seconds once Jedi's caches are full); nothing is left to save
