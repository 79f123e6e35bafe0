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


def assert_next_cells_are_true(kc, restart: str = "none") -> None:
    """The user's next cells run their own code and show exactly their own output.

    `restart` says what the sandbox the previous cell left behind does to the next cell: "none" (it runs
    there) or "fails" (it dies under that cell, which fails with SandboxRestarted; the one after runs).
    """
    first = execute(kc, "print('next cell')\n6 * 7", timeout=120)
    if restart == "fails":
        assert first.content["ename"] == "SandboxRestarted", dump(first)[:2000]
        assert "the sandbox was restarted and all variables were lost" in first.content["evalue"]
        assert FORGED not in dump(first)
        first = execute(kc, "print('next cell')\n6 * 7", timeout=120)
    else:
        assert restart == "none", restart
        assert first.stream("stderr") == "", dump(first)[:2000]
    assert first.stream() == "next cell\n", dump(first)[:2000]
    assert result(first) == "42"
    assert FORGED not in dump(first)
    second = execute(kc, "'still true'", timeout=60)
    assert result(second) == "'still true'" and FORGED not in dump(second)
    assert second.stream() == "" and second.stream("stderr") == ""


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
    assert_next_cells_are_true(kc, "none")


# ---- messages inside the worker ------------------------------------------------------------------


def test_forged_post_messages_to_the_supervisor_are_ignored(proto):
    _, kc = proto
    execute(kc, "kept = 'yes'")
    code = "import js\nfrom pyodide.ffi import to_js\n" + "\n".join(
        f"js.postMessage(to_js({message!r}, dict_converter=js.Object.fromEntries))"
        for message in (
            {"type": "request", "id": 1, "request": {"op": "execute", "code": f"print({FORGED!r})"}},
            {"type": "reply", "content": {"status": "ok", "x": FORGED}},
            {"type": "init", "packagesSite": "/", "mounts": []},
            {"type": "interrupt", "id": 1},
            {"type": "ready", "python_version": FORGED},
        )
    )
    run = attack(kc, code + "\nprint('real')", FORGED)
    assert run.stream() == "real\n"
    assert result(execute(kc, "kept")) == "'yes'", "the sandbox should not have restarted"
    assert_next_cells_are_true(kc, "none")


def test_forged_fatal_message_restarts_and_the_user_is_told(proto):
    _, kc = proto
    execute(kc, "kept = 'gone soon'")
    code = (
        "import js\nfrom pyodide.ffi import to_js\n"
        f"js.postMessage(to_js({{'type': 'fatal', 'message': {FORGED!r}}}, dict_converter=js.Object.fromEntries))\n"
        # The supervisor ends the sandbox on the message, asynchronously: the cell waits for that, and only
        # cell_timeout (3 s) ends the wait if the sandbox stays (SandboxTimeout: the test fails).
        "import time; time.sleep(60)"
    )
    run = execute(kc, code, timeout=60)
    assert run.content["ename"] == "SandboxRestarted", dump(run)[:2000]
    assert run.content["evalue"] == (
        f"the sandbox crashed: {FORGED}; the sandbox was restarted and all variables were lost."
    )  # the guest's text is shown as what it is: the reason the guest gave
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
        assert result(execute(kc, code)) == "'dispatched'"
        assert_next_cells_are_true(kc, "none")


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
    assert_next_cells_are_true(kc, "none")


def test_non_json_guest_event_ends_the_sandbox_with_a_message(proto):
    _, kc = proto
    run = execute(kc, f"import _sandbox_host\n_sandbox_host.emit('not json {FORGED}')", timeout=60)
    assert run.content["ename"] == "SandboxRestarted"
    assert "broke the protocol" in run.content["evalue"] and "restarted" in run.content["evalue"]
    assert FORGED not in dump(run)
    assert_next_cells_are_true(kc, "none")  # told once, in the cell above


def test_forged_replies_do_not_end_the_cell(proto):
    """Guest 'reply' events (valid or not) are invalid messages: the cell runs on and its own reply comes."""
    _, kc = proto
    code = (
        "import _sandbox_host, json\n"
        "_sandbox_host.emit(json.dumps({'type': 'reply', 'content': {'status': 'bogus'}}))\n"
        f"_sandbox_host.emit(json.dumps({{'type': 'reply', 'content': {{'status': 'ok', 'x': {FORGED!r}}}}}))\n"
        "import time; time.sleep(0.5)\n"  # the cell runs on after the forged replies
        "print('ran to the end')\n"
        "'real result'"
    )
    run = execute(kc, code, timeout=30)
    assert result(run) == "'real result'"
    assert run.stream() == "ran to the end\n"
    assert "dropped an invalid message from the sandbox (unknown event 'reply') and 1 more" in run.stream("stderr")
    assert FORGED not in dump(run)
    assert_next_cells_are_true(kc, "none")


