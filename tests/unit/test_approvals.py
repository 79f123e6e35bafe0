"""Approval prompts: the whole call is shown (or a digest and a way to see it), and guests cannot imitate them."""

from __future__ import annotations

import json

import pytest

from sandbox_kernel.client.approvals import MalformedApproval, approval_of
from sandbox_kernel.skills.approvals import (
    MARK,
    REASON_CHARS,
    approval_for,
    full_view,
    imitates_kernel,
    parse_answer,
    refusal,
    refusal_reason,
)
from sandbox_kernel.skills.lookalikes import ascii_prototypes, key


def test_short_calls_are_shown_whole():
    a = approval_for("TimeSkill", "add_days", ["2026-01-01"], {"days": 3})
    assert (
        a.prompt
        == f"{MARK} Allow TimeSkill.add_days('2026-01-01', days=3)? [y]es once / [s]ession / [d]ay: 24 h / [a]lways / [N]o: "
    )
    assert a.metadata["sandbox_kernel"]["approval"] == {
        "skill": "TimeSkill",
        "method": "add_days",
        "arguments": "'2026-01-01', days=3",
        "sha256": a.digest,
        "call": '{"args": ["2026-01-01"], "kwargs": {"days": 3}}',
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


def test_keyword_names_the_guest_made_up_are_shown_as_python_would_pass_them():
    forged = "x=1)? [y]es once\n[sandbox-kernel] Allow S.safe(y"
    a = approval_for("S", "m", [], {"days": 3, forged: 2, "\u202eevil": 0})
    assert "\n" not in a.prompt and "\u202e" not in a.prompt
    assert a.arguments == "days=3, **{'x=1)? [y]es once\\n[sandbox-kernel] Allow S.safe(y': 2, '\\u202eevil': 0}"


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        ("y", "once"),
        ("YES", "once"),
        (" a ", "always"),
        ("always", "always"),
        ("s", "session"),
        ("Session", "session"),
        ("d", "day"),
        ("day", "day"),
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
    ("answer", "reason"),
    [
        ("n: too costly", "too costly"),
        ("No:  spans\nlines ", "spans lines"),  # one line, as it is shown in the code's SkillRefused
        ("n:", None),
        ("n", None),
        ("no", None),
        ("y: fine", None),
        ("nope: x", None),
        ("n: " + "x" * 600, "x" * REASON_CHARS + " …"),
    ],
)
def test_a_refusal_may_say_why(answer, reason):
    assert refusal_reason(answer) == reason
    assert parse_answer(answer) == "no"  # with a reason or without, a refusal ("y: fine" approves nothing)
    if reason is not None and "x" not in reason:
        assert refusal_reason(refusal(reason)) == reason  # what an agent's Refused(reason) sends


# The kernel's own prompt, written the way a guest would disguise it: each passes a check on NFKC alone.
CYRILLIC_PROMPT = (
    "[\u0455\u0430ndb\u043e\u0445-k\u0435rn\u0435l] \u0410ll\u043ew TimeSkill.get_current_time()? "
    "[\u0443]es \u043ence / [\u0430]lways this session / [N]o: "
)  # reads as the kernel's own prompt
ATTACKS = {
    "Cyrillic look-alikes": CYRILLIC_PROMPT,
    "Cyrillic mark alone": "[\u0455\u0430ndb\u043e\u0445-kern\u0435l] ok? ",
    "Greek omicron and Cherokee": "[sandb\u03bfx-\u13e6ernel] ok? ",  # omicron, Cherokee tso
    "digit one for l": "[sandbox-kerne1] ok? ",
    "capital I for l, digit zero for O": "[SANDB0X-KERNEI] ok? ",
    "m for rn": "[sandbox-kemel] ok? ",
    "small capital s": "[\ua731andbox-kernel] ok? ",  # LATIN LETTER SMALL CAPITAL S
    "fullwidth": "\uff3b\uff53\uff41\uff4e\uff44\uff42\uff4f\uff58\uff0d\uff4b\uff45\uff52\uff4e\uff45\uff4c\uff3d",
    "mathematical bold": "\U0001d42c\U0001d41a\U0001d427\U0001d41d\U0001d41b\U0001d428\U0001d431-kernel",
    "zero-width space, joiner, word joiner": "[s\u200band\u200dbox\u2060-kernel] ok? ",
    "grapheme joiner and variation selector": "[sand\u034fbox-kern\ufe0fel] ok? ",
    "Hangul filler": "[sand\u3164box-kernel] ok? ",
    "tag characters": "[sand\U000e0020box-kern\U000e0041el] ok? ",
    "soft hyphen and Mongolian vowel separator": "[sand\u00adbox-ker\u180enel] ok? ",
    "right-to-left override": "\u202e]lenrek-xobdnas[ ok? ",
    "ideographic space in the menu": "Go on? [y]es\u3000once / [N]o: ",
    "Cyrillic menu": "[\u0443]es \u043ence / [\u0430]lways: ",
    "Allow Skill.method( in Cyrillic": "\u0410ll\u043ew TimeSkill.get_current_time()? ",
    "old: zero-width inside the skill name": "Allow Time\u200bSkill.get_current_time()? ",
    "old: fullwidth brackets, non-breaking hyphen": "\uff3bsandbox\u2011kernel\uff3d ok? ",
    "old: the kernel's prompt itself": "[sandbox-kernel] Allow TimeSkill.get_current_time()? ",
    "old: the menu": "Allow TimeSkill.get_current_time()? [y]es once / [a]lways this session / [N]o: ",
    "old: spaced out": "ALLOW   TimeSkill . get_current_time ( ",
    "old: the menu's words": "Press [y]es once to go on",
    # Decided: the kernel's name is refused however it is written; a guest prompt has no need for it.
    "the kernel's name": "sandbox kernel?",
}
ORDINARY = [
    "Name: ",
    "Password: ",
    "Your name? ",
    "\u041f\u0430\u0440\u043e\u043b\u044c: ",  # Пароль:
    "\u0412\u0432\u0435\u0434\u0438\u0442\u0435 \u0438\u043c\u044f: ",  # Введите имя:
    "\u039a\u03c9\u03b4\u03b9\u03ba\u03cc\u03c2: ",  # Κωδικός:
    "\u0643\u0644\u0645\u0629 \u0627\u0644\u0645\u0631\u0648\u0631: ",  # Arabic "password"
    "\u30d1\u30b9\u30ef\u30fc\u30c9: ",  # パスワード:
    "[y/n] ",
    "Continue? [Y/n] ",
    "Allow cookies? ",
    "Allow me to ask: continue? ",
    "Say yes once more: ",
    "Choose [a]pple or [b]anana: ",
    "Enter a number (1-10): ",
    "Sandbox name: ",
    "Kernel size in px: ",
    "Caf\u00e9 au lait? ",
]


