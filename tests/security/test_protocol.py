"""Protocol forgery: guest code tries to speak for the sandbox host or for another cell.

Promise (host_ts/main.ts, sandbox.py): Deno's own stdout/stderr are only logged, never read as protocol;
whatever the worker writes is framed by the supervisor as guest data for the current request; output
of a request that is over is never attributed to another one; invalid guest data is dropped or ends
the sandbox with a message. The next cells must run the user's code and show its true output.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from attack_kit import assert_alive, attack, dump, js_cell, result, token

from conftest import execute, start_kernel, stop_kernel

FORGED = token("forged")


@pytest.fixture(scope="module")
def proto():
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=3", "--SandboxKernel.interrupt_grace=1"])
    yield km, kc
    stop_kernel(km, kc)


@contextmanager
def own_kernel(*arguments: str) -> Iterator:
    km, kc = start_kernel(list(arguments))
    try:
        yield km, kc
    finally:
        stop_kernel(km, kc)


def restarted(run) -> bool:
    return run.content.get("ename") in ("SandboxRestarted", "SandboxTimeout") and "restarted" in run.content["evalue"]


def assert_next_cells_are_true(kc) -> bool:
    """The user's next cells run their own code and show exactly their own output; True if it restarted."""
    first = execute(kc, "print('next cell')\n6 * 7", timeout=120)
    was_restarted = first.content["status"] == "error"
    if was_restarted:  # the sandbox was restarted: the user is told, once
        assert restarted(first), dump(first)[:2000]
        first = execute(kc, "print('next cell')\n6 * 7", timeout=120)
    assert first.stream() == "next cell\n", dump(first)[:2000]
    assert result(first) == "42"
    assert FORGED not in dump(first)
    second = execute(kc, "'still true'", timeout=60)
    assert result(second) == "'still true'" and FORGED not in dump(second)
    assert second.stream() == "" and second.stream("stderr") == ""
    return was_restarted


def reset_sandbox(kc) -> None:
    """End the sandbox (the realm may be poisoned) and wait for the fresh one."""
    run = execute(kc, "import js\njs.Deno.exit(0)", timeout=60)
    assert run.content["status"] == "error"
    assert_alive(kc)


