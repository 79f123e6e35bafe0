"""The kernel process is the target: a hostile cell tries to end itself early, outlive its cell, forge a
person's decision, wedge, bloat or flood the kernel, or lose its own reply.

Promises (docs/security.md): the end of a cell is decided outside guest Python; the sandbox is paused
between requests (no CPU) and nothing a leftover prints reaches a later cell; one approval prompt at a
time, answered only by its own reply, showing the whole call, and guest prompts cannot imitate it; every
guest message is checked and every guest request answered; every message of a cell counts against
max_output_bytes; the kernel's memory stays bounded; a cell always gets its execute_reply.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from attack_kit import assert_alive, dump, result, token
from test_resources import rss_mib

from conftest import FIXTURES_DIR, Run, execute, start_kernel, stop_kernel
from test_lifecycle import sandbox_pids

FORGED = token("forged")
CLOCK_TICKS = 100  # os.sysconf("SC_CLK_TCK") on Linux


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def emit(*events: dict[str, Any]) -> str:
    """Guest code that sends raw events to the kernel, as hostile code can (the glue's own channel)."""
    return "import _sandbox_host, json\n" + "".join(f"_sandbox_host.emit({json.dumps(e)!r})\n" for e in events)


@pytest.fixture(scope="module")
def hostile():
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=4", "--SandboxKernel.interrupt_grace=2"])
    yield km, kc
    stop_kernel(km, kc)


# ---- the cell ends when the trusted side says so ------------------------------------------------


def test_a_forged_reply_does_not_end_a_busy_cell(hostile):
    """Before: the guest's own 'reply' event told the frontend 'ok' while its loop ran on, unwatched."""
    _, kc = hostile
    code = emit({"type": "reply", "content": {"status": "ok", "x": FORGED}}) + "while True:\n    pass"
    started = time.monotonic()
    run = execute(kc, code, timeout=60)
    took = time.monotonic() - started
    assert run.content["status"] == "error" and run.content["ename"] == "SandboxTimeout", dump(run)[:2000]
    assert run.reply["metadata"]["sandbox_kernel"]["timed_out"] is True
    assert took >= 4, f"the cell ended after {took:.1f}s, before cell_timeout=4"
    assert "dropped an invalid message from the sandbox (unknown event 'reply')" in run.stream("stderr")
    assert_alive(kc)


def test_a_guest_that_says_it_took_the_interrupt_but_runs_on_is_still_restarted(hostile):
    """interrupt_taken only stops the kernel's re-sent interrupts: the restart after interrupt_grace still comes."""
    _, kc = hostile
    execute(kc, "kept = 1")
    taken = json.dumps({"type": "interrupt_taken"})
    code = (
        emit({"type": "interrupt_taken"})
        + "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n"
        + f"        _sandbox_host.emit({taken!r})\n"
    )
    run = execute(kc, code, timeout=60)
    assert run.content["ename"] == "SandboxTimeout", dump(run)[:2000]
    assert "did not stop within interrupt_grace=2s" in run.content["evalue"]
    assert "variables were lost" in run.content["evalue"]
    assert_alive(kc)


def test_a_guest_that_writes_without_pause_is_still_interrupted_and_keeps_its_variables(hostile):
    """Before: empty output records, written without pause, kept the supervisor's event loop from reading the
    kernel's interrupts (each wait for the ring found it written already), so the cell ran past interrupt_grace and
    the sandbox was restarted, its variables lost. A shell loop (`while true; do :; done`) did it by itself."""
    _, kc = hostile
    execute(kc, "kept = 1")
    for _ in range(3):
        run = execute(kc, "import _sandbox_host\nwhile True:\n    _sandbox_host.write(1, '')", timeout=60)
        assert run.content["ename"] == "SandboxTimeout", dump(run)[:2000]
        assert "variables were kept" in run.content["evalue"], dump(run)[:2000]
    assert result(execute(kc, "kept")) == "1"


def test_a_poisoned_typed_array_method_no_longer_hands_over_the_output_ring(hostile):
    """Guest code poisons Uint8Array.prototype.set to catch the output ring and then write a forged REPLY record
    into it. It used to catch the ring; now the glue writes the ring with the method captured at load
    (host_ts/shared_views.ts), so it catches nothing. A forged record of any kind the worker may not write is
    dropped by the supervisor (framing_test.ts: "kinds the worker may not write are dropped")."""
    _, kc = hostile
    code = (
        "import js\n"
        "js.eval('''\n"
        "globalThis.__ring = null;\n"
        "const set = Object.getPrototypeOf(Uint8Array.prototype).set;\n"
        "Uint8Array.prototype.set = function (src, off) {\n"
        "  if (this.buffer instanceof SharedArrayBuffer && this.length > 100000) globalThis.__ring = this;\n"
        "  return set.call(this, src, off);\n"
        "};\n"
        "''')\n"
        "print('steal ' * 1000)\n"
        "caught = js.eval('delete Uint8Array.prototype.set; String(globalThis.__ring)')\n"
        "caught"
    )
    run = execute(kc, code, timeout=60)
    assert run.stream().startswith("steal steal"), dump(run)[:2000]
    assert result(run) == "'null'", dump(run)[:2000]
    assert_alive(kc)


# ---- between cells the guest is idle -------------------------------------------------------------

LEFTOVERS = (
    "import asyncio, js\n"
    "from pyodide.ffi import create_proxy\n"
    "js.eval('setInterval(() => { const end = Date.now() + 40; while (Date.now() < end) {} }, 50)')\n"
    f"js.setInterval(create_proxy(lambda: print({FORGED!r} + '-timer')), 100)\n"
    "async def spin():\n"
    "    while True:\n"
    "        await asyncio.sleep(0)\n"
    "async def chatter():\n"
    "    while True:\n"
    "        await asyncio.sleep(0.1)\n"
    f"        print({FORGED!r} + '-task')\n"
    "tasks = [asyncio.ensure_future(spin()), asyncio.ensure_future(chatter())]\n"
    "print('left behind')"
)


def test_leftover_timers_and_tasks_use_no_cpu_between_cells_and_never_print_into_later_ones():
    km, kc = start_kernel(["--SandboxKernel.spare_sandbox=False"])
    try:
        assert execute(kc, LEFTOVERS).stream() == "left behind\n"
        pids = sandbox_pids(km.provisioner.process.pid)
        assert pids
        before = cpu_seconds(pids)
        # Time passes between cells: the leftover timers and tasks would burn CPU now if the sandbox ran.
        time.sleep(2.0)
        idle = cpu_seconds(pids) - before
        assert idle < 0.1, f"the sandbox used {idle:.2f}s of CPU in 2s between cells"
        # The leftovers are real: while a later cell awaits, they run (and burn CPU) ...
        before = cpu_seconds(pids)
        later = execute(kc, "import asyncio\nawait asyncio.sleep(1.5)\nprint('second')", timeout=60)
        busy = cpu_seconds(pids) - before
        assert busy > 0.5, f"the leftovers did not run while a cell awaited ({busy:.2f}s): the test proves nothing"
        # ... but nothing they print shows up in that cell.
        assert later.stream() == "second\n", dump(later)[:2000]
        assert FORGED not in dump(later)
    finally:
        stop_kernel(km, kc)


# ---- approvals ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def asking(tmp_path_factory):
    audit = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    km, kc = start_kernel(
        [
            f"--SandboxKernel.skills_path={FIXTURES_DIR}",
            f"--SandboxKernel.audit_log={audit}",
            '--SandboxKernel.skill_policy={"GuardedSkill": "ask"}',
        ]
    )
    yield km, kc, audit
    stop_kernel(km, kc)


def drive_stdin(kc, code: str, answer, timeout: float = 60) -> tuple[Run, list[dict[str, Any]]]:
    """Run `code` with stdin allowed; `answer(request_msg)` replies to each prompt. Returns the run and prompts."""
    prompts: list[dict[str, Any]] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                msg = kc.get_stdin_msg(timeout=0.1)
            except queue.Empty:
                continue
            prompts.append(msg)
            answer(msg)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        run = execute(kc, code, timeout=timeout, allow_stdin=True)
    finally:
        done.set()
        thread.join(timeout=5)
    return run, prompts


def is_approval(msg: dict[str, Any]) -> bool:
    return "approval" in msg["metadata"].get("sandbox_kernel", {})


def audit_lines(audit: Path) -> list[dict[str, Any]]:
    """The audit log's skill-call entries (it has a line per cell too)."""
    lines = audit.read_text().splitlines() if audit.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["kind"] == "skill_call"]


