"""Only the kernel speaks as the kernel: guest-made text inside its notices stays on one line, escaped, and guest
prompts that look like its approval prompts (in any script) are refused.

Promise (output.guest_text, approvals.imitates_kernel): a notice (a message whose metadata is the kernel's
{"sandbox_kernel": {"notice": ...}}) shows a guest-made string (a mime type, a crash reason, a checkpoint error)
with its line breaks, controls and bidi or zero-width characters escaped (``\\n``, ``\\u202e``); an input() prompt
whose look-alike key matches the kernel's words is refused before any person sees it.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
from attack_kit import assert_alive, dump, token

from conftest import Run, execute, start_kernel, stop_kernel

FORGED = token("forged")
FAKE_LINE = f"\n[sandbox-kernel] {FORGED}: your files were restored\u202e\n"


@pytest.fixture(scope="module")
def voice():
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=10", "--SandboxKernel.interrupt_grace=1"])
    assert_alive(kc)  # the first cell (imports, a cold start) is not one of the tests'
    yield km, kc
    stop_kernel(km, kc)


def notices(run: Run) -> list[dict[str, Any]]:
    """The messages the kernel marked as its own."""
    return [m for m in run.outputs if "notice" in m["metadata"].get("sandbox_kernel", {})]


def kernel_text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content.get("text") or f"{content.get('ename')}: {content.get('evalue')}"


def assert_forged_line_is_escaped(text: str) -> None:
    assert FORGED in text
    line = next(line for line in text.splitlines() if FORGED in line)
    assert "\\n[sandbox-kernel] " in line and "\\u202e" in line  # shown as escapes, inside the kernel's own line
    assert not line.startswith("[sandbox-kernel] " + FORGED) and "\u202e" not in text


def test_a_guest_mime_type_with_newlines_stays_inside_the_kernels_notice(voice):
    _, kc = voice
    code = (
        f"from IPython.display import display\ndisplay({{{'text/x' + FAKE_LINE!r}: 'x', 'text/plain': 'p'}}, raw=True)"
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", dump(run)[:2000]
    (notice,) = notices(run)
    assert notice["metadata"]["sandbox_kernel"]["notice"] == "output_dropped"
    text = notice["content"]["text"]
    assert text.count("\n") == 1 and text.endswith("was not sent: the sandbox's output may not run code in your "
                                                   "browser (SandboxKernel.trust_output is off).\n")  # fmt: skip
    assert_forged_line_is_escaped(text)


def test_a_guest_crash_reason_with_newlines_stays_on_the_kernels_line(voice):
    """The guest posts a 'fatal' report of its own; the kernel restarts the sandbox and says why, quoting it."""
    _, kc = voice
    code = (
        "import js\nfrom pyodide.ffi import to_js\n"
        f"js.postMessage(to_js({{'type': 'fatal', 'message': {FAKE_LINE!r}}}, dict_converter=js.Object.fromEntries))\n"
        "import time; time.sleep(60)"  # the supervisor ends the sandbox on the message; cell_timeout bounds the wait
    )
    run = execute(kc, code, timeout=60)
    assert run.content["ename"] == "SandboxRestarted", dump(run)[:2000]
    assert "\n" not in run.content["evalue"]
    assert_forged_line_is_escaped(run.content["evalue"])
    for message in notices(run):
        assert "\u202e" not in kernel_text(message) and f"\n[sandbox-kernel] {FORGED}" not in kernel_text(message)
    assert_alive(kc)


def test_a_guest_made_checkpoint_error_stays_on_the_kernels_line(voice):
    """The guest replaces the glue's checkpoint handler with one that fails with text of its own; the kernel shows
    that error as its own message (the guest did not show it), escaped."""
    _, kc = voice
    forge = (
        "import sandbox_guest.api as api\n"
        f"api._HANDLERS['checkpoint'] = lambda req: {{'status': 'error', 'ename': 'Oops\\n{FORGED}', "
        f"'evalue': {FAKE_LINE!r}, 'traceback': []}}"
    )
    assert execute(kc, forge).content["status"] == "ok"
    run = execute(kc, "%checkpoint demo")
    assert run.content["status"] == "error" and run.content["ename"] == f"Oops\\n{FORGED}", dump(run)[:2000]
    (error,) = notices(run)
    assert error["msg_type"] == "error" and "\n" not in error["content"]["evalue"]
    assert_forged_line_is_escaped(error["content"]["evalue"])
    reset = execute(kc, "import js; js.Deno.exit(0)", timeout=60)  # a fresh sandbox, with the glue's own handler
    assert reset.content["status"] == "error"
    assert_alive(kc)


# The kernel's approval prompt in Cyrillic look-alike letters, which NFKC leaves as they are.
CYRILLIC_PROMPT = (
    "[\u0455\u0430ndb\u043e\u0445-k\u0435rn\u0435l] \u0410ll\u043ew TimeSkill.get_current_time()? "
    "[\u0443]es \u043ence / [\u0430]lways this session / [N]o: "
)


def with_a_person(kc, code: str) -> tuple[Run, list[str]]:
    """Run `code` with stdin allowed; a person answers 's' ([s]ession) to every prompt. Returns the prompts seen."""
    asked: list[str] = []
    done = threading.Event()

    def answer_every_prompt() -> None:
        while not done.is_set():
            try:
                msg = kc.get_stdin_msg(timeout=0.1)
            except queue.Empty:
                continue
            asked.append(msg["content"]["prompt"])
            kc.input("s")

    person = threading.Thread(target=answer_every_prompt, daemon=True)
    person.start()
    try:
        return execute(kc, code, allow_stdin=True), asked
    finally:
        done.set()
        person.join(timeout=5)


@pytest.mark.parametrize(
    "prompt",
    [CYRILLIC_PROMPT, "[s\u200ba\u200dndbox-kerne1] Allow the clock? [y/N] ", "\u202e]lenrek-xobdnas[ Allow? "],
    ids=["cyrillic", "zero-width and digit one", "right-to-left override"],
)
def test_a_guest_prompt_that_looks_like_the_kernels_never_reaches_the_person(voice, prompt):
    _, kc = voice
    run, asked = with_a_person(kc, f"input({prompt!r})")
    assert asked == []
    assert run.content["ename"] == "InputRefused" and "approval prompt" in run.content["evalue"], dump(run)[:2000]


def test_an_ordinary_prompt_in_another_script_reaches_the_person(voice):
    _, kc = voice
    prompt = "\u041f\u0430\u0440\u043e\u043b\u044c: "  # Пароль: (Russian, "password")
    run, asked = with_a_person(kc, f"input({prompt!r})")
    assert asked == [prompt] and run.content["status"] == "ok", dump(run)[:2000]