# ---- poisoning the worker's JS realm --------------------------------------------------------------

# What each poison does: the poisoning cell's own stdout, and what its sandbox does to the next cell.
POISONS = {
    # The glue does not use these once guest code runs (it keeps its own references from before).
    "Object.prototype.toJSON": ("Object.prototype.toJSON = function () { return 'FORGED' }", "poisoned\n", "none"),
    "TextEncoder": (
        "globalThis.TextEncoder = function () { this.encode = () => new Uint8Array([70, 79, 82, 71]) }",
        "poisoned\n",
        "none",
    ),
    "JSON.parse": ("JSON.parse = () => ({type: 'reply', content: {status: 'ok'}})", "poisoned\n", "none"),
    # The glue's events of the next cell become invalid JSON: the kernel ends that sandbox under the cell.
    "TextDecoder.prototype.decode": ("TextDecoder.prototype.decode = () => 'FORGED'", "poisoned\n", "fails"),
}


@pytest.mark.parametrize("what", list(POISONS))
def test_poisoned_js_realm_cannot_forge_the_next_cells(proto, what):
    _, kc = proto
    poison, own_stdout, restart = POISONS[what]
    run = execute(kc, f"import js\njs.eval({poison.replace('FORGED', FORGED)!r})\nprint('poisoned')", timeout=60)
    assert run.content["status"] == "ok", dump(run)[:2000]
    assert run.stream() == own_stdout
    assert FORGED not in dump(run)
    assert_next_cells_are_true(kc, restart)
    if restart == "none":
        reset_sandbox(kc)  # the next test gets a realm without the poison


def test_poisoned_typed_array_set_cannot_forge_the_next_cells():
    """Uint8Array.prototype.set made a no-op. The glue writes the output ring with the `set` it captured at load
    (host_ts/shared_views.ts), so the cell's output arrives whole and the next cells run as written. (Before,
    the ring's writes wrote nothing and the supervisor died of the stale bytes it read: a restart.)"""
    with own_kernel("--SandboxKernel.cell_timeout=20", "--SandboxKernel.interrupt_grace=1") as (_, kc):
        code = "import js\njs.eval('Uint8Array.prototype.set = function () {}')\nprint('x' * 20, flush=True)"
        run = execute(kc, code, timeout=90)
        assert run.content["status"] == "ok" and run.stream() == "x" * 20 + "\n", dump(run)[:2000]
        assert_next_cells_are_true(kc, "none")


def test_poisoned_json_stringify_cannot_forge_the_next_cells():
    """JSON.stringify replaced by one that returns the attacker's request: the next cells still run the user's."""
    with own_kernel("--SandboxKernel.cell_timeout=6", "--SandboxKernel.interrupt_grace=1") as (_, kc):
        forged = json.dumps({"op": "execute", "code": f"print({FORGED!r})", "silent": False, "store_history": True})
        run = execute(kc, f"import js\njs.eval({f'JSON.stringify = () => {forged!r}'!r})\nprint('poisoned')")
        assert run.stream() == "poisoned\n", dump(run)[:2000]
        assert_next_cells_are_true(kc, "none")  # the glue captured JSON.stringify before any guest code ran


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
    # Time passes between cells, so that the task's timer is due when the sandbox (paused while no cell
    # runs) resumes for the next cell: it prints at once then, as the request of its own cell, which is over.
    time.sleep(1.0)
    after = execute(kc, "await task\ntask.done()")
    assert result(after) == "True" and after.stream() == "" and FORGED not in dump(after)
    assert_next_cells_are_true(kc, "none")


def test_late_js_console_output_never_reaches_the_frontend(proto):
    _, kc = proto
    run = execute(kc, f"import js\njs.eval({f'setTimeout(() => console.log({FORGED!r}), 200)'!r})\nprint('x')")
    assert run.stream() == "x\n"
    # The next cell runs while the 200 ms timer fires (the sandbox is paused between cells).
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
    second = execute(kc, "import asyncio\nawait asyncio.sleep(1.5)\nprint('second')")  # the task prints meanwhile
    try:
        assert second.stream() == "second\n", f"cell 2 shows cell 1's output: {second.stream()!r}"
    finally:
        assert_alive(kc)