def test_concurrent_prompts_cannot_take_each_others_answers(asking):
    """The guest opens its own prompt and fires skill calls at once; the person answers 'a' to the guest's
    prompt and 'n' to every approval. Before: the 'a' could land on an approval ('always')."""
    _, kc, audit = asking
    calls = [
        {"type": "skill_call", "n": 900 + i, "skill": "GuardedSkill", "method": "touch", "args": [], "kwargs": {}}
        for i in range(3)
    ]
    code = emit(*calls) + "answer = input('Type a to continue: ')\nanswer"
    seen_before = len(audit_lines(audit))

    def answer(msg: dict[str, Any]) -> None:
        kc.input("n" if is_approval(msg) else "a")  # jupyter_client sends no parent: only one prompt may be open

    run, prompts = drive_stdin(kc, code, answer)
    assert result(run) == "'a'"
    assert any(not is_approval(p) for p in prompts)
    decisions = [entry["decision"] for entry in audit_lines(audit)[seen_before:]]
    assert decisions and set(decisions) == {"refused"}, decisions
    # No "always" was recorded: the next call still needs a person.
    refused = execute(kc, "device.GuardedSkill.touch()", allow_stdin=False)
    assert refused.content["ename"] == "SkillRefused" and "needs approval" in refused.content["evalue"]


