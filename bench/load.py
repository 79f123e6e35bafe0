"""A load test of sandbox-kernel behind a real Jupyter Kernel Gateway on 127.0.0.1, with ipykernel side by side.

Usage: python bench/load.py [--duration S] [--steps N ...] [--max-kernels N] [--no-reference] [--output PATH]

N clients (one AsyncSandbox(gateway_url=...) each, in this one asyncio process) loop a mixed workload (bench/
load_cells.py) for --duration seconds; N ramps 1, 2, 4, 8, ... while the step holds (bench/load_report.py: no
failure, and the CPU cell's p99 within --bound-factor of its p50 at N=1), the next step fits in free memory and
N <= --max-kernels. Then ipykernel's python3 kernels run the same steps behind the same gateway (minus the skill
cell). The section '## Load behind a gateway' of bench/RESULTS.md is written, as bench/run.py writes its sections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.metadata
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from kernel_gateway import KernelGateway, kernel_gateway
from load_cells import CellPlan, Session, Workload
from load_report import (
    INTERACTIVE,
    HoldsRule,
    Machine,
    Step,
    comparison_table,
    cpu_cores,
    failure_list,
    latency_table,
    resource_table,
    sizing,
    sizing_table,
)
from run import OURS, REFERENCE, process_tree, pss_mb, replace_section, settled_pss, tree_pss_mb
from sandbox_kernel.client.agent import AsyncSandbox
from sandbox_kernel.client.gateway_kernel import GatewayKernel

BENCH = Path(__file__).resolve().parent
HEADING = "## Load behind a gateway"
SETTLE_SECONDS = 120.0  # for a kernel's CPU and memory to settle after its start
QUIET_WINDOW = 2.0  # seconds over which the kernels' CPU is sampled while they settle
LOADED_CORES = 0.25  # other work using more than this in a step makes the report say the machine was loaded
QUIET_CORES = 0.02  # per kernel: below that, the kernels are at rest


@dataclass(frozen=True)
class Settings:
    """The command line, checked."""

    workload: Workload
    duration: float  # seconds of workload per step
    rest_seconds: float  # the window in which CPU at rest is measured
    cell_bound: float  # no cell may take longer: then its client is given up (a failure)
    start_timeout: float
    spare_sandbox: str
    reserve_mib: float  # RAM kept free for the system: the ramp stops before the next step would need it


@dataclass
class Client:
    """One AsyncSandbox on the gateway and its session; `lost`: why it stopped (then it runs no more cells)."""

    index: int
    sandbox: AsyncSandbox
    session: Session
    pid: int  # the kernel's process on this machine
    started: float  # seconds from launch to its first result
    lost: str | None = None


@dataclass
class Fleet:
    """The clients of one kind of kernel on the gateway; the ramp adds to them step by step."""

    gateway: KernelGateway
    kernel: str
    settings: Settings
    workload: Workload
    clients: list[Client] = field(default_factory=list)

    @property
    def processes(self) -> int:
        """Processes of one kernel at rest: ipykernel's one; ours, the kernel, its sandbox and (with cell_timeout
        under 'auto') a spare."""
        if self.kernel != OURS:
            return 1
        spare = self.settings.spare_sandbox == "True" or self.settings.spare_sandbox == "auto"
        return 3 if spare else 2

    async def grow(self, n: int) -> tuple[list[float], list[str]]:
        """Start kernels until there are `n`, all at once: seconds from launch to each one's first result, and
        what failed."""
        started = await asyncio.gather(*(self._start(len(self.clients) + i) for i in range(n - len(self.clients))))
        times, failures = [], []
        for outcome in started:
            if isinstance(outcome, Client):
                self.clients.append(outcome)
                times.append(outcome.started)
            else:
                failures.append(outcome)
        return times, failures

    async def _start(self, index: int) -> Client | str:
        session = Session(self.workload, seed=index)
        sandbox = AsyncSandbox(
            gateway_url=self.gateway.url, gateway_token=self.gateway.token, kernel_name=self.kernel,
            startup_timeout=self.settings.start_timeout,
        )  # fmt: skip
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(sandbox.start(), self.settings.start_timeout + 10)
            result = await asyncio.wait_for(sandbox.run(session.setup_code()), self.settings.cell_bound)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sandbox.close(), 30)
            return f"client {index}: the kernel did not start: {type(exc).__name__}: {exc}"
        started = time.perf_counter() - t0
        wrong = session.check_setup(result)
        if wrong is not None:
            await sandbox.close()
            return f"client {index}: the first cell was wrong: {wrong}"
        assert isinstance(sandbox.kernel, GatewayKernel) and sandbox.kernel.kernel_id is not None
        return Client(index, sandbox, session, self._kernel_pid(sandbox.kernel.kernel_id), started)

    def _kernel_pid(self, kernel_id: str) -> int:
        """The gateway's child process of that kernel (its command line names the kernel's connection file)."""
        pids = [p for p in self.gateway.kernel_pids(kernel_id) if psutil.Process(p).ppid() == self.gateway.proc.pid]
        if len(pids) != 1:
            raise RuntimeError(f"kernel {kernel_id}: expected one process under the gateway, found {pids}")
        return pids[0]

    async def quiet(self) -> None:
        """Until the kernels' processes use less than QUIET_CORES each over QUIET_WINDOW seconds (a kernel's spare
        sandbox works for seconds after the kernel answers), at most SETTLE_SECONDS."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.clients:
            before, t0 = self.cpu_seconds(), time.monotonic()
            await asyncio.sleep(QUIET_WINDOW)  # the window the condition is measured over
            used = cpu_cores(before, self.cpu_seconds(), time.monotonic() - t0) / len(self.clients)
            if used < QUIET_CORES:
                return
            if time.monotonic() > deadline:
                print(f"warning: {self.kernel}: still {used:.3f} cores per kernel after {SETTLE_SECONDS:g} s; "
                      "measured as it is", file=sys.stderr)  # fmt: skip
                return

    async def memory_at_rest(self) -> list[float]:
        """PSS (MiB) of each kernel with its sandboxes, once its process tree is complete and steady."""

        def settled(pid: int) -> float:
            try:
                return settled_pss(pid, self.processes, SETTLE_SECONDS)[0]
            except TimeoutError as exc:  # measured anyway, and said
                print(f"warning: {exc}; its PSS now is used", file=sys.stderr)
                return tree_pss_mb(pid)

        return list(await asyncio.gather(*(asyncio.to_thread(settled, c.pid) for c in self.clients)))

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds (user + system) of every process of every kernel, by pid."""
        found = {}
        for client in self.clients:
            for pid in process_tree(client.pid):
                with contextlib.suppress(psutil.Error):
                    times = psutil.Process(pid).cpu_times()
                    found[pid] = times.user + times.system
        return found

    async def run_workload(self, seconds: float) -> tuple[dict[str, list[float]], list[str]]:
        """Every client loops its cells for `seconds`, then runs one more print cell (its state is still there);
        the latencies by kind and the failures."""
        cells: dict[str, list[float]] = defaultdict(list)
        failures: list[str] = []
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(self._drive(c, deadline, cells, failures) for c in self.clients if c.lost is None))
        return dict(cells), failures

    async def _drive(self, client: Client, deadline: float, cells: dict[str, list[float]], failures: list[str]) -> None:
        while client.lost is None and time.monotonic() < deadline:
            await asyncio.sleep(client.session.think())  # think time (an agent's pause), not a synchronisation
            await self._run_cell(client, client.session.next_cell(), cells, failures)
        if client.lost is None:
            await self._run_cell(client, client.session.cell("print"), cells, failures)

    async def _run_cell(
        self, client: Client, plan: CellPlan, cells: dict[str, list[float]], failures: list[str]
    ) -> None:
        t0 = time.perf_counter()
        try:
            run = client.sandbox.run(plan.code, timeout=plan.client_timeout)
            result = await asyncio.wait_for(run, self.settings.cell_bound)
        except asyncio.TimeoutError:
            client.lost = (
                f"client {client.index}: a {plan.kind} cell had no answer within {self.settings.cell_bound:g} s"
            )
        except Exception as exc:
            client.lost = f"client {client.index}: a {plan.kind} cell failed: {type(exc).__name__}: {exc}"
        else:
            cells[plan.kind].append(time.perf_counter() - t0)
            wrong = plan.check(result)
            if wrong is not None:
                failures.append(f"client {client.index}, {plan.kind} cell: {wrong}")
            return
        failures.append(f"{client.lost}; the client stopped")

    async def close(self) -> None:
        await asyncio.gather(*(_close(c.sandbox) for c in self.clients))
        self.clients = []


async def _close(sandbox: AsyncSandbox) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(sandbox.close(), 60)


def machine_busy() -> float:
    """CPU seconds the whole machine has spent on work so far (user, nice, system, interrupts; not idle, I/O wait
    or time stolen by the hypervisor)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))


