"""What a person is asked before a skill call on 'ask' runs, so that an approval means exactly what they saw."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sandbox_kernel.protocol import bridge_data
from sandbox_kernel.skills.lookalikes import key

MARK = "[sandbox-kernel]"  # begins every prompt of the kernel's own; guest prompts may not carry it
SHOWN_CHARS = 1000  # arguments longer than this are shown in part, with a digest and a way to see all
ANSWERS = "[y]es once / [s]ession / [d]ay: 24 h / [a]lways / [N]o"
DAY_HOURS = 24  # what [d]ay grants (a lasting approval: skills/grants.py)
VERDICTS = ("once", "session", "day", "always")  # the yes answers; [d]ay and [a]lways last, for this code
REASON_CHARS = 500  # of the reason a refusal may give, passed on to the code in its SkillRefused
_REFUSAL = re.compile(r"\s*no?\s*:(?P<reason>.*)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Approval:
    """One question to a person about one call."""

    skill: str
    method: str
    arguments: str  # every argument, as Python shows them
    digest: str  # sha256 of the arguments' JSON
    prompt: str
    args: list[Any] = field(default_factory=list)  # the call's arguments, as the method would get them
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def metadata(self) -> dict[str, Any]:
        """Set on the input_request message by the kernel only: agents read this, never the prompt text. `call` is
        the arguments as data: JSON text (ASCII, so any string survives the message) of {"args", "kwargs"}, bytes
        as {"__bytes__": base64}; `arguments` shows them, `sha256` binds both."""
        call = {"args": bridge_data.encode(self.args), "kwargs": bridge_data.encode(self.kwargs)}
        return {
            "sandbox_kernel": {
                "approval": {
                    "skill": self.skill,
                    "method": self.method,
                    "arguments": self.arguments,
                    "sha256": self.digest,
                    "call": json.dumps(call, ensure_ascii=True, allow_nan=False),
                }
            }
        }


def shown_arguments(args: list[Any], kwargs: dict[str, Any]) -> str:
    """The call's arguments as Python shows them (repr escapes newlines and invisible characters); a keyword that
    is not an identifier (the guest chooses them: newlines, '=', ', ') is shown as Python would pass it, `**{...}`."""
    named = [f"{k}={v!r}" for k, v in kwargs.items() if k.isidentifier()]
    odd = {k: v for k, v in kwargs.items() if not k.isidentifier()}
    return ", ".join([*(repr(a) for a in args), *named, *([f"**{odd!r}"] if odd else [])])


def call_digest(args: list[Any], kwargs: dict[str, Any]) -> str:
    """sha256 of the call's arguments (as decoded: bytes by their repr), in hex."""
    return hashlib.sha256(json.dumps([args, kwargs], default=repr, sort_keys=True).encode()).hexdigest()


def code_changed_note(target: str) -> str:
    """What the prompt says first when a lasting approval of `target` was for other code."""
    return f"The code of {target} changed since you approved it. "


def approval_for(skill: str, method: str, args: list[Any], kwargs: dict[str, Any], note: str = "") -> Approval:
    """The question about one call; `note` (the kernel's own words, e.g. code_changed_note) comes first."""
    arguments = shown_arguments(args, kwargs)
    digest = call_digest(args, kwargs)
    if len(arguments) <= SHOWN_CHARS:
        shown, extra = arguments, ""
    else:
        shown = arguments[:SHOWN_CHARS] + " …"
        extra = f" [{len(arguments)} characters, sha256 {digest[:16]}: answer [v] to see them all]"
    prompt = f"{MARK} {note}Allow {skill}.{method}({shown})?{extra} {ANSWERS}: "
    return Approval(skill, method, arguments, digest, prompt, list(args), dict(kwargs))


def full_view(approval: Approval) -> str:
    """The whole call, for a person who answered [v]."""
    return (
        f"{MARK} {approval.skill}.{approval.method} would be called with (sha256 {approval.digest}):\n"
        f"{approval.arguments}\n"
    )


def refusal(reason: str) -> str:
    """The answer that refuses a call and says why (a program's answer, or a person's: `n: too costly`)."""
    return f"n: {reason}"


def refusal_reason(answer: str) -> str | None:
    """The reason given with a refusal (`n: REASON` or `no: REASON`), on one line and at most REASON_CHARS; else
    None."""
    match = _REFUSAL.match(answer)
    if match is None:
        return None
    reason = " ".join(match["reason"].split())
    return reason[:REASON_CHARS] + (" …" if len(reason) > REASON_CHARS else "") or None


def parse_answer(answer: str) -> str:
    """One of VERDICTS, 'view' or 'no' from a person's answer."""
    word = answer.strip().lower()
    words = {"y": "once", "yes": "once", "s": "session", "session": "session", "d": "day", "day": "day",
             "a": "always", "always": "always", "v": "view", "view": "view"}  # fmt: skip
    return words.get(word, "no")


@cache
def _imitation() -> re.Pattern[str]:
    """What a prompt that reads like one of ours contains: the mark's words, "Allow Skill.method(" or the answer
    menu. Matched against lookalikes.key(prompt), so written with the keys of the words. Made on first use: the
    confusables table takes ~0.1 s to load, and most kernels never see an input() prompt."""
    return re.compile(
        "|".join(
            (
                rf"{key('sandbox')}\W*{key('kernel')}",
                rf"{key('allow')}\s+\w+\s*\.\s*\w+\s*\(",
                rf"\W{key('y')}\W\s*{key('es')}\s*{key('once')}",
                rf"\W{key('a')}\W\s*{key('lways')}",
            )
        )
    )


def imitates_kernel(prompt: str) -> bool:
    """Whether a guest's input() prompt could pass for one of the kernel's approval prompts: judged on what it
    looks like (Unicode confusables, compatibility forms, case, invisible characters: lookalikes.key), read either
    way (a right-to-left override shows '\u202e]lenrek-xobdnas[' as '[sandbox-kernel]')."""
    seen = key(prompt)
    return any(_imitation().search(text) for text in (seen, seen[::-1]))