def test_a_reply_to_another_prompt_does_not_approve(asking):
    _, kc, _ = asking
    answered: list[str] = []

    def answer(msg: dict[str, Any]) -> None:
        if not answered:  # first a 'yes' that names some other prompt as its parent: ignored
            stale = kc.session.msg("input_reply", {"value": "y"}, parent=msg["header"] | {"msg_id": "another-prompt"})
            kc.stdin_channel.send(stale)
            answered.append("stale")
        kc.input("n")

    run, prompts = drive_stdin(kc, "device.GuardedSkill.touch()", answer)
    assert len(prompts) == 1
    assert run.content["ename"] == "SkillRefused" and "not approved" in run.content["evalue"]


def test_long_arguments_are_approved_by_digest_and_can_be_seen_in_full(asking):
    _, kc, _ = asking
    hidden = "THE-PART-PAST-THE-PROMPT"
    code = f"device.GuardedSkill.touch('x' * 3000 + {hidden!r})"
    answers = iter(["v", "n"])

    def answer(msg: dict[str, Any]) -> None:
        kc.input(next(answers))

    run, prompts = drive_stdin(kc, code, answer)
    assert len(prompts) == 2
    prompt = prompts[0]["content"]["prompt"]
    approval = prompts[0]["metadata"]["sandbox_kernel"]["approval"]
    assert hidden not in prompt and "answer [v] to see them all" in prompt and approval["sha256"][:16] in prompt
    assert hidden in approval["arguments"]
    view = [m for m in run.outputs if m["metadata"].get("sandbox_kernel", {}).get("notice") == "approval_view"]
    assert len(view) == 1 and hidden in view[0]["content"]["text"]


@pytest.mark.parametrize(
    "prompt",
    [
        "[sandbox-kernel] Allow GuardedSkill.touch()? [y]es once / [a]lways this session / [N]o: ",
        "Allow GuardedSkill.touch()? [y]es once / [a]lways this session / [N]o: ",
        "Allow Guarded\u200bSkill.touch()? ",
    ],
)
def test_guest_prompts_cannot_imitate_the_approval_prompt(asking, prompt):
    _, kc, _ = asking
    run, prompts = drive_stdin(kc, f"input({prompt!r})", lambda msg: kc.input("a"))
    assert prompts == []
    assert run.content["ename"] == "InputRefused" and "approval prompt" in run.content["evalue"]


def test_answers_to_requests_nobody_waits_for_never_take_the_place_of_the_awaited_one():
    """The guest sends skill calls it does not wait for, each just before one it does: their answers come back to
    back into the one slot the guest reads. Before: an answer was written over one being read, then cleared unread,
    and the cell hung (1000 rounds hung 3 runs of 3; also seen as the approval tests' rare 60 s hang)."""
    km, kc = start_kernel(
        [
            "--SandboxKernel.cell_timeout=30",
            f"--SandboxKernel.skills_path={FIXTURES_DIR}",
            '--SandboxKernel.skill_policy={"GuardedSkill": "ask"}',
        ]
    )
    try:
        unawaited = {"type": "skill_call", "skill": "GuardedSkill", "method": "touch", "args": [], "kwargs": {}}
        code = (
            "import _sandbox_host, json\nrefused = 0\nfor i in range(1000):\n"
            f"    _sandbox_host.emit(json.dumps({{**{unawaited!r}, 'n': 10**6 + i}}))\n"
            "    try:\n        device.GuardedSkill.touch()\n"
            "    except Exception as e:\n        refused += type(e).__name__ == 'SkillRefused'\nrefused"
        )
        run = execute(kc, code, timeout=60, allow_stdin=False)
        assert result(run) == "1000", dump(run)[:2000]
    finally:
        stop_kernel(km, kc)


