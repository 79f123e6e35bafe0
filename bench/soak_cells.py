"""The soak run's cells (bench/soak.py): the mix, each cell's code and the check of its outcome. Pure: no kernel here.

One schedule (kinds and numbers, from a seed) is run by both kernels. A session renders it for its kernel: ours calls
the host's skills (`device.TimeSkill`, `device.KeyValueSkill`), ipykernel, which has none, calls plain functions
defined by its setup cell that compute the same results. Every cell has exactly one right outcome; a check returns
None for it and otherwise says what was wrong. Print cells count in a variable of the kernel's, so each one also
proves that no cell before it (an interrupt among them) lost the kernel's state or ran twice.
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

# Cells of each kind per 100, in the mix (the order is random, from the seed).
MIX: dict[str, int] = {
    "print": 16, "value": 12, "display": 12, "error": 10, "skill": 10, "shell": 10, "file": 10, "complete": 17,
    "interrupt": 3,
}  # fmt: skip
KINDS = tuple(MIX)
SKILL_DAY = datetime.date(2026, 1, 1)
SPINNING = "soak: spinning"  # the interrupt cell prints this, then loops until interrupted
FILES = 20  # the file cells overwrite this many files, over and over: what they hold stays bounded
KEYS = 10  # and the skill cells this many keys of the key-value store
# IPython's warning when `Out` reaches its 1,000 results (it then drops the oldest 200): right, in either kernel, on
# the 1,000th result after a start, so only a run without restarts (or with long blocks) sees it.
OUT_CACHE_WARNING = re.compile(
    r"\S*displayhook\.py:\d+: UserWarning: Output cache limit \(currently \d+ entries\) hit\.\n"
    r"Flushing oldest \d+ entries\.\n  warn\(.*\n"
)


@dataclass(frozen=True)
class Spec:
    """One cell of the schedule: its kind and a number that varies its code (the same for both kernels)."""

    kind: str
    number: int


def schedule(cells: int, seed: int, mix: dict[str, int] | None = None) -> list[Spec]:
    """`cells` specs whose kinds follow `mix` (weights), shuffled by `seed`; each run of 100 has the mix exactly."""
    mix = mix or MIX
    if any(weight < 0 for weight in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"the mix's weights must be >= 0 and not all 0, got {mix}")
    rng = random.Random(seed)
    period = [kind for kind, weight in mix.items() for _ in range(weight)]
    kinds: list[str] = []
    while len(kinds) < cells:
        rng.shuffle(period)
        kinds += period
    return [Spec(kind, rng.randrange(10**6)) for kind in kinds[:cells]]


@dataclass
class Outcome:
    """What a kernel gave for one cell (or one completion request), collected from its messages."""

    status: str = ""  # the reply's
    stdout: str = ""
    stderr: str = ""
    data: list[dict[str, object]] = field(default_factory=list)  # execute_result and display_data bundles
    error: tuple[str, str] | None = None  # ename, evalue
    matches: list[str] = field(default_factory=list)  # of a complete_reply

    @property
    def text(self) -> str | None:
        """The text/plain of the execute_result (the last bundle), if any."""
        return str(self.data[-1].get("text/plain")) if self.data else None


Check = Callable[[Outcome], "str | None"]


@dataclass(frozen=True)
class Plan:
    """What to send: a cell's code (or, for a completion, the code and the cursor), and the check of the outcome."""

    kind: str
    code: str
    check: Check
    cursor: int | None = None  # a complete_request at this position instead of an execute_request
    interrupt: bool = False  # interrupt once SPINNING is printed


