"""Device skills through a real kernel: calls, every refusal, approval, limits, audit, secrets."""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest

from conftest import execute, once_running, start_kernel, stop_kernel, value

FIXTURES = Path(__file__).parent / "skill_fixtures"
SECRET = "test-secret-value-7f3a"


@pytest.fixture(scope="module")
def audit_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("audit") / "calls.jsonl"


@pytest.fixture(scope="module")
def skills_kernel(audit_file):
    args = [
        '--SandboxKernel.skills=["TimeSkill", "KeyValueSkill", "SignerSkill"]',
        f"--SandboxKernel.skills_path={FIXTURES}",
        f"--SandboxKernel.audit_log={audit_file}",
        "--SandboxKernel.skill_timeout=1.5",
        "--SandboxKernel.skill_max_bytes=20000",
        '--SandboxKernel.skill_policy={"GuardedSkill": "ask", "GuardedSkill.other": "deny"}',
    ]
    km, kc = start_kernel(args, env={"SANDBOX_DEMO_API_KEY": SECRET})
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture
def kc(skills_kernel):
    return skills_kernel[1]


def raw_call(skill: str, method: str) -> str:
    """Guest code that bypasses the proxy and sends a crafted request to the gatekeeper."""
    return (
        "from sandbox_guest import _host\n"
        f"_host.request({{'type': 'skill_call', 'skill': {skill!r}, 'method': {method!r}, 'args': [], 'kwargs': {{}}}})"
    )


# ---- calls --------------------------------------------------------------------------------


def test_device_is_there_from_the_first_cell(kc):
    assert (
        value(execute(kc, "sorted(dir(device))[:4]"))
        == "['GuardedSkill', 'KeyValueSkill', 'ProbeSkill', 'SignerSkill']"
    )


def test_positional_and_keyword_arguments(kc):
    run = execute(kc, "device.ProbeSkill.echo(1, 'two', [3.5, None], flag=True, nested={'k': [1]})")
    expected = {"args": [1, "two", [3.5, None]], "kwargs": {"flag": True, "nested": {"k": [1]}}}
    assert ast.literal_eval(value(run)) == expected


def test_async_skill_and_bytes(kc):
    assert value(execute(kc, "device.ProbeSkill.echo_async(b'\\x00\\xffbytes')")) == "b'\\x00\\xffbytes'"


def test_shipped_example_skills(kc):
    assert value(execute(kc, "device.TimeSkill.add_days('2024-02-28', days=2)")) == "'2024-03-01'"
    execute(kc, "device.KeyValueSkill.set('answer', {'n': 42})")
    assert value(execute(kc, "device.KeyValueSkill.get('answer')")) == "{'n': 42}"
    assert value(execute(kc, "device.KeyValueSkill.keys()")) == "['answer']"


def test_search_and_describe(kc):
    found = value(execute(kc, "[s['name'] for s in device.search_skills('clock')]"))
    assert "TimeSkill.get_current_time" in found
    described = value(execute(kc, "device.describe_function('TimeSkill.add_days')"))
    assert "(date: 'str', days: 'int' = 1)" in described and "ISO date" in described


def test_tab_completion_lists_skills_and_methods(kc):
    code = "device.Ti"
    reply = kc.complete(code, len(code), reply=True, timeout=60)["content"]
    assert any(m.endswith("TimeSkill") for m in reply["matches"])
    code = "device.TimeSkill.get_"
    reply = kc.complete(code, len(code), reply=True, timeout=60)["content"]
    assert any(m.endswith("get_current_time") for m in reply["matches"])


def test_device_survives_reset(kc):
    execute(kc, "%reset -f")
    assert value(execute(kc, "device.ProbeSkill.echo(1)")) == "{'args': [1], 'kwargs': {}}"


# ---- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("device.NoSuchSkill", "Available skills: GuardedSkill, KeyValueSkill, ProbeSkill"),
        ("device.ProbeSkill.nope", "Its methods are: big, echo, echo_async"),
        ("device.ProbeSkill._private", "Its methods are:"),
        ("device.ProbeSkill.__wrapped__", "Its methods are:"),
    ],
)
def test_proxy_refusals_name_what_is_available(kc, code, says):
    run = execute(kc, code)
    assert run.content["ename"] == "AttributeError"
    assert says in run.content["evalue"]