def test_kernel_notices_carry_metadata_that_guest_output_cannot(hostile):
    _, kc = hostile
    code = (
        "import sys\n"
        "print('[output truncated: fake notice]', file=sys.stderr)\n"
        "from IPython.display import display\n"
        "display({'text/plain': 'x'}, raw=True, metadata={'sandbox_kernel': {'notice': 'timeout'}})\n"
        "from IPython.display import Javascript\n"
        "display(Javascript('1'))"
    )
    run = execute(kc, code)
    marked = [m for m in run.outputs if "sandbox_kernel" in m["metadata"]]
    assert [m["metadata"]["sandbox_kernel"]["notice"] for m in marked] == ["output_dropped"]
    guest = [
        m for m in run.outputs if m["msg_type"] == "display_data" and m["content"]["data"].get("text/plain") == "x"
    ]
    assert guest and guest[0]["metadata"] == {}  # the guest's content metadata is not message metadata


# ---- every guest message checked, every request answered ------------------------------------------

BOGUS = {
    "pip_installed with non-string specs": {"type": "pip_installed", "n": 11, "specs": [{"x": 1}], "index_urls": None},
    "pip_installed without specs": {"type": "pip_installed", "n": 12},
    "skill_call with a list for kwargs": {
        "type": "skill_call",
        "n": 13,
        "skill": "S",
        "method": "m",
        "args": [],
        "kwargs": [],
    },
    "skill_call with a huge name": {
        "type": "skill_call",
        "n": 14,
        "skill": "S" * 10_000,
        "method": "m",
        "args": [],
        "kwargs": {},
    },
    "load_packages with numbers": {"type": "load_packages", "n": 15, "imports": [1, 2, 3]},
    "load_packages with a million names": {"type": "load_packages", "n": 16, "imports": ["x"] * 1_000_000},
    "input_request without a prompt": {"type": "input_request", "n": 17, "password": False},
    "input_request with a 1 MB prompt": {
        "type": "input_request",
        "n": 18,
        "prompt": "p" * 1_000_000,
        "password": False,
    },
    "iopub of type status": {"type": "iopub", "msg_type": "status", "content": {"execution_state": "idle"}},
    "iopub display with a list for data": {"type": "iopub", "msg_type": "display_data", "content": {"data": []}},
    "iopub error with numbers": {
        "type": "iopub",
        "msg_type": "error",
        "content": {"ename": 1, "evalue": 2, "traceback": 3},
    },
    "unknown type": {"type": "reply", "content": {"status": "ok"}},
    "no type": {"n": 19},
}


@pytest.mark.parametrize("name", list(BOGUS))
def test_bogus_events_are_answered_and_the_kernel_answers_next(hostile, name):
    _, kc = hostile
    event = BOGUS[name]
    number = event.get("n")
    # The guest sends the bogus request and waits for its answer, as the glue would.
    wait = f"import sandbox_guest._host as h\nanswer = h._js.wait_reply({number})\nprint(answer)" if number else ""
    started = time.monotonic()
    run = execute(kc, emit(event) + wait, timeout=30)
    assert time.monotonic() - started < 10, f"{name}: the guest waited {time.monotonic() - started:.1f}s"
    assert run.content["status"] == "ok", dump(run)[:2000]
    if number:
        answer = json.loads(run.stream())
        assert answer["error"]["type"] == "SandboxProtocolError", answer
    assert "dropped an invalid message" in run.stream("stderr")
    assert_alive(kc, timeout=10)


def test_events_over_the_budget_are_dropped_unread(hostile):
    """An event bigger than what is left of the cell's output budget is dropped before it is parsed."""
    _, kc = hostile
    code = (
        "import _sandbox_host\n"
        "print('p' * (6 * 2**20))\n"
        "_sandbox_host.emit('{not json' + 'x' * (9 * 2**20))\n"  # parsed, it would be an invalid message
        "_sandbox_host.emit('{not json' + 'x' * (40 * 2**20))\n"  # over any event limit: the host drops it
        "import sys; print('after', file=sys.stderr)"
    )
    run = execute(kc, code, timeout=120)
    assert run.content["status"] == "ok", dump(run)[:2000]
    stderr = run.stream("stderr")
    assert "output truncated" in stderr and "dropped an invalid message" not in stderr
    assert_alive(kc, timeout=10)