class Session:
    """One kernel's rendering of the schedule; `skills`: whether the kernel has the host's skills (ours) or
    plain functions stand in for them (ipykernel). Call setup_code() after every (re)start."""

    def __init__(self, token: str, skills: bool, tmp: str = "/tmp", pty: bool = False) -> None:
        self.token = token
        self.skills = skills
        self.newline = "\r\n" if pty else "\n"  # ipykernel runs `!` commands on a pseudo-terminal
        self.folder = f"{tmp}/soak-{token}"  # two fixed files, for `!ls`
        self.files = f"{tmp}/soak-{token}-w"  # the file cells' files
        self.counter = 0

    def setup_code(self) -> str:
        self.counter = 0
        code = (
            "import os, datetime\nfrom IPython.display import HTML, Markdown, display\n"
            f"_soak_token = {self.token!r}\n_soak_n = 0\n"
            f"os.makedirs({self.folder!r}, exist_ok=True)\nos.makedirs({self.files!r}, exist_ok=True)\n"
            f"for _f in ('a.txt', 'b.txt'):\n    open(os.path.join({self.folder!r}, _f), 'w').write(_f)\n"
        )
        if not self.skills:  # the same results as the skills' (TimeSkill.add_days, KeyValueSkill.set/get)
            code += (
                "def _soak_add_days(day, days):\n"
                "    return (datetime.date.fromisoformat(day) + datetime.timedelta(days=days)).isoformat()\n"
                "_soak_store = {}\n"
                "def _soak_set(key, value):\n    _soak_store[key] = value\n"
                "def _soak_get(key):\n    return _soak_store.get(key)\n"
            )
        return code + "_soak_token"

    def check_setup(self, outcome: Outcome) -> str | None:
        return expect_value(outcome, repr(self.token))

    def plan(self, spec: Spec) -> Plan:
        n = spec.number
        kind = spec.kind
        if kind == "print":
            self.counter += 1
            lines = 1 + n % 5
            expected = "".join(f"{self.token} {self.counter} line {i}\n" for i in range(lines))
            code = f"_soak_n += 1\nfor _i in range({lines}):\n    print(_soak_token, _soak_n, 'line', _i)"
            return Plan(kind, code, lambda o: expect_stdout(o, expected))
        if kind == "value":
            size = 100 + n % 900
            code = f"_soak_last = [i * i for i in range({size})]\nlen(_soak_last), sum(_soak_last)"
            return Plan(kind, code, lambda o: expect_value(o, repr((size, sum(i * i for i in range(size))))))
        if kind == "display":
            if n % 2:
                code = f"display(HTML('<b>soak {n}</b>'))"
                return Plan(kind, code, lambda o: expect_display(o, "text/html", f"<b>soak {n}</b>"))
            code = f"display(Markdown('*soak {n}*'))"
            return Plan(kind, code, lambda o: expect_display(o, "text/markdown", f"*soak {n}*"))
        if kind == "error":
            return self._error(n)
        if kind == "skill":
            return self._skill(n)
        if kind == "shell":
            if n % 2:
                return Plan(kind, f"!echo soak {n}", lambda o: expect_stdout(o, f"soak {n}{self.newline}"))
            listed = f"a.txt{self.newline}b.txt{self.newline}"
            return Plan(kind, f"!ls -1 {self.folder}", lambda o: expect_stdout(o, listed))
        if kind == "file":
            size = 1024 * (1 + n % 64)
            path = f"{self.files}/{n % FILES}.txt"
            code = (
                f"with open({path!r}, 'w') as _fh:\n    _fh.write({str(n % 10)!r} * {size})\n"
                f"with open({path!r}) as _fh:\n    _soak_read = _fh.read()\nlen(_soak_read), _soak_read[:3]"
            )
            return Plan(kind, code, lambda o: expect_value(o, repr((size, str(n % 10) * 3))))
        if kind == "complete":
            if n % 2:
                code = "_soak_tok"
                return Plan(kind, code, lambda o: expect_match(o, "_soak_token"), cursor=len(code))
            code = "os.pa"
            return Plan(kind, code, lambda o: expect_match(o, "path"), cursor=len(code))
        if kind == "interrupt":
            code = f"print({SPINNING!r}, flush=True)\nwhile True:\n    pass"
            return Plan(kind, code, lambda o: expect_error(o, "KeyboardInterrupt", None), interrupt=True)
        raise ValueError(f"no cell kind {kind!r}; the kinds are {', '.join(KINDS)}")

    def _error(self, n: int) -> Plan:
        if n % 3 == 0:
            return Plan("error", f"raise ValueError('soak {n}')", lambda o: expect_error(o, "ValueError", f"soak {n}"))
        if n % 3 == 1:
            name = f"soak_undefined_{n}"
            return Plan("error", name, lambda o: expect_error(o, "NameError", f"name '{name}' is not defined"))
        code = f"def _soak_div(x):\n    return x / 0\n_soak_div({n})"
        return Plan("error", code, lambda o: expect_error(o, "ZeroDivisionError", "division by zero"))

    def _skill(self, n: int) -> Plan:
        if n % 2:
            days = n % 1000
            expected = repr((SKILL_DAY + datetime.timedelta(days=days)).isoformat())
            call = "device.TimeSkill.add_days" if self.skills else "_soak_add_days"
            return Plan("skill", f"{call}({SKILL_DAY.isoformat()!r}, days={days})", lambda o: expect_value(o, expected))
        key, value = f"soak-{n % KEYS}", {"n": n, "token": self.token}
        put, get = (
            ("device.KeyValueSkill.set", "device.KeyValueSkill.get") if self.skills else ("_soak_set", "_soak_get")
        )
        code = f"{put}({key!r}, {value!r})\n{get}({key!r})"
        return Plan("skill", code, lambda o: expect_value(o, repr(value)))