async def measure_step(fleet: Fleet, n: int) -> Step:
    """Grow the fleet to `n` kernels, measure them at rest, then run the workload on all of them."""
    step = Step(fleet.kernel, n)
    step.start_seconds, step.failures = await fleet.grow(n)
    step.failures += [c.lost for c in fleet.clients if c.lost]  # given up in an earlier step: still a failure
    await fleet.quiet()
    step.rest_pss_mb = await fleet.memory_at_rest()
    before, t0 = fleet.cpu_seconds(), time.monotonic()
    await asyncio.sleep(fleet.settings.rest_seconds)  # the window CPU at rest is measured over
    step.idle_cpu = cpu_cores(before, fleet.cpu_seconds(), time.monotonic() - t0)

    gateway = psutil.Process(fleet.gateway.proc.pid)
    kernels, gateway_cpu, client_cpu, machine = (
        fleet.cpu_seconds(), sum(gateway.cpu_times()[:2]), time.process_time(), machine_busy(),
    )  # fmt: skip
    load_before, t0 = os.getloadavg()[0], time.monotonic()
    step.cells, failures = await fleet.run_workload(fleet.settings.duration)
    step.seconds = elapsed = time.monotonic() - t0
    step.failures += failures
    step.kernels_cpu = cpu_cores(kernels, fleet.cpu_seconds(), elapsed)
    step.gateway_cpu = (sum(gateway.cpu_times()[:2]) - gateway_cpu) / elapsed
    step.client_cpu = (time.process_time() - client_cpu) / elapsed
    step.machine_cpu = (machine_busy() - machine) / elapsed
    step.load_average = (load_before, os.getloadavg()[0])
    step.busy_pss_mb = list(await asyncio.gather(*(asyncio.to_thread(tree_pss_mb, c.pid) for c in fleet.clients)))
    step.gateway_pss_mb = pss_mb(fleet.gateway.proc.pid)
    return step