@pytest.mark.parametrize(
    ("skill", "method", "says"),
    [
        ("NoSuchSkill", "x", "Available skills: GuardedSkill"),
        ("ProbeSkill", "_private", "no leading underscore"),
        ("ProbeSkill", "__init__", "no leading underscore"),
        ("ProbeSkill", "echo.__globals__", "no attribute chains"),
        ("__class__", "__subclasses__", "exactly Skill.method"),
        ("ProbeSkill", "nope", "Its methods are: big, echo"),
    ],
)
def test_gatekeeper_refuses_crafted_requests(kc, skill, method, says):
    code = raw_call(skill, method).replace("_host.request(", "answer = _host.request(") + "\nanswer"
    answer = value(execute(kc, code))
    assert "'type': 'SkillRefused'" in answer
    assert says in answer
    assert "must never be reachable" not in answer


def test_denied_by_policy(kc):
    run = execute(kc, "device.GuardedSkill.other()")
    assert run.content["ename"] == "SkillRefused"
    assert "denied by SandboxKernel.skill_policy" in run.content["evalue"]


def test_ask_without_stdin_is_refused_with_how_to_preapprove(kc):
    run = execute(kc, "device.GuardedSkill.touch()", allow_stdin=False)
    assert run.content["ename"] == "SkillRefused"
    assert "cannot answer input requests" in run.content["evalue"]
    assert "{'GuardedSkill.touch': 'allow'}" in run.content["evalue"]


def answer_prompt(kc, code: str, answer: str) -> tuple[dict, dict]:
    kc.execute(code, allow_stdin=True)
    request = kc.get_stdin_msg(timeout=30)
    kc.input(answer)
    reply = kc.get_shell_msg(timeout=30)
    return request["content"], reply["content"]


def test_ask_yes_once_then_asks_again(kc):
    prompt, reply = answer_prompt(kc, "device.GuardedSkill.touch()", "y")
    assert (
        prompt["prompt"]
        == "[sandbox-kernel] Allow GuardedSkill.touch()? [y]es once / [s]ession / [d]ay: 24 h / [a]lways / [N]o: "
    )
    assert reply["status"] == "ok"
    prompt, reply = answer_prompt(kc, "device.GuardedSkill.touch()", "n")
    assert reply["status"] == "error" and reply["ename"] == "SkillRefused"
    assert reply["evalue"] == (
        "GuardedSkill.touch was not approved (policy 'ask'): the answer to the approval prompt was no"
    )


def test_a_refusal_tells_the_code_the_reason_given(kc):
    _, reply = answer_prompt(kc, "device.GuardedSkill.touch()", "n: not on a Friday")
    assert (reply["ename"], reply["evalue"]) == (
        "SkillRefused",
        "GuardedSkill.touch was not approved (policy 'ask'): not on a Friday",
    )


def test_ask_session_remembers_for_the_session(kc):
    _, reply = answer_prompt(kc, "device.GuardedSkill.touch()", "s")
    assert reply["status"] == "ok"
    run = execute(kc, "device.GuardedSkill.touch()", allow_stdin=False)  # no prompt needed now
    assert value(run) == "'touched'"


def test_preapproved_by_config_runs_without_stdin():
    policy = '{"GuardedSkill": "ask", "GuardedSkill.touch": "allow"}'
    km, kc = start_kernel([f"--SandboxKernel.skills_path={FIXTURES}", f"--SandboxKernel.skill_policy={policy}"])
    try:
        assert value(execute(kc, "device.GuardedSkill.touch()", allow_stdin=False)) == "'touched'"
        assert execute(kc, "device.GuardedSkill.other()", allow_stdin=False).content["ename"] == "SkillRefused"
    finally:
        stop_kernel(km, kc)


def test_approver_callable_decides_instead_of_a_person():
    km, kc = start_kernel(
        [
            f"--SandboxKernel.skills_path={FIXTURES}",
            '--SandboxKernel.skill_policy={"GuardedSkill": "ask"}',
            "--SandboxKernel.skill_approver=approvers.approve",
        ],
        env={"PYTHONPATH": str(FIXTURES)},
    )
    try:
        assert value(execute(kc, "device.GuardedSkill.touch()", allow_stdin=False)) == "'touched'"
        run = execute(kc, "device.GuardedSkill.other()", allow_stdin=False)
        assert run.content["ename"] == "SkillRefused" and "not approved" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)


# ---- data and limits ----------------------------------------------------------------------


def test_non_json_argument_is_refused_naming_the_type(kc):
    run = execute(kc, "device.ProbeSkill.echo({1, 2})")
    assert run.content["ename"] == "SkillDataError"
    assert "a set cannot cross the bridge" in run.content["evalue"]


def test_non_json_result_is_refused_naming_the_type(kc):
    run = execute(kc, "device.ProbeSkill.not_data()")
    assert run.content["ename"] == "SkillDataError"
    assert "a object cannot cross the bridge" in run.content["evalue"]