def common(outcome: Outcome, status: str = "ok") -> str | None:
    """What is wrong with a cell's outcome apart from its own output: the reply's status, stderr."""
    if outcome.status != status:
        shown = f"{outcome.error[0]}: {outcome.error[1][:200]}" if outcome.error else outcome.stderr[:200]
        return f"the reply's status should be {status!r}, was {outcome.status!r} ({shown})"
    stderr = OUT_CACHE_WARNING.sub("", outcome.stderr, count=1)
    if stderr:
        return f"unexpected stderr {stderr[:200]!r}"
    return None


def expect_value(outcome: Outcome, expected: str) -> str | None:
    wrong = common(outcome)
    if wrong is None and outcome.text != expected:
        wrong = f"should give {expected[:200]}, gave {str(outcome.text)[:200]!r}"
    if wrong is None and outcome.stdout:
        wrong = f"should print nothing, printed {outcome.stdout[:200]!r}"
    return wrong


def expect_stdout(outcome: Outcome, expected: str) -> str | None:
    wrong = common(outcome)
    if wrong is None and outcome.stdout != expected:
        wrong = f"stdout should be {expected[:200]!r}, got {outcome.stdout[:200]!r}"
    return wrong


def expect_display(outcome: Outcome, mime: str, expected: str) -> str | None:
    wrong = common(outcome)
    if wrong is None and [d.get(mime) for d in outcome.data] != [expected]:
        wrong = f"should display one {mime} {expected!r}, displayed {outcome.data!r:.300}"
    return wrong


def expect_error(outcome: Outcome, ename: str, evalue: str | None) -> str | None:
    """None if the cell raised `ename` (with `evalue`, unless None) and nothing else went wrong."""
    if outcome.error is None:
        return f"should raise {ename}, gave status {outcome.status!r}, stdout {outcome.stdout[:200]!r}"
    if outcome.error[0] != ename or (evalue is not None and outcome.error[1] != evalue):
        shown = ename if evalue is None else f"{ename}: {evalue}"
        return f"should raise {shown}, raised {outcome.error[0]}: {outcome.error[1][:200]}"
    return common(outcome, "error")


def expect_match(outcome: Outcome, expected: str) -> str | None:
    """A completion: the reply is ok and its matches hold `expected` (after a dot, both kernels give the name
    after it)."""
    if outcome.status != "ok":
        return f"the complete_reply's status should be 'ok', was {outcome.status!r}"
    if expected not in outcome.matches:
        return f"the matches should hold {expected!r}, were {outcome.matches[:20]!r}"
    return None
