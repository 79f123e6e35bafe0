"""A soak run: one sandbox-kernel through thousands of mixed cells, with ipykernel side by side on the same cells.

Usage: python bench/soak.py [--cells N] [--restart-every N] [--sample-every N] [--seed N] [--no-reference]
    [--output bench/RESULTS.md]

Both kernels are driven through jupyter_client, in turns of --sample-every cells (the same cells, so the machine's
load falls alike on both): prints, values, rich output (`display`), exceptions, skill calls, shell commands (`!echo`,
`!ls`), file writes, completions (complete_request) and interrupts (of a `while True` cell, once it has printed).
The mix is bench/soak_cells.py's; ipykernel has no skills, so plain functions with the same results stand in for
them. Every --restart-every cells each kernel is restarted (km.restart_kernel, as a frontend's Restart). After every
turn the RSS of each kernel process and of its sandbox's Deno process is read. The section '## Soak' of
bench/RESULTS.md is written, as bench/run.py writes its sections.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import queue
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from run import OURS, REFERENCE, kernel_pid, process_tree, replace_section
from soak_cells import KINDS, MIX, SPINNING, Outcome, Plan, Session, schedule
from soak_report import Block, Sample, drift, kind_table, latency_table, memory_table

BENCH = Path(__file__).resolve().parent
HEADING = "## Soak"
SKILLS = '--SandboxKernel.skills=["TimeSkill", "KeyValueSkill"]'
INTERRUPT_WAIT = 2.0  # seconds for an interrupt to end the cell before it is sent again
INTERRUPT_TRIES = 5


class CellTimeout(Exception):
    """A cell (or a request) had no answer within the bound: the kernel is restarted."""


def rss_mib(pid: int) -> float:
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sandbox_pid(pid: int) -> int | None:
    """The kernel's sandbox: the oldest Deno process below it (a spare, when there is one, started later)."""
    found = []
    for p in process_tree(pid)[1:]:
        try:
            process = psutil.Process(p)
            if process.name() == "deno":
                found.append((process.create_time(), p))
        except psutil.Error:
            continue
    return min(found)[1] if found else None