def test_oversize_arguments_and_results(kc):
    run = execute(kc, "device.ProbeSkill.echo('y' * 30000)")
    assert run.content["ename"] == "SkillDataError"
    assert "over the bridge limit of 20000 bytes" in run.content["evalue"]
    assert "skill_max_bytes" in run.content["evalue"]
    run = execute(kc, "device.ProbeSkill.big(30000)")
    assert run.content["ename"] == "SkillDataError"
    assert "result of ProbeSkill.big" in run.content["evalue"] and "20000" in run.content["evalue"]
    assert value(execute(kc, "len(device.ProbeSkill.big(1000))")) == "1000"


def test_skill_exception_reaches_the_guest_without_host_details(kc):
    run = execute(
        kc, "try:\n    device.ProbeSkill.fail_with_path()\nexcept device.SkillError as e:\n    err = e\nraise err"
    )
    assert run.content["ename"] == "SkillError"
    evalue = run.content["evalue"]
    assert "FileNotFoundError" in evalue and "<host path>" in evalue
    assert "/root/host-only" not in json.dumps(run.outputs, default=str)
    assert "probe_skills.py" not in json.dumps(run.outputs, default=str) and "skill_calls" not in json.dumps(
        run.outputs, default=str
    )
    assert value(execute(kc, "err.exception_type")) == "'FileNotFoundError'"


def test_slow_skill_times_out(kc):
    run = execute(kc, "device.ProbeSkill.slow(5)", timeout=60)
    assert run.content["ename"] == "SkillTimeout"
    assert "longer than 1.5s" in run.content["evalue"] and "skill_timeout" in run.content["evalue"]


def test_interrupt_during_a_slow_skill(skills_kernel, audit_file):
    km, kc = skills_kernel
    execute(kc, "kept = 'yes'")
    before = len(audit_file.read_text().splitlines()) if audit_file.exists() else 0
    interrupt = once_running(km.interrupt_kernel)  # the cell calls the skill right after it says so
    started = time.monotonic()
    run = execute(kc, "print('calling', flush=True)\ndevice.ProbeSkill.slow(1.2)", timeout=60, on_output=interrupt)
    assert run.content["ename"] == "KeyboardInterrupt"
    assert time.monotonic() - started < 1.2  # the cell did not wait for the skill to end
    calls = skill_calls(audit_file.read_text().splitlines()[before:])
    assert [(c["call"], c["outcome"]) for c in calls] == [("ProbeSkill.slow", "interrupted")], calls
    assert value(execute(kc, "kept")) == "'yes'"


# ---- secrets and audit ----------------------------------------------------------------------


def test_secret_env_var_is_used_on_the_host_but_never_seen_by_the_guest(kc):
    expected = hmac.new(SECRET.encode(), b"hello", hashlib.sha256).hexdigest()
    assert value(execute(kc, "device.SignerSkill.sign('hello')")) == repr(expected)
    probes = [
        "import os; str(dict(os.environ))",
        "import js\ntry:\n    r = str(js.Deno.env.toObject())\nexcept Exception as e:\n    r = repr(e)\nr",
        "try:\n    r = open('/proc/self/environ').read()\nexcept Exception as e:\n    r = repr(e)\nr",
        "import js\ntry:\n    r = js.Deno.readTextFileSync('/proc/self/environ')\nexcept Exception as e:\n    r = repr(e)\nr",
    ]
    for code in probes:
        run = execute(kc, code)
        assert SECRET not in json.dumps(run.reply, default=str) + json.dumps(run.outputs, default=str), code


def skill_calls(lines: list[str]) -> list[dict]:
    """The audit log's skill-call entries (it has one line per cell too)."""
    return [e for e in map(json.loads, lines) if e["kind"] == "skill_call"]


def test_audit_log_records_every_call(kc, audit_file):
    before = len(audit_file.read_text().splitlines())
    execute(kc, "device.ProbeSkill.echo('audited', n=1)")
    execute(kc, "device.GuardedSkill.other()")
    execute(kc, "device.ProbeSkill.not_data()")
    entries = [json.loads(line) for line in audit_file.read_text().splitlines()[before:]]
    lines = skill_calls(audit_file.read_text().splitlines()[before:])
    assert [e["call"] for e in lines] == ["ProbeSkill.echo", "GuardedSkill.other", "ProbeSkill.not_data"]
    cells = [e for e in entries if e["kind"] == "cell"]  # and one line per cell, after its calls
    assert [e["kind"] for e in entries] == ["skill_call", "cell"] * 3
    assert all(c["skill_calls"] == 1 and c["wall_s"] > 0 for c in cells), cells
    ok, denied, bad = lines
    assert ok["decision"] == "allow" and ok["outcome"] == "ok"
    assert denied["outcome"] == "refused"
    assert bad["outcome"] == "bad data"
    for entry in lines:
        assert set(entry) >= {"time", "execution_count", "call", "args_digest", "decision", "duration_s", "outcome"}
        assert entry["args_digest"].startswith("sha256:") and "audited" not in json.dumps(entry)
        assert isinstance(entry["execution_count"], int) and entry["duration_s"] >= 0