def test_the_old_replay_wedge_is_gone():
    """Before: a bogus pip_installed made the replay after a restart wait for ever, and interrupts did not help."""
    km, kc = start_kernel()
    try:
        execute(kc, emit({"type": "pip_installed", "n": 5, "specs": [7, 8], "index_urls": None}))
        killed = execute(kc, "import js\njs.Deno.exit(3)", timeout=60)
        assert killed.content["ename"] == "SandboxRestarted"
        assert_alive(kc, timeout=60)
    finally:
        stop_kernel(km, kc)


# ---- budgets ---------------------------------------------------------------------------------------

BUDGET = 20_000
FLOODS = {
    "one huge error": "raise ValueError('e' * 2_000_000)",
    "many errors": emit(
        *[
            {
                "type": "iopub",
                "msg_type": "error",
                "content": {"ename": "E", "evalue": "v" * 5000, "traceback": ["t" * 5000]},
            }
        ]
        * 50
    ),
    "pager": "def f():\n    pass\nf.__doc__ = 'd' * 2_000_000\nf?",
    "clear_output": "from IPython.display import clear_output\nfor _ in range(20_000):\n    clear_output()",
    "user expressions": None,
}


@pytest.fixture(scope="module")
def budgeted():
    km, kc = start_kernel([f"--SandboxKernel.max_output_bytes={BUDGET}"])
    yield km, kc
    stop_kernel(km, kc)


@pytest.mark.parametrize("how", list(FLOODS))
def test_every_message_and_the_reply_count_against_max_output_bytes(budgeted, how):
    _, kc = budgeted
    if how == "user expressions":
        run = execute(kc, "big = 'u' * 2_000_000", user_expressions={"a": "big", "b": "big"})
    else:
        run = execute(kc, FLOODS[how], timeout=120)
    guest = [m["content"] for m in run.outputs if "sandbox_kernel" not in m["metadata"]]
    reply = run.content
    sent = sum(len(json.dumps(c)) for c in guest)
    sent += len(json.dumps(reply.get("payload", []))) + len(json.dumps(reply.get("user_expressions", {})))
    sent += len(json.dumps(reply.get("traceback", []))) + len(reply.get("evalue", ""))
    assert sent <= BUDGET + 2_000, f"{how}: {sent} bytes reached the frontend"
    notices = [m for m in run.outputs if m["metadata"].get("sandbox_kernel", {}).get("notice") == "truncated"]
    assert len(notices) == 1, dump(run)[:2000]
    assert_alive(kc)


def test_the_kernel_stays_small_under_hostile_events(hostile):
    km, kc = hostile
    kernel_pid = km.provisioner.process.pid
    execute(kc, "1")
    before = rss_mib(kernel_pid)
    code = (
        "import _sandbox_host, json\n"
        "html = '<b>' + 'h' * (9 * 2**20) + '</b>'\n"
        "for _ in range(10):\n"
        "    _sandbox_host.emit(json.dumps({'type': 'iopub', 'msg_type': 'display_data', 'content': {'data': {'text/html': html}}}))\n"
        "for _ in range(10):\n"
        '    _sandbox_host.emit(\'{"type": "iopub", "x": "\' + \'x\' * (30 * 2**20) + \'"}\')\n'
        "for _ in range(5):\n"
        "    _sandbox_host.emit(json.dumps({'type': 'nonsense', 'blob': 'b' * (8 * 2**20)}))\n"
    )
    for _ in range(3):
        execute(kc, code, timeout=240)
    grown = rss_mib(kernel_pid) - before
    assert grown < 150, f"the kernel grew by {grown:.0f} MiB"
    assert_alive(kc)


# ---- a reply, always ---------------------------------------------------------------------------------


def test_churn_in_a_rw_mount_never_loses_a_reply(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    km, kc = start_kernel(
        [
            f"--SandboxKernel.mounts=['{folder}:/out:rw']",
            '--SandboxKernel.mount_limits={"/out": {"suffixes": [".csv"]}}',
        ]
    )
    stop = threading.Event()

    def churn() -> None:  # another host process keeps changing the folder while the kernel scrubs it
        i = 0
        while not stop.is_set():
            sub = folder / f"d{i % 7}"
            try:
                sub.mkdir(exist_ok=True)
                for j in range(20):
                    (sub / f"f{j}.txt").write_text("x")
                for j in range(20):
                    (sub / f"f{j}.txt").unlink(missing_ok=True)
                sub.rmdir()
            except OSError:
                pass
            i += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        for i in range(15):
            run = execute(kc, f"open('/out/x{i}.csv', 'w').write('y')\n{i}", timeout=60)
            assert result(run) == str(i)
    finally:
        stop.set()
        thread.join(timeout=5)
        stop_kernel(km, kc)
