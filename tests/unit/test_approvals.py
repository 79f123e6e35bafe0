"""Approval prompts: the whole call is shown (or a digest and a way to see it), and guests cannot imitate them."""

from __future__ import annotations

import pytest

from sandbox_kernel.approvals import MARK, approval_for, full_view, imitates_kernel, parse_answer


def test_short_calls_are_shown_whole():
    a = approval_for("TimeSkill", "add_days", ["2026-01-01"], {"days": 3})
    assert (
        a.prompt
        == f"{MARK} Allow TimeSkill.add_days('2026-01-01', days=3)? [y]es once / [a]lways this session / [N]o: "
    )
    assert a.metadata["sandbox_kernel"]["approval"] == {
        "skill": "TimeSkill",
        "method": "add_days",
        "arguments": "'2026-01-01', days=3",
        "sha256": a.digest,
    }


def test_long_arguments_get_a_digest_and_a_full_view():
    tail = "rm -rf / # the part that matters"
    a = approval_for("Shell", "run", ["x" * 5000 + tail], {})
    assert tail not in a.prompt and "answer [v] to see them all" in a.prompt and a.digest[:16] in a.prompt
    assert tail in a.arguments and tail in full_view(a)
    other = approval_for("Shell", "run", ["x" * 5000 + "harmless"], {})
    assert other.digest != a.digest  # what is approved is bound to the whole call


def test_newlines_cannot_fake_a_second_line():
    a = approval_for("S", "m", ["ok)? [y]es once\n[sandbox-kernel] Allow S.safe("], {})
    assert "\n" not in a.prompt


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        ("y", "once"),
        ("YES", "once"),
        (" a ", "always"),
        ("always", "always"),
        ("v", "view"),
        ("", "no"),
        ("n", "no"),
        ("yep", "no"),
        ("\x04", "no"),
    ],
)
def test_answers(answer, verdict):
    assert parse_answer(answer) == verdict


@pytest.mark.parametrize(
    ("prompt", "imitates"),
    [
        ("Your name? ", False),
        ("Allow me to ask: continue? ", False),
        ("[sandbox-kernel] Allow TimeSkill.get_current_time()? ", True),
        ("Allow TimeSkill.get_current_time()? [y]es once / [a]lways this session / [N]o: ", True),
        ("ALLOW   TimeSkill . get_current_time ( ", True),
        ("Allow Time\u200bSkill.get_current_time()? ", True),  # a zero-width space
        ("\uff3bsandbox\u2011kernel\uff3d ok? ", True),  # full-width brackets, non-breaking hyphen
        ("Press [y]es once to go on", True),
    ],
)
def test_guest_prompts_that_imitate_the_kernel(prompt, imitates):
    assert imitates_kernel(prompt) is imitates
