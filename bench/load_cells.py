"""The load test's workload (bench/load.py): each cell's code and the check of its outcome. Pure: no kernel here.

Every cell has exactly one right outcome; a check returns None for it and otherwise says what was wrong. A client's
session keeps a counter in the kernel that every print cell increments and prints, so each print cell also proves
that no cell before it (a timeout among them) lost the kernel's state or ran twice.
"""

from __future__ import annotations

import datetime
import functools
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sandbox_kernel.client.results import ExecutionResult

KINDS = ("print", "cpu", "skill", "error", "timeout")  # the order a client runs them in, over and over
SKILL_DAY = datetime.date(2026, 1, 1)  # the skill cell asks TimeSkill.add_days for a day after this one

Check = Callable[[ExecutionResult], "str | None"]


@dataclass(frozen=True)
class Workload:
    """What every client runs (the same for all of them)."""

    print_lines: int = 20  # lines of the print cell
    cpu_iterations: int = 1_000_000  # of the CPU cell's pure-Python loop: a fixed amount of work
    cell_timeout: float = 2.0  # the kernel's cell_timeout (ipykernel has none: the client interrupts it then)
    think_seconds: float = 1.0  # mean pause between cells, uniform in [0.5, 1.5] x this
    kernel_timeout: bool = True  # the kernel stops the timeout cell (sandbox-kernel), else the client (ipykernel)
    skill: bool = True  # whether the kernel has TimeSkill (ipykernel has no skills: no skill cell)

    @property
    def kinds(self) -> tuple[str, ...]:
        return KINDS if self.skill else tuple(kind for kind in KINDS if kind != "skill")


@dataclass(frozen=True)
class CellPlan:
    """One cell to run: its code, the client-side time limit (None: the kernel's own), and its check."""

    kind: str
    code: str
    check: Check
    client_timeout: float | None = None


@functools.cache
def cpu_answer(iterations: int) -> int:
    """What the CPU cell computes (here once, on the host, to check the kernel's answer)."""
    return cpu_loop(iterations)


def cpu_loop(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += (i * i) % 7
    return total


CPU_CODE = """\
def _load_work(n):
    total = 0
    for i in range(n):
        total += (i * i) % 7
    return total
_load_work({iterations})"""


class Session:
    """One client's cells, in order, with what each must produce; `seed` makes its numbers and pauses repeatable."""

    def __init__(self, workload: Workload, seed: int) -> None:
        self.workload = workload
        self.rng = random.Random(seed)
        self.token = secrets.token_hex(4)
        self.counter = 0  # print cells run so far: the kernel's _load_n must equal it
        self.position = self.rng.randrange(len(workload.kinds))  # clients start at different kinds

    def setup_code(self) -> str:
        return f"_load_token = {self.token!r}\n_load_n = 0\n_load_token"

    def check_setup(self, result: ExecutionResult) -> str | None:
        return _expect_value(result, repr(self.token))

    def think(self) -> float:
        """Seconds to wait before the next cell (an agent waiting on its model between cells)."""
        return self.rng.uniform(0.5, 1.5) * self.workload.think_seconds

    def next_cell(self) -> CellPlan:
        kind = self.workload.kinds[self.position % len(self.workload.kinds)]
        self.position += 1
        return self.cell(kind)

    def cell(self, kind: str) -> CellPlan:
        if kind == "print":
            return self._print_cell()
        if kind == "cpu":
            iterations = self.workload.cpu_iterations
            expected = repr(cpu_answer(iterations))
            return CellPlan(kind, CPU_CODE.format(iterations=iterations), lambda r: _expect_value(r, expected))
        if kind == "skill":
            days = self.rng.randrange(1000)
            expected = repr((SKILL_DAY + datetime.timedelta(days=days)).isoformat())
            code = f"device.TimeSkill.add_days({SKILL_DAY.isoformat()!r}, days={days})"
            return CellPlan(kind, code, lambda r: _expect_value(r, expected))
        if kind == "error":
            number = self.rng.randrange(10**6)
            code = f"raise ValueError('load test {number}')"
            return CellPlan(kind, code, lambda r: _expect_error(r, "ValueError", f"load test {number}"))
        if kind == "timeout":
            return self._timeout_cell()
        raise ValueError(f"no cell kind {kind!r}; the kinds are {', '.join(KINDS)}")

    def _print_cell(self) -> CellPlan:
        self.counter += 1
        lines = self.workload.print_lines
        expected = "".join(f"{self.token} {self.counter} line {i}\n" for i in range(lines))
        code = f"_load_n += 1\nfor _i in range({lines}):\n    print(_load_token, _load_n, 'line', _i)"

        def check(result: ExecutionResult) -> str | None:
            wrong = _common(result)
            if wrong is None and result.stdout != expected:
                wrong = f"stdout should be {lines} lines '{self.token} {self.counter} line 0' ..., got {result.stdout[:200]!r}"
            return wrong

        return CellPlan("print", code, check)

    def _timeout_cell(self) -> CellPlan:
        code = "import time\ntime.sleep(3600)"
        seconds = self.workload.cell_timeout
        if not self.workload.kernel_timeout:  # ipykernel: the client interrupts at the same time limit
            return CellPlan("timeout", code, lambda r: _expect_error(r, "KeyboardInterrupt", None), seconds)

        def check(result: ExecutionResult) -> str | None:
            wrong = _expect_error(result, "SandboxTimeout", None, timed_out=True)
            if wrong is None and result.error is not None and "variables were kept" not in result.error.evalue:
                wrong = f"the timeout should say the variables were kept, said {result.error.evalue!r}"
            return wrong

        return CellPlan("timeout", code, check)


def _common(result: ExecutionResult, timed_out: bool = False) -> str | None:
    """What is wrong with any cell's result apart from its own output: a restart, a timeout flag, stderr."""
    if result.restarted:
        return f"the sandbox was restarted under the cell (state lost): {result.to_llm(300)!r}"
    if result.timed_out != timed_out:
        return f"timed_out should be {timed_out}: {result.to_llm(300)!r}"
    if result.stderr and not timed_out:
        return f"unexpected stderr {result.stderr[:200]!r}"
    return None


def _expect_value(result: ExecutionResult, expected: str) -> str | None:
    if result.error is not None:
        return f"should give {expected}, raised {result.error.ename}: {result.error.evalue[:200]}"
    wrong = _common(result)
    if wrong is None and result.text != expected:
        wrong = f"should give {expected}, gave {result.text!r}"
    if wrong is None and result.stdout:
        wrong = f"should print nothing, printed {result.stdout[:200]!r}"
    return wrong


def _expect_error(result: ExecutionResult, ename: str, evalue: str | None, timed_out: bool = False) -> str | None:
    """None if the cell raised `ename` (with `evalue`, unless None) and nothing else went wrong."""
    if result.error is None:
        return f"should raise {ename}, gave {result.to_llm(300)!r}"
    if result.error.ename != ename or (evalue is not None and result.error.evalue != evalue):
        shown = ename if evalue is None else f"{ename}: {evalue}"
        return f"should raise {shown}, raised {result.error.ename}: {result.error.evalue[:200]}"
    return _common(result, timed_out)