@dataclass
class Driver:
    """One kernel, its session and its blocks."""

    label: str
    km: KernelManager
    kc: BlockingKernelClient
    session: Session
    bound: float  # seconds any cell may take
    blocks: list[Block] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)  # processes of a kernel still alive after its restart
    done: int = 0  # cells run so far, in all blocks
    block_start: int = 0  # `done` when the current block began

    @classmethod
    def start(cls, label: str, kernel: str, arguments: list[str], session: Session, cwd: Path, bound: float) -> Driver:
        km = KernelManager(kernel_name=kernel)
        km.start_kernel(extra_arguments=arguments, cwd=str(cwd))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=300)
        driver = cls(label, km, kc, session, bound)
        driver.new_block()
        return driver

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def new_block(self) -> None:
        self.blocks.append(Block(len(self.blocks)))
        self.block_start = self.done
        outcome = self.execute(self.session.setup_code())
        wrong = self.session.check_setup(outcome)
        if wrong:
            raise RuntimeError(f"{self.label}: the setup cell was wrong: {wrong}")
        self.sample()

    def sample(self) -> None:
        cells = self.done - self.block_start
        pid = kernel_pid(self.km)
        sandbox = sandbox_pid(pid)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        self.block.samples.append(Sample(cells, rss_mib(pid), rss_mib(sandbox) if sandbox else None, fds))

    def run(self, plan: Plan) -> None:
        self.done += 1
        t0 = time.perf_counter()
        try:
            outcome = self.complete(plan) if plan.cursor is not None else self.execute(plan.code, plan.interrupt)
        except CellTimeout as exc:
            self.block.failures.append(f"{plan.kind} cell {plan.code[:60]!r}: {exc}; the kernel was restarted")
            self.restart()
            return
        self.block.latencies[plan.kind].append(time.perf_counter() - t0)
        wrong = plan.check(outcome)
        if wrong is not None:
            self.block.failures.append(f"{plan.kind} cell {plan.code[:60]!r}: {wrong}")

    def complete(self, plan: Plan) -> Outcome:
        msg_id = self.kc.complete(plan.code, plan.cursor)
        content = self.reply(msg_id)
        return Outcome(status=content["status"], matches=list(content.get("matches", [])))

    def execute(self, code: str, interrupt: bool = False) -> Outcome:
        """Run `code` to its idle status and reply; with `interrupt`, interrupt it once it printed SPINNING (and
        again every INTERRUPT_WAIT seconds until it ends)."""
        msg_id = self.kc.execute(code)
        outcome = Outcome()
        deadline = time.monotonic() + self.bound
        interrupted_at: float | None = None
        tries = 0
        while True:
            wait = deadline - time.monotonic()
            if interrupted_at is not None:
                wait = min(wait, interrupted_at + INTERRUPT_WAIT - time.monotonic())
            try:
                msg = self.kc.get_iopub_msg(timeout=max(wait, 0.001))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise CellTimeout(f"no idle status within {self.bound:g} s") from None
                if interrupted_at is not None:  # the interrupt had no effect yet: send it again
                    if tries >= INTERRUPT_TRIES:
                        raise CellTimeout(f"{tries} interrupts did not stop the cell") from None
                    self.km.interrupt_kernel()
                    tries += 1
                    self.block.resent_interrupts += 1
                    interrupted_at = time.monotonic()
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    outcome.stdout += content["text"]
                else:
                    outcome.stderr += content["text"]
                if interrupt and interrupted_at is None and SPINNING in outcome.stdout:
                    outcome.stdout = outcome.stdout.replace(SPINNING + "\n", "", 1)
                    self.km.interrupt_kernel()
                    tries, interrupted_at = 1, time.monotonic()
            elif kind in ("execute_result", "display_data"):
                outcome.data.append(content["data"])
            elif kind == "error":
                outcome.error = (content["ename"], content["evalue"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        outcome.status = self.reply(msg_id)["status"]
        return outcome

    def reply(self, msg_id: str) -> dict:
        deadline = time.monotonic() + self.bound
        while True:
            try:
                msg = self.kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise CellTimeout(f"no reply within {self.bound:g} s") from None
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    def restart(self) -> None:
        """Restart the kernel (as a frontend's Restart), time it to the next reply, and start a new block."""
        before = []
        for p in process_tree(kernel_pid(self.km)):
            try:
                before.append(psutil.Process(p))
            except psutil.Error:
                continue
        t0 = time.perf_counter()
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=300)
        self.execute("pass")
        self.block.restart_seconds = time.perf_counter() - t0
        for process in before:  # is_running() also tells a reused pid apart (by its start time)
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                self.left_behind.append(f"{process.name()} (pid {process.pid}, block {len(self.blocks)})")
        self.new_block()

    def stop(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def soak(args: argparse.Namespace) -> tuple[list[Driver], float]:
    """Run the schedule on each kernel in turns; the drivers (with their blocks) and the run's seconds."""
    specs = schedule(args.cells, args.seed)
    token = secrets.token_hex(4)
    folder = Path(tempfile.mkdtemp(prefix="sandbox-soak-"))
    ours = Session(token, skills=True)
    kernels = [("ours", OURS, [SKILLS], ours)]
    if args.reference:  # ipykernel's files are the host's: in this run's own folder
        kernels.append(("ipykernel", REFERENCE, [], Session(token, skills=False, tmp=str(folder), pty=True)))
    drivers: list[Driver] = []
    t0 = time.perf_counter()
    try:
        for label, kernel, arguments, session in kernels:
            drivers.append(Driver.start(label, kernel, arguments, session, folder, args.cell_bound))
        for first in range(0, len(specs), args.sample_every):
            turn = specs[first : first + args.sample_every]
            done = first + len(turn)
            for driver in drivers:
                for spec in turn:
                    driver.run(driver.session.plan(spec))
                driver.sample()
            if args.restart_every and done % args.restart_every == 0 and done < len(specs):
                for driver in drivers:
                    driver.restart()
            if done % 1000 == 0 or done == len(specs):
                print(progress(drivers, done, time.perf_counter() - t0), file=sys.stderr, flush=True)
    finally:
        for driver in drivers:
            driver.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return drivers, time.perf_counter() - t0


def progress(drivers: list[Driver], done: int, seconds: float) -> str:
    parts = [f"{done:,} cells, {seconds:.0f} s"]
    for d in drivers:
        s = d.block.samples[-1]
        sandbox = f", Deno {s.sandbox_mib:.0f}" if s.sandbox_mib is not None else ""
        failures = sum(len(b.failures) for b in d.blocks)
        parts.append(f"{d.label}: kernel {s.kernel_mib:.0f} MiB{sandbox}, {failures} failures")
    return "; ".join(parts)


def report(args: argparse.Namespace, drivers: list[Driver], seconds: float) -> str:
    ours = drivers[0]
    theirs = drivers[1] if len(drivers) > 1 else None
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python", "bench/soak.py", *sys.argv[1:]])
    failures = [(d.label, f) for d in drivers for b in d.blocks for f in b.failures]
    resent = {d.label: sum(b.resent_interrupts for b in d.blocks) for d in drivers}
    left = [f"{d.label}: {p}" for d in drivers for p in d.left_behind]
    mix = ", ".join(f"{kind} {weight}" for kind, weight in MIX.items())
    restarts = (
        f"each kernel is restarted every {args.restart_every:,} cells (`km.restart_kernel()`, as a frontend's "
        "Restart): a block is the cells between two restarts"
        if args.restart_every
        else "no restart: one block"
    )
    their_drift = drift(theirs.blocks) if theirs else None
    ours_drift = drift(ours.blocks)
    parts = [
        HEADING,
        f"One run of `{command}` on {when}, {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()} (host); {seconds:.0f} s in all. {args.cells:,} cells per kernel, in turns of "
        f"{args.sample_every} (both kernels run the same cells one after the other, so the machine's load falls "
        f"alike on both); {restarts}.",
        f"The mix, cells per 100 in a shuffled order (seed {args.seed}): {mix}. print: 1-5 lines and a counter kept "
        "in the kernel (each print cell checks that no cell before it lost the state); value: a list built and "
        "summed; display: `display(HTML(...))` or `display(Markdown(...))`; error: `ValueError`, `NameError` or "
        "`ZeroDivisionError` in a function; skill: `device.TimeSkill.add_days` or `device.KeyValueSkill.set` + "
        "`get` (ipykernel has no skills: plain functions with the same results stand in, so its skill row times an "
        "in-process call); shell: `!echo` or `!ls -1` of a folder; file: write 1-64 KiB to one of 20 files and read "
        "it back (ours: the sandbox's in-memory `/tmp`; ipykernel: a host folder); complete: a complete_request "
        "(`_soak_tok`, `os.pa`); interrupt: a `while True: pass` cell, interrupted once it has printed (the time "
        "is from the request to idle, so it holds the client's wait for the print; left out of the per-block "
        "percentiles). Every outcome is checked (the right output, error or matches).",
        f"**Failures: {len(failures)}**"
        + (" (listed below). " if failures else ". ")
        + f"Interrupts sent again after {INTERRUPT_WAIT:g} s without effect: "
        + ", ".join(f"{label} {n}" for label, n in resent.items())
        + ". Processes of a kernel still running after its restart: "
        + (", ".join(left) if left else "none")
        + ".",
        f"Latency drift (the last block's p50 over the first's): ours {_percent(ours_drift)}, ipykernel "
        f"{_percent(their_drift)}.",
        "### Latency by block (ms, client side: execute to idle and reply; complete_request to reply)",
        latency_table(ours.blocks, theirs.blocks if theirs else None),
        "### Memory by block (RSS, MiB)",
        "Growth per 1,000 cells: the least-squares slope of the samples taken after every turn, from the block's "
        f"first {args.sample_every} cells on (the first cells after a start load what later ones reuse: "
        "just-bash, jedi, the display machinery). ipykernel's `!` commands run in child processes that end with "
        "the cell; ours run in the sandbox (just-bash), so its Deno RSS holds them.",
        memory_table(ours.blocks, theirs.blocks if theirs else None),
        "### Latency by kind, whole run",
        kind_table(ours.blocks, theirs.blocks if theirs else None, KINDS),
    ]
    if failures:
        parts += ["### Failures", "\n".join(f"- {label}: {f}" for label, f in failures[:30])]
        if len(failures) > 30:
            parts[-1] += f"\n- ... and {len(failures) - 30} more"
    return "\n\n".join(parts) + "\n"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000, help="cells per kernel (default 10,000)")
    parser.add_argument("--restart-every", type=int, default=1000, help="cells between restarts; 0: none")
    parser.add_argument("--sample-every", type=int, default=100, help="cells per turn, memory read after each")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--cell-bound", type=float, default=120, help="seconds a cell may take (then: restart)")
    parser.add_argument("--no-reference", dest="reference", action="store_false", help="skip ipykernel")
    parser.add_argument("--output", type=Path, default=BENCH / "RESULTS.md")
    args = parser.parse_args(argv)
    problems = [
        f"--{name.replace('_', '-')} must be more than 0, got {getattr(args, name)}"
        for name in ("cells", "sample_every", "cell_bound")
        if getattr(args, name) <= 0
    ]
    if args.restart_every < 0 or (args.restart_every and args.restart_every % args.sample_every):
        problems.append(
            f"--restart-every must be 0 or a multiple of --sample-every ({args.sample_every}), got {args.restart_every}"
        )
    if problems:
        parser.error("; ".join(problems))
    return args


def main() -> None:
    args = parse()
    drivers, seconds = soak(args)
    section = report(args, drivers, seconds)
    print(section)
    args.output.write_text(replace_section(args.output.read_text() if args.output.exists() else "", HEADING, section))


if __name__ == "__main__":
    main()