def test_every_refused_call_is_in_the_audit_log_even_in_a_flood(kc, audit_file):
    """The guest fires 40 skill calls at once through the glue's own JS channel; the kernel serves 4 at a time and
    refuses the rest. Before: the refused ones left no audit line (an attack the log did not show)."""
    before = len(audit_file.read_text().splitlines())
    calls = [
        {"type": "skill_call", "n": 7000 + i, "skill": "ProbeSkill", "method": "slow", "args": [1.0], "kwargs": {}}
        for i in range(40)
    ]
    code = f"import _sandbox_host, json\nfor call in {calls!r}:\n    _sandbox_host.emit(json.dumps(call))\n'fired'"
    assert value(execute(kc, code)) == "'fired'"
    assert value(execute(kc, "1")) == "1"  # the calls still open when the cell ended are recorded by now
    entries = [json.loads(line) for line in audit_file.read_text().splitlines()[before:]]
    served = [e for e in entries if e["kind"] == "skill_call" and e["call"] == "ProbeSkill.slow"]
    refused = [e for e in entries if e["kind"] == "skill_calls_refused"]
    assert len(refused) == 1, refused  # one line for the flood, not one per call
    (line,) = refused
    assert line["reason"] == "more than 4 requests at once from the sandbox"
    assert line["calls"] == {"ProbeSkill.slow": line["count"]} and line["count"] >= 36
    assert len(served) + line["count"] == 40, (served, line)
    fired_in = next(e["execution_count"] for e in entries if e["kind"] == "cell")
    assert line["execution_count"] == fired_in and {e["execution_count"] for e in served} == {fired_in}


def test_device_comes_back_after_a_sandbox_restart(skills_kernel):
    _, kc = skills_kernel
    run = execute(kc, "import js; js.Deno.exit(0)", timeout=60)
    assert run.content["ename"] == "SandboxRestarted"
    assert value(execute(kc, "device.ProbeSkill.echo(2)", timeout=120)) == "{'args': [2], 'kwargs': {}}"


def failed_start(tmp_path: Path, *arguments: str) -> str:
    """What every cell answers when the kernel cannot use these settings (it starts no sandbox)."""
    km, kc = start_kernel(list(arguments))
    try:
        run = execute(kc, "1+1", timeout=30)
        assert run.content["ename"] == "SandboxSettingsError", run.content
        return run.content["evalue"]
    finally:
        stop_kernel(km, kc)


def test_bad_skills_path_fails_the_start(tmp_path):
    stderr = failed_start(tmp_path, "--SandboxKernel.skills_path=/nonexistent")
    assert "skills_path '/nonexistent' is not a directory" in stderr


def test_a_skill_named_like_a_shipped_one_is_refused_at_start(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "clock.py").write_text("class TimeSkill:\n    def get_current_time(self):\n        return 'forged'\n")
    stderr = failed_start(tmp_path, '--SandboxKernel.skills=["TimeSkill"]', f"--SandboxKernel.skills_path={folder}")
    assert "two skills are named 'TimeSkill'" in stderr and "clock.py" in stderr


def test_no_skill_is_exposed_unless_configured():
    """Least privilege: the shipped examples (a store, a signing oracle) are not there by default."""
    km, kc = start_kernel()
    try:
        assert value(execute(kc, "dir(device)")) == "['describe_function', 'search_skills']"
        run = execute(kc, "device.SignerSkill.sign('pay me')")
        assert run.content["ename"] == "AttributeError"
        assert "SandboxKernel.skills = ['TimeSkill']" in run.content["evalue"]
        raw = "import sandbox_guest._host as h\nh.request({'type': 'skill_call', 'skill': 'SignerSkill', 'method': 'sign', 'args': ['x'], 'kwargs': {}})"
        answer = value(execute(kc, raw))  # what the host answers a crafted request
        assert "SkillRefused" in answer and "there is no skill 'SignerSkill'" in answer
    finally:
        stop_kernel(km, kc)