def summary(step: Step) -> str:
    def shown(kind: str) -> str:
        latency = step.latency(kind)
        return "n/a" if latency is None else latency.shown()

    return (
        f"{step.kernel} N={step.n}: {step.cell_count} cells, {len(step.failures)} failures, "
        f"CPU cell {shown('cpu')} ms, all but timeout {shown(INTERACTIVE)} ms, "
        f"{step.rest_per_kernel:.0f} MiB per kernel at rest, kernels' CPU {step.kernels_cpu:.2f} cores"
    )


async def ramp(fleet: Fleet, counts: list[int], rule: HoldsRule | None) -> tuple[list[Step], str]:
    """Run the steps of `counts` in order; with `rule`, stop after the first that does not hold. Also stop before
    a step whose new kernels would not fit in the memory available now. The steps, and why the ramp ended."""
    steps: list[Step] = []
    for n in counts:
        if steps:
            each = max(steps[-1].rest_per_kernel, steps[-1].busy_per_kernel)
            need = (n - len(fleet.clients)) * each * 1.1  # 10% for what guests and the gateway add
            free = psutil.virtual_memory().available / (1 << 20) - fleet.settings.reserve_mib
            if need > free:
                return steps, f"N={n} would need ~{need:,.0f} MiB more, {free:,.0f} MiB is free (less the reserve)"
        print(f"{fleet.kernel}: N={n} ...", file=sys.stderr, flush=True)
        steps.append(await measure_step(fleet, n))
        print(summary(steps[-1]), file=sys.stderr, flush=True)
        if rule is not None:
            _, why = rule.verdict(steps)
            if why is not None:
                return steps, f"did not hold at {why}"
    return steps, f"the last step asked for (N={counts[-1]}) held" if counts else "no step asked for"


def doubling(first: int, last: int) -> list[int]:
    counts, n = [], first
    while n <= last:
        counts.append(n)
        n *= 2
    return counts