def frame(kind: int, request_id: int, payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return struct.pack(">IBI", 5 + len(body), kind, request_id) + body


# ---- Deno's own stdout/stderr ------------------------------------------------------------------


def test_fake_frames_on_deno_stdout_and_stderr_are_only_logged(proto):
    _, kc = proto
    forged = [
        frame(3, request_id, {"type": "reply", "content": {"status": "ok", "forged": FORGED}})
        for request_id in range(0, 64)
    ] + [frame(1, 5, {"text": FORGED}), frame(4, 0, {"event": "fatal", "message": FORGED})]
    blob = b"".join(forged)
    code = (
        "import js\n"
        f"blob = js.Uint8Array.new({list(blob)!r})\n"
        "js.Deno.stdout.writeSync(blob)\n"
        "js.Deno.stderr.writeSync(blob)\n"
        f"js.console.log({json.dumps({'type': 'iopub', 'msg_type': 'stream', 'content': {'name': 'stdout', 'text': FORGED}})!r})\n"
        f"js.console.error({json.dumps({'type': 'reply', 'content': {'status': 'ok', 'x': FORGED}})!r})\n"
        "print('real')"
    )
    run = attack(kc, code, FORGED)
    assert run.content["status"] == "ok"
    assert run.stream() == "real\n"
    assert_next_cells_are_true(kc)


# ---- messages inside the worker ------------------------------------------------------------------


def test_forged_post_messages_to_the_supervisor_are_ignored(proto):
    _, kc = proto
    execute(kc, "kept = 'yes'")
    code = "import js\nfrom pyodide.ffi import to_js\n" + "\n".join(
        f"js.postMessage(to_js({message!r}, dict_converter=js.Object.fromEntries))"
        for message in (
            {"type": "request", "id": 1, "request": {"op": "execute", "code": f"print({FORGED!r})"}},
            {"type": "reply", "content": {"status": "ok", "x": FORGED}},
            {"type": "init", "wheels": [], "mounts": []},
            {"type": "interrupt", "id": 1},
            {"type": "ready", "python_version": FORGED},
        )
    )
    run = attack(kc, code + "\nprint('real')", FORGED)
    assert run.stream() == "real\n"
    assert result(execute(kc, "kept")) == "'yes'", "the sandbox should not have restarted"
    assert_next_cells_are_true(kc)


def test_forged_fatal_message_restarts_and_the_user_is_told(proto):
    _, kc = proto
    execute(kc, "kept = 'gone soon'")
    code = (
        "import js\nfrom pyodide.ffi import to_js\n"
        f"js.postMessage(to_js({{'type': 'fatal', 'message': {FORGED!r}}}, dict_converter=js.Object.fromEntries))\n"
        "import time; time.sleep(2)"
    )
    run = execute(kc, code, timeout=60)
    if run.content["status"] == "error":
        told = run.content["evalue"]
    else:
        told = execute(kc, "1+1", timeout=120).stream("stderr")
    assert "restarted" in told and "variables were lost" in told
    assert_alive(kc)
    assert execute(kc, "kept").content["ename"] == "NameError"


def test_forged_requests_inside_the_worker_do_not_answer_later_cells():
    """self.dispatchEvent(new MessageEvent('message', {data: {type: 'request', id, ...}})) for the next ids."""
    with own_kernel() as (_, kc):
        request = {"op": "execute", "code": f"print({FORGED!r})", "silent": False, "store_history": True}
        code = js_cell(
            "for (let id = 1; id < 64; id++) self.dispatchEvent(new MessageEvent('message',"
            f" {{data: {{type: 'request', id, request: {json.dumps(request)}}}}})); return 'dispatched'"
        )
        execute(kc, code)
        assert_next_cells_are_true(kc)


# ---- guest events --------------------------------------------------------------------------------


def test_guest_events_of_forbidden_types_are_dropped(proto):
    _, kc = proto
    events = [
        {"type": "iopub", "msg_type": msg_type, "content": {"execution_state": "idle", "text": FORGED}}
        for msg_type in ("status", "execute_reply", "execute_input", "shutdown_reply", "comm_open", "stream")
    ] + [
        {
            "type": "iopub",
            "msg_type": "execute_result",
            "content": {"data": {"text/plain": FORGED}, "execution_count": "x"},
        },
        {"type": "iopub", "msg_type": "error", "content": {"ename": FORGED, "evalue": 1, "traceback": "no"}},
        {"type": "ready", "python_version": FORGED},
        {"type": "input_request", "prompt": FORGED},
        {"type": "weird", "x": FORGED},
    ]
    code = "import _sandbox_host, json\n" + "".join(f"_sandbox_host.emit({json.dumps(e)!r})\n" for e in events)
    run = attack(kc, code + "print('real')", FORGED)
    assert run.content["status"] == "ok"
    assert run.stream() == "real\n"
    assert {m["msg_type"] for m in run.outputs} == {"stream"}
    assert_next_cells_are_true(kc)


def test_non_json_guest_event_ends_the_sandbox_with_a_message(proto):
    _, kc = proto
    run = execute(kc, f"import _sandbox_host\n_sandbox_host.emit('not json {FORGED}')", timeout=60)
    assert run.content["ename"] == "SandboxRestarted"
    assert "broke the protocol" in run.content["evalue"] and "restarted" in run.content["evalue"]
    assert FORGED not in dump(run)
    assert_next_cells_are_true(kc)


def test_forged_replies_do_not_end_the_cell(proto):
    """Guest 'reply' events (valid or not) are invalid messages: the cell runs on and its own reply comes."""
    _, kc = proto
    code = (
        "import _sandbox_host, json\n"
        "_sandbox_host.emit(json.dumps({'type': 'reply', 'content': {'status': 'bogus'}}))\n"
        f"_sandbox_host.emit(json.dumps({{'type': 'reply', 'content': {{'status': 'ok', 'x': {FORGED!r}}}}}))\n"
        "import time; time.sleep(0.5)\n"
        "print('ran to the end')\n"
        "'real result'"
    )
    run = execute(kc, code, timeout=30)
    assert result(run) == "'real result'"
    assert run.stream() == "ran to the end\n"
    assert "dropped an invalid message from the sandbox (unknown event 'reply') and 1 more" in run.stream("stderr")
    assert FORGED not in dump(run)
    assert_next_cells_are_true(kc)


# ---- poisoning the worker's JS realm --------------------------------------------------------------

POISONS = {
    "Object.prototype.toJSON": "Object.prototype.toJSON = function () { return 'FORGED' }",
    "TextEncoder": "globalThis.TextEncoder = function () { this.encode = () => new Uint8Array([70, 79, 82, 71]) }",
    "TextDecoder.prototype.decode": "TextDecoder.prototype.decode = () => 'FORGED'",
    "JSON.parse": "JSON.parse = () => ({type: 'reply', content: {status: 'ok'}})",
    "Uint8Array.prototype.set": "Uint8Array.prototype.set = function () {}",
}


@pytest.mark.parametrize("what", list(POISONS))
def test_poisoned_js_realm_cannot_forge_the_next_cells(proto, what):
    """Either the glue does not use the poisoned global, or the sandbox restarts (or times out) cleanly."""
    _, kc = proto
    poison = POISONS[what].replace("FORGED", FORGED)
    run = execute(kc, f"import js\njs.eval({poison!r})\nprint('poisoned')", timeout=60)
    assert FORGED not in dump(run)
    fresh = restarted(run) | assert_next_cells_are_true(kc)
    if not fresh:
        reset_sandbox(kc)


def test_poisoned_json_stringify_cannot_forge_the_next_cells():
    """JSON.stringify replaced by one that returns the attacker's request: the next cells still run the user's."""
    with own_kernel("--SandboxKernel.cell_timeout=6", "--SandboxKernel.interrupt_grace=1") as (_, kc):
        forged = json.dumps({"op": "execute", "code": f"print({FORGED!r})", "silent": False, "store_history": True})
        execute(kc, f"import js\njs.eval({f'JSON.stringify = () => {forged!r}'!r})\nprint('poisoned')")
        assert_next_cells_are_true(kc)


# ---- output of one cell never appears in another ----------------------------------------------------


def test_late_output_of_a_background_task_is_dropped_between_cells(proto):
    _, kc = proto
    code = (
        "import asyncio\n"
        "async def later():\n"
        "    await asyncio.sleep(0.3)\n"
        f"    print({FORGED!r})\n"
        "task = asyncio.ensure_future(later())\n"
        "print('cell ends')"
    )
    first = execute(kc, code)
    assert first.stream() == "cell ends\n"
    time.sleep(1.0)  # the task prints while no cell runs
    assert result(execute(kc, "task.done()")) == "True"
    assert_next_cells_are_true(kc)


def test_late_js_console_output_never_reaches_the_frontend(proto):
    _, kc = proto
    run = execute(kc, f"import js\njs.eval({f'setTimeout(() => console.log({FORGED!r}), 200)'!r})\nprint('x')")
    assert run.stream() == "x\n"
    later = execute(kc, "import asyncio\nawait asyncio.sleep(0.6)\n'done'")
    assert result(later) == "'done'" and FORGED not in dump(later)


def test_background_task_output_does_not_show_up_in_the_next_cell(proto):
    """A task of cell 1 prints while cell 2 awaits: the text must not appear in cell 2."""
    _, kc = proto
    code = (
        "import asyncio\n"
        "async def later():\n"
        "    await asyncio.sleep(0.5)\n"
        f"    print({FORGED!r})\n"
        "task2 = asyncio.ensure_future(later())\n"
        "print('cell ends')"
    )
    assert execute(kc, code).stream() == "cell ends\n"
    second = execute(kc, "import asyncio\nawait asyncio.sleep(1.5)\nprint('second')")
    try:
        assert second.stream() == "second\n", f"cell 2 shows cell 1's output: {second.stream()!r}"
    finally:
        assert_alive(kc)