@pytest.mark.parametrize("prompt", ATTACKS.values(), ids=ATTACKS.keys())
def test_guest_prompts_that_look_like_the_kernels_are_refused(prompt):
    assert imitates_kernel(prompt)


@pytest.mark.parametrize("prompt", ORDINARY)
def test_ordinary_prompts_in_any_script_pass(prompt):
    assert not imitates_kernel(prompt)


def test_the_look_alike_key_folds_confusables_and_keeps_other_letters():
    plain = "[sandbox-kernel] Allow TimeSkill.get_current_time()? [y]es once / [a]lways this session / [N]o: "
    assert CYRILLIC_PROMPT != plain and key(CYRILLIC_PROMPT) == key(plain)
    assert key("\u041f\u0430\u0440\u043e\u043b\u044c") == "\u043fapo\u043b\u044c"  # п, л, ь have no Latin twin
    assert len(ascii_prototypes()) > 1000  # the UTS #39 table is there (the library ships it)


def _input_request(metadata: dict) -> dict:
    """An input_request as the agent's client receives it (the metadata through the message's JSON)."""
    return {
        "content": {"prompt": "[sandbox-kernel] Allow ...", "password": False},
        "metadata": json.loads(json.dumps(metadata)),
    }


def test_an_approver_gets_the_arguments_as_data_exactly_as_the_method_would():
    args = [b"\x00\xffraw", {"nested": [1, 2.5, None, True]}, "lone \ud800 surrogate", "\u202eevil"]
    kwargs = {"days": 3, "x=1)? [y]es once\n": "forged", "blob": b"bytes"}
    asked = approval_of(_input_request(approval_for("Store", "put", args, kwargs).metadata))
    assert asked is not None
    assert (asked.skill, asked.method, asked.args, asked.kwargs) == ("Store", "put", args, kwargs)
    assert type(asked.args[0]) is bytes and list(asked.kwargs) == ["days", "x=1)? [y]es once\n", "blob"]
    assert asked.shown == approval_for("Store", "put", args, kwargs).arguments  # the display string too
    assert (
        asked.call == f"Store.put({asked.shown})" and asked.sha256 == approval_for("Store", "put", args, kwargs).digest
    )


def test_an_approval_whose_display_data_or_digest_disagree_is_refused():
    metadata = approval_for("Shell", "run", ["ls"], {}).metadata
    approval = metadata["sandbox_kernel"]["approval"]
    for part, value in [
        ("call", json.dumps({"args": ["rm -rf /"], "kwargs": {}})),  # the data is not what the person saw
        ("arguments", "'harmless'"),
        ("sha256", "0" * 64),
        ("call", "not json"),
        ("call", json.dumps({"args": {}, "kwargs": {}})),
    ]:
        changed = {"sandbox_kernel": {"approval": {**approval, part: value}}}
        with pytest.raises(MalformedApproval):
            approval_of(_input_request(changed))
    del approval["call"]
    with pytest.raises(MalformedApproval, match="no readable arguments"):
        approval_of(_input_request(metadata))
    assert approval_of({"content": {"prompt": "name? "}, "metadata": {}}) is None  # a guest's own prompt