def meminfo_mib(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


async def load_test(args: argparse.Namespace, settings: Settings, gateway: KernelGateway) -> str:
    """Both ramps on `gateway`; the report's section."""
    rule = HoldsRule(args.bound_factor)
    counts = args.steps or doubling(1, args.max_kernels)
    ours = Fleet(gateway, OURS, settings, settings.workload)
    try:
        steps, ended = await ramp(ours, counts, rule)
        memory_limit = 1024.0
        if ours.clients:
            facts = await ours.clients[0].sandbox.facts()
            memory_limit = float(facts.get("settings", {}).get("memory_limit_mb", memory_limit))
    finally:
        await ours.close()
    reference_steps: list[Step] = []
    if args.reference and steps:
        workload = Workload(**{**settings.workload.__dict__, "kernel_timeout": False, "skill": False})
        theirs = Fleet(gateway, REFERENCE, settings, workload)
        try:
            reference_steps, _ = await ramp(theirs, [s.n for s in steps], None)
        finally:
            await theirs.close()
    return report(args, settings, rule, steps, ended, reference_steps, memory_limit)


def report(
    args: argparse.Namespace,
    settings: Settings,
    rule: HoldsRule,
    steps: list[Step],
    ended: str,
    reference: list[Step],
    memory_limit: float,
) -> str:
    machine = Machine(os.cpu_count() or 1, meminfo_mib("MemTotal"))
    held, failed = rule.verdict(steps)
    w = settings.workload
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python", "bench/load.py", *sys.argv[1:]])
    gateway_version = importlib.metadata.version("jupyter-kernel-gateway")
    rows = sizing(machine, steps, held, failed, settings.reserve_mib, memory_limit, args.nodes)
    at_rest = rows[0]
    others = max(s.other_cpu for s in steps + reference)
    parts = [
        HEADING,
        f"One run of `{command}` on {when}, {platform.machine()}, {machine.cores} cores, "
        f"{machine.ram_mib / 1024:.1f} GiB RAM, Python {platform.python_version()}. "
        + (
            f"**Other work loaded the machine during this run** (up to {others:.2f} cores in a step: the 'other work' "
            "column below): latencies are higher, and the N that held lower, than on an idle machine."
            if others > LOADED_CORES
            else f"Other work on the machine used at most {others:.2f} cores in a step ('other work' below)."
        ),
        f"Setup: Jupyter Kernel Gateway {gateway_version} on 127.0.0.1 (token, list_kernels, IOPub rate limit off), "
        f"its kernels configured with `cell_timeout={w.cell_timeout:g}`, `skills=['TimeSkill']`, "
        f"`spare_sandbox={settings.spare_sandbox}`; one asyncio client process, an `AsyncSandbox(gateway_url=...)` "
        f"per kernel. Each client loops print ({w.print_lines} lines) -> CPU (a pure-Python loop of "
        f"{w.cpu_iterations:,} iterations) -> skill (`TimeSkill.add_days`) -> error (`ValueError`) -> timeout "
        "(`time.sleep` past `cell_timeout`: interrupted, variables kept), starting at a different cell each, with "
        f"a pause of {0.5 * w.think_seconds:g}-{1.5 * w.think_seconds:g} s before each cell (an agent waiting on "
        "its model: shorter than a model takes, so the load is on the heavy side). Every outcome is checked (the "
        "right output, the right error); each print cell also checks a counter kept in the kernel, and a last "
        f"print cell ends each client's step. Each step runs {settings.duration:g} s; kernels are added before a "
        "step, all at once, and their start is timed to their first result. Latency is client side, execute to "
        "idle and reply.",
        f"Holds: no failure, and the CPU cell's p99 at most {rule.factor:g} x its p50 at the first step: the CPU "
        "cell is a fixed amount of work, so its latency grows only when kernels wait for the cores (or the gateway "
        "and the client fall behind).",
        f"**Result: the largest N that held is {held if held is not None else 'none'}** (the ramp ended: {ended}). "
        f"At rest a kernel takes {at_rest.per_kernel_mib:.0f} MiB PSS (its process and Deno sandboxes, at "
        f"N={max(s.n for s in steps)}): {machine.ram_mib / 1024:.1f} GiB of RAM holds {at_rest.per_machine:,} "
        f"kernels at rest ({at_rest.bound}).",
        "### Latency (ms: p50 / p90 / p99, and the number of cells)",
        latency_table(steps + reference, w.kinds),
        "### Resources",
        resource_table(steps, rule) + "\n" + "\n".join(resource_table(reference, None).splitlines()[2:]),
    ]
    if reference:
        parts += [
            "### Side by side with ipykernel",
            "ipykernel's `python3` kernels behind the same gateway, the same steps and workload minus the skill "
            "cell; ipykernel has no `cell_timeout`, so its timeout cell is interrupted by the client (through the "
            "gateway) at the same time. Ours / ipykernel:",
            comparison_table(steps, reference, [k for k in w.kinds if k != "skill"]),
        ]
    parts += [
        "### Sizing",
        f"Derived from the steps above: at rest, the per-kernel PSS of the largest step; busy, that of the largest "
        f"step that held, after its workload; usable memory is the RAM less {settings.reserve_mib:g} MiB for the "
        "system and less the gateway's own PSS; per core = one machine / its cores; the cluster is that many "
        "machines like this one, each with its own gateway (gateways share nothing, so it scales linearly).",
        sizing_table(rows),
        "### Failures",
        failure_list(steps + reference),
    ]
    return "\n\n".join(parts) + "\n"


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120, help="seconds of workload per step (default 120)")
    parser.add_argument("--steps", type=int, nargs="+", help="the Ns to run, in order (default 1, 2, 4, ...)")
    parser.add_argument("--max-kernels", type=int, default=64, help="the ramp's last N at most (default 64)")
    parser.add_argument("--bound-factor", type=float, default=3.0, help="CPU cell p99 / its p50 at N=1 (default 3)")
    parser.add_argument("--think", type=float, default=1.0, help="mean pause before a cell, seconds (default 1)")
    parser.add_argument("--cell-timeout", type=float, default=2.0, help="the kernels' cell_timeout (default 2)")
    parser.add_argument("--cpu-iterations", type=int, default=1_000_000, help="of the CPU cell's loop")
    parser.add_argument("--print-lines", type=int, default=20, help="lines of the print cell")
    parser.add_argument("--spare-sandbox", choices=["auto", "True", "False"], default="auto")
    parser.add_argument("--rest", type=float, default=10, help="seconds over which CPU at rest is measured")
    parser.add_argument("--cell-bound", type=float, default=120, help="a cell taking longer loses its client")
    parser.add_argument("--start-timeout", type=float, default=300, help="for a kernel's start, seconds")
    parser.add_argument("--reserve-mib", type=float, default=1024, help="RAM left to the system (default 1024)")
    parser.add_argument("--nodes", type=int, default=100, help="machines in the sizing table's cluster")
    parser.add_argument("--no-reference", dest="reference", action="store_false", help="skip ipykernel's steps")
    parser.add_argument("--output", type=Path, default=BENCH / "RESULTS.md")
    args = parser.parse_args(argv)
    problems = [
        f"--{name.replace('_', '-')} must be more than 0, got {getattr(args, name)}"
        for name in ("duration", "think", "cell_timeout", "cpu_iterations", "print_lines", "rest", "cell_bound",
                     "start_timeout", "max_kernels", "nodes", "bound_factor")
        if getattr(args, name) <= 0
    ]  # fmt: skip
    problems += [f"--steps must all be more than 0, got {n}" for n in args.steps or [] if n <= 0]
    if args.cell_bound <= args.cell_timeout:
        problems.append(f"--cell-bound ({args.cell_bound:g}) must be more than --cell-timeout ({args.cell_timeout:g})")
    if problems:
        parser.error("; ".join(problems))
    workload = Workload(args.print_lines, args.cpu_iterations, args.cell_timeout, args.think)
    settings = Settings(
        workload, args.duration, args.rest, args.cell_bound, args.start_timeout, args.spare_sandbox, args.reserve_mib
    )
    return args, settings


def kernel_config(settings: Settings) -> str:
    """The gateway machine's sandbox_kernel_config.py."""
    spare = settings.spare_sandbox if settings.spare_sandbox != "auto" else "'auto'"
    return (
        f"c.SandboxKernel.cell_timeout = {settings.workload.cell_timeout!r}\n"
        "c.SandboxKernel.skills = ['TimeSkill']\n"
        f"c.SandboxKernel.spare_sandbox = {spare}\n"
    )


def main() -> None:
    args, settings = parse()
    with tempfile.TemporaryDirectory(prefix="sandbox-load-") as folder:
        with kernel_gateway(Path(folder), kernel_config(settings)) as gateway:
            try:
                section = asyncio.run(load_test(args, settings, gateway))
            finally:
                log = gateway.log().splitlines()
                errors = [line for line in log if " ERROR " in line or "Traceback" in line]
                if errors:
                    print(f"the gateway logged {len(errors)} error line(s); the last:", *errors[-10:], sep="\n",
                          file=sys.stderr)  # fmt: skip
    print(section)
    args.output.write_text(replace_section(args.output.read_text() if args.output.exists() else "", HEADING, section))


if __name__ == "__main__":
    main()
