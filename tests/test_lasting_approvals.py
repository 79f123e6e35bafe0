"""Lasting approvals through a real kernel: a person's [d]ay holds in another kernel for 24 hours and not after, an
[a]lways survives a restart, a change of the skill's code asks again and says so, a store edited outside the kernel
is refused (the person is told, and asked), and the audit log names the grant that let each call through.

The clock is the grant's own: the test writes grants as if given a day ago through skills/grants.py (no sleeps)."""

from __future__ import annotations

import json
import queue
import shutil
import threading
import time
from pathlib import Path

import pytest

from conftest import Run, execute, start_kernel, stop_kernel, value
from sandbox_kernel.skills.grants import GrantStore

FIXTURES = Path(__file__).parent / "skill_fixtures"
TARGET = "GuardedSkill.touch"
CALL = "device.GuardedSkill.touch()"
DAY = 24 * 3600.0
NEEDS_A_PERSON = "needs approval (policy 'ask'), but this frontend cannot answer input requests"


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A skills folder of its own (the test edits it), an approvals folder and an audit log."""
    shutil.copytree(FIXTURES, tmp_path / "skills", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def arguments(place: Path) -> list[str]:
    return [
        f"--SandboxKernel.skills_path={place / 'skills'}",
        '--SandboxKernel.skill_policy={"GuardedSkill": "ask"}',
        f"--SandboxKernel.approvals_folder={place / 'approvals'}",
        f"--SandboxKernel.audit_log={place / 'audit.jsonl'}",
    ]


def with_answer(kc, code: str, answer: str) -> tuple[Run, list[str]]:
    """Run `code` with stdin allowed, a person answering `answer` to every prompt; the run and the prompts seen."""
    asked: list[str] = []
    done = threading.Event()

    def person() -> None:
        while not done.is_set():
            try:
                msg = kc.get_stdin_msg(timeout=0.1)
            except queue.Empty:
                continue
            asked.append(msg["content"]["prompt"])
            kc.input(answer)

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    try:
        return execute(kc, code, allow_stdin=True), asked
    finally:
        done.set()
        thread.join(timeout=5)


def decisions(place: Path) -> list[str]:
    lines = (place / "audit.jsonl").read_text().splitlines()
    return [entry["decision"] for entry in map(json.loads, lines) if entry.get("kind") == "skill_call"]


def the_store(place: Path) -> GrantStore:
    (store,) = GrantStore.every(place / "approvals")
    return store


def test_a_day_holds_in_another_kernel_until_24_hours_have_passed(place):
    km, kc = start_kernel(arguments(place))
    try:
        run, asked = with_answer(kc, CALL, "d")
        assert value(run) == "'touched'" and len(asked) == 1 and "[d]ay: 24 h" in asked[0]
    finally:
        stop_kernel(km, kc)
    (grant,) = the_store(place).grants()
    assert grant.target == TARGET and grant.scope == "hours" and grant.expires_at - grant.granted_at == DAY
    assert decisions(place) == [f"ask: hours grant {grant.id}"]
    km, kc = start_kernel(arguments(place))
    try:
        assert value(execute(kc, CALL, allow_stdin=False)) == "'touched'"  # another kernel: nobody is asked
        store = the_store(place)
        store.revoke(None)
        almost = store.grant(TARGET, "hours", grant.code_sha256, grant.prompt, time.time() - DAY + 120, hours=24)
        assert value(execute(kc, CALL, allow_stdin=False)) == "'touched'"  # given 23 h 58 min ago
        store.grant(TARGET, "hours", grant.code_sha256, grant.prompt, time.time() - DAY - 1, hours=24)
        late = execute(kc, CALL, allow_stdin=False)  # given 24 h and a second ago: over
        assert late.content["ename"] == "SkillRefused" and NEEDS_A_PERSON in late.content["evalue"]
        assert decisions(place)[-3:] == [f"ask: hours grant {grant.id}", f"ask: hours grant {almost.id}", "refused"]
    finally:
        stop_kernel(km, kc)


def test_always_survives_a_restart_and_new_code_asks_again_saying_so(place):
    km, kc = start_kernel(arguments(place))
    try:
        run, _ = with_answer(kc, CALL, "a")
        assert value(run) == "'touched'"
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=120)
        assert value(execute(kc, CALL, allow_stdin=False)) == "'touched'"
        skill_file = place / "skills" / "probe_skills.py"
        skill_file.write_text(skill_file.read_text() + "\n# changed\n")
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=120)
        refused, asked = with_answer(kc, CALL, "n")
        assert refused.content["ename"] == "SkillRefused"
        assert asked == [f"[sandbox-kernel] The code of {TARGET} changed since you approved it. Allow {TARGET}()? "
                         "[y]es once / [s]ession / [d]ay: 24 h / [a]lways / [N]o: "]  # fmt: skip
    finally:
        stop_kernel(km, kc)


def test_a_store_edited_outside_the_kernel_is_refused_and_the_person_asked(place):
    km, kc = start_kernel(arguments(place))
    try:
        run, _ = with_answer(kc, CALL, "a")
        assert value(run) == "'touched'"
        km.restart_kernel(now=False)  # a new kernel: its session holds no approval
        kc.wait_for_ready(timeout=120)
        store = the_store(place)
        stored = json.loads(store.path.read_text())
        stored["grants"].append({**stored["grants"][0], "id": "f0f0f0f0f0f0", "target": "GuardedSkill.other"})
        store.path.write_text(json.dumps(stored))
        run, asked = with_answer(kc, CALL, "y")
        assert value(run) == "'touched'" and len(asked) == 1  # asked again: no grant of that file counts
        assert "does not match its seal (HMAC-SHA256" in run.stream("stdout") + run.stream("stderr"), run.outputs
    finally:
        stop_kernel(km, kc)


def test_the_guest_can_neither_read_nor_write_the_store(place):
    """A mount that would show the guest the approvals folder, even read-only, stops the settings, saying why."""
    (place / "approvals").mkdir()
    km, kc = start_kernel([*arguments(place), f'--SandboxKernel.mounts=["{place / "approvals"}:/data:ro"]'])
    try:
        run = execute(kc, "open('/data/approvals.key', 'rb').read()", allow_stdin=False)
        assert run.content["ename"] == "SandboxSettingsError", run.content
        assert "the lasting approvals" in run.content["evalue"], run.content["evalue"]
    finally:
        stop_kernel(km, kc)
