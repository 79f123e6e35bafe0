"""A load test through any gateway URL (Kernel Gateway or Enterprise Gateway, here or on other machines), with the
memory of each kernel on each SSH host.

Usage: python bench/remote_load.py --gateway-url URL [--token-env NAME] [--kernel-name NAME] [--gateway-env K=V ...]
           [--kernels N [N ...]] [--duration S] [--ssh-host HOST ...] [--ssh-user U] [--identity F] [--known-hosts F]
           [--output PATH | --print]
       python bench/remote_load.py --stand-in-hosts 2 [...]   # EG 3.3.0 and two hosts made here (root; see below)

For each N of --kernels in turn (a step), N clients (one AsyncSandbox(gateway_url=...) each) start their kernels at
once, hold them, and loop bench/load_cells.py's workload for --duration seconds: print, CPU and error cells and a
sleep the client interrupts (no skill cell: a remote host's kernels have that host's settings). Then each
--ssh-host is asked through the gate (`sandbox-kernel eg-ssh`'s `memory`, with EG's key: docs/enterprise-gateway.md)
for the PSS of each of its kernels, and the kernels are shut down before the next step. The report (per step:
kernels held, cells, failures, latency percentiles, starts, memory per kernel per host; then the sizing the largest
step without a failure gives) replaces the section '## Load behind a remote gateway' of bench/RESULTS.md, or goes
to --output.

--stand-in-hosts N makes what tests/test_multi_host.py makes: N hosts from network namespaces with sshd on a private
range, and EG 3.3.0 (its own venv, tests/eg_server.py) starting kernels on them over SSH, then runs against it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]

from load_cells import Session, Workload  # noqa: E402
from load_report import Latency  # noqa: E402
from run import replace_section  # noqa: E402
from sandbox_kernel.client.agent import AsyncSandbox  # noqa: E402
from sandbox_kernel.enterprise_gateway.host_check import run_ssh, ssh_options  # noqa: E402
from sandbox_kernel.enterprise_gateway.ssh_gate import MEMORY  # noqa: E402

HEADING = "## Load behind a remote gateway"
CELL_BOUND = 120.0  # a cell taking longer loses its client
START_BOUND = 300.0  # for a kernel's start


@dataclass
class Outcome:
    started: list[float] = field(default_factory=list)  # launch to the setup cell's answer, per kernel
    cells: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)
    held: int = 0  # kernels held through the whole workload
    memory: dict[str, dict[str, object]] = field(default_factory=dict)  # host: its gate's memory report
    kernel_ids: list[str] = field(default_factory=list)
    settled: int = 0  # clients whose start has succeeded or failed
    all_settled: asyncio.Event = field(default_factory=asyncio.Event)
    memory_read: asyncio.Event = field(default_factory=asyncio.Event)  # the clients hold their kernels until then

    def start_settled(self, clients: int) -> None:
        self.settled += 1
        if self.settled == clients:
            self.all_settled.set()


async def client(
    index: int, clients: int, options: dict[str, object], workload: Workload, seconds: float, out: Outcome
) -> None:
    """One client: start a kernel, then its cells until `seconds` pass; what happened goes into `out`."""
    session = Session(workload, seed=index)
    t0 = time.perf_counter()
    sandbox: AsyncSandbox | None = None
    try:
        sandbox = AsyncSandbox(**options)  # type: ignore[arg-type]
        await asyncio.wait_for(sandbox.start(), START_BOUND)
        first = await asyncio.wait_for(sandbox.run(session.setup_code()), START_BOUND)
    except Exception as exc:
        out.failures.append(f"client {index}: the kernel did not start: {type(exc).__name__}: {exc}"[:500])
        if sandbox is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sandbox.close(), 60)
        return
    finally:
        out.start_settled(clients)
    out.started.append(time.perf_counter() - t0)
    if (wrong := session.check_setup(first)) is not None:
        out.failures.append(f"client {index}, setup: {wrong}")
    out.kernel_ids.append(sandbox.kernel.kernel_id)  # type: ignore[union-attr]
    deadline, lost = time.monotonic() + seconds, False
    try:
        while time.monotonic() < deadline:
            await asyncio.sleep(session.think())  # an agent's pause between cells, not a synchronisation
            plan = session.next_cell()
            t1 = time.perf_counter()
            try:
                result = await asyncio.wait_for(sandbox.run(plan.code, timeout=plan.client_timeout), CELL_BOUND)
            except Exception as exc:
                out.failures.append(f"client {index}, {plan.kind} cell: {type(exc).__name__}: {exc}"[:500])
                lost = True
                break
            out.cells[plan.kind].append(time.perf_counter() - t1)
            if (wrong := plan.check(result)) is not None:
                out.failures.append(f"client {index}, {plan.kind} cell: {wrong}"[:500])
        if not lost:
            out.held += 1
        await out.memory_read.wait()  # set by measure() once every host answered: the kernels are still up
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(sandbox.close(), 60)


def host_memory(host: str, user: str | None, options: list[str]) -> dict[str, object]:
    """The gate's memory report of one host (or what went wrong)."""
    status, out, err = run_ssh(host, MEMORY, user, options, 60)
    if status != 0:
        return {"error": (out + err).strip()[-300:] or f"ssh exited {status}"}
    try:
        return dict(json.loads(out))
    except (ValueError, TypeError):
        return {"error": f"not the gate's memory report: {out[:200]!r}"}


async def measure(args: argparse.Namespace, kernels: int, options: dict[str, object]) -> Outcome:
    out = Outcome()
    workload = Workload(cpu_iterations=args.cpu_iterations, cell_timeout=args.interrupt_after,
                        think_seconds=args.think, kernel_timeout=False, skill=False)  # fmt: skip
    tasks = [asyncio.create_task(client(i, kernels, options, workload, args.duration, out))
             for i in range(kernels)]  # fmt: skip
    await out.all_settled.wait()  # every start has succeeded or failed; the clients hold theirs until memory_read
    ssh = ssh_options(args.identity, args.known_hosts)
    for host in args.ssh_host:
        out.memory[host] = await asyncio.to_thread(host_memory, host, args.ssh_user, ssh)
    out.memory_read.set()
    await asyncio.gather(*tasks)
    return out


def our_kernels(out: Outcome) -> dict[str, list[float]]:
    """Host: the PSS (MiB) of each of this step's kernels there, as its gate reported them."""
    ours = set(out.kernel_ids)
    return {host: [float(k["pss_mib"]) for k in found["kernels"] if k["kernel_id"] in ours]  # type: ignore[attr-defined]
            for host, found in out.memory.items() if "error" not in found}  # fmt: skip


def step_rows(args: argparse.Namespace, kernels: int, out: Outcome) -> list[str]:
    """One step's report: its outcome, its latencies, and memory per kernel per host."""
    lines = [
        f"### {kernels} kernels", "",
        "| | |", "| --- | --- |",
        f"| kernels held to the end | {out.held} of {kernels} |",
        f"| cells run | {sum(len(v) for v in out.cells.values())} |",
        f"| failures | {len(out.failures)} |",
    ]  # fmt: skip
    if started := Latency.of(out.started):
        lines.append(f"| start to first result, p50 / p90 / p99 | {started.shown()} ms |")
    for kind, seconds in sorted(out.cells.items()):
        if latency := Latency.of(seconds):
            lines.append(f"| {kind} cell, p50 / p90 / p99 ({latency.count} cells) | {latency.shown()} ms |")
    if out.memory:
        lines += ["", "| host | this step's kernels | PSS per kernel (MiB), each | mean | host memory available meanwhile (MiB) |",
                  "| --- | ---: | --- | ---: | ---: |"]  # fmt: skip
        each_of = our_kernels(out)
        for host, found in out.memory.items():
            if "error" in found:
                lines.append(f"| {host} | | could not be read: {found['error']} | | |")
                continue
            each = each_of[host]
            mean = f"{sum(each) / len(each):.0f}" if each else ""
            lines.append(f"| {host} | {len(each)} | {', '.join(f'{v:.0f}' for v in each)} | {mean} | "
                         f"{found['mem_available_mib']} |")  # fmt: skip
    if out.failures:
        lines += ["", "Failures:", *(f"- {f}" for f in out.failures[:20])]
    return lines


def sizing_rows(steps: list[tuple[int, Outcome]]) -> list[str]:
    """What the largest step without a failure (and with every host's memory read) says a host holds."""
    clean = [(n, out) for n, out in steps if not out.failures and out.memory and our_kernels(out)
             and all("error" not in found for found in out.memory.values())]  # fmt: skip
    if not clean:
        return ["### Sizing", "", "No step ran without a failure with every host's memory read, so none is given."]
    kernels, out = max(clean, key=lambda step: step[0])
    each = [v for values in our_kernels(out).values() for v in values]
    mean = sum(each) / len(each)
    total = min(int(found["mem_total_mib"]) for found in out.memory.values())  # type: ignore[call-overload]
    cpus = min(int(found["cpus"]) for found in out.memory.values())  # type: ignore[call-overload]
    hosts = len(out.memory)
    idle = int((total - 1024) / mean)
    cpu = Latency.of(out.cells.get("cpu", []))
    return [
        "### Sizing", "",
        f"From the {kernels}-kernel step ({hosts} hosts, no failure): the mean PSS of its {len(each)} kernels, and the "
        f"hosts' memory ({total} MiB) less 1 GiB for the system.", "",
        "| | |", "| --- | --- |",
        f"| PSS per kernel, mean | {mean:.0f} MiB |",
        f"| kernels per GiB | {1024 / mean:.1f} |",
        f"| kernels a host holds by memory | {idle} ({idle / max(cpus, 1):.0f} per CPU, {cpus} CPUs) |",
        f"| busy kernels held without a failure | {kernels} on {hosts} hosts ({kernels / hosts:g} per host)"
        + (f"; CPU cell p50 / p99 {1000 * cpu.p50:.0f} / {1000 * cpu.p99:.0f} ms" if cpu else "") + " |",
    ]  # fmt: skip


def report(args: argparse.Namespace, steps: list[tuple[int, Outcome]], where: str) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING, "",
        f"`bench/remote_load.py` ({when}): kernels of `{args.kernel_name}` through {where}, "
        f"{' then '.join(str(n) for n, _ in steps)} at a time, each step's started at once and held for "
        f"{args.duration:g} s of cells (think time {args.think:g} s; a sleep the client interrupts after "
        f"{args.interrupt_after:g} s).", "",
    ]  # fmt: skip
    for kernels, out in steps:
        lines += [*step_rows(args, kernels, out), ""]
    lines += sizing_rows(steps)
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def stand_in(count: int, folder: Path) -> Iterator[tuple[dict[str, object], list[str], dict[str, str]]]:
    """EG 3.3.0 with `count` hosts made here (tests/ssh_hosts.py, tests/eg_server.py): client options, the hosts'
    addresses, and the SSH settings for their gates."""
    import ssh_hosts
    from eg_server import gate_options, installed, ssh_gateway

    if why := ssh_hosts.unavailable():
        raise SystemExit(f"--stand-in-hosts: {why}")
    with ssh_hosts.ssh_hosts(folder / "hosts", count, gate_options(folder / "remote-logs")) as hosts:
        with ssh_gateway(folder / "eg", installed(), hosts) as gateway:
            ssh = {"identity": str(hosts.client_key), "known_hosts": str(hosts.known_hosts), "user": "root"}
            yield gateway.client_options(), [h.address for h in hosts.hosts], ssh


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway-url", help="the gateway's URL (http://host:port)")
    parser.add_argument("--token-env", default="SANDBOX_KERNEL_GATEWAY_TOKEN", help="the variable holding its token")
    parser.add_argument("--kernel-name", default="pyodide-sandbox", help="the kernelspec to start")
    parser.add_argument("--gateway-env", action="append", default=[], metavar="K=V",
                        help="a variable for each kernel's start (Enterprise Gateway: KERNEL_USERNAME=...)")  # fmt: skip
    parser.add_argument("--kernels", type=int, nargs="+", default=[4],
                        help="clients, each holding one kernel; several: one step each, in turn (default 4)")  # fmt: skip
    parser.add_argument("--duration", type=float, default=60, help="seconds of cells (default 60)")
    parser.add_argument("--think", type=float, default=1.0, help="mean pause before a cell, seconds (default 1)")
    parser.add_argument("--interrupt-after", type=float, default=2.0, help="the sleep cell's client timeout")
    parser.add_argument("--cpu-iterations", type=int, default=1_000_000, help="of the CPU cell's loop")
    parser.add_argument("--ssh-host", action="append", default=[], help="a kernel host whose memory is read")
    parser.add_argument("--ssh-user", help="the user EG logs in as there")
    parser.add_argument("--identity", help="EG's private key")
    parser.add_argument("--known-hosts", help="a known_hosts file with the hosts' keys")
    parser.add_argument("--stand-in-hosts", type=int, help="make EG and this many hosts here (root)")
    parser.add_argument("--output", type=Path, default=BENCH / "RESULTS.md", help="the report's file")
    parser.add_argument("--print", action="store_true", help="print the report instead of writing it")
    args = parser.parse_args(argv)
    if not args.gateway_url and not args.stand_in_hosts:
        parser.error("give --gateway-url, or --stand-in-hosts N")
    if min(args.kernels) < 1:
        parser.error(f"--kernels {' '.join(map(str, args.kernels))}: each at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with contextlib.ExitStack() as stack:
        if args.stand_in_hosts:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="remote-load-")))
            options, addresses, ssh = stack.enter_context(stand_in(args.stand_in_hosts, folder))
            args.ssh_host = args.ssh_host or addresses
            args.ssh_user, args.identity, args.known_hosts = ssh["user"], ssh["identity"], ssh["known_hosts"]
            args.kernel_name = str(options["kernel_name"])
            where = f"Enterprise Gateway 3.3.0 to {args.stand_in_hosts} SSH hosts made on this machine"
        else:
            token = os.environ.get(args.token_env)
            env = dict(item.split("=", 1) for item in args.gateway_env)
            options = {"gateway_url": args.gateway_url, "gateway_token": token, "kernel_name": args.kernel_name,
                       **({"gateway_env": env} if env else {})}  # fmt: skip
            where = f"the gateway at {args.gateway_url}"
        steps = []
        for kernels in args.kernels:
            steps.append((kernels, asyncio.run(measure(args, kernels, options))))
            print(f"{kernels} kernels: {steps[-1][1].held} held, {len(steps[-1][1].failures)} failures", flush=True)
    text = report(args, steps, where)
    if args.print:
        print(text)
    else:
        previous = args.output.read_text() if args.output.exists() else "# Benchmark results\n"
        args.output.write_text(replace_section(previous, HEADING, text))
        print(f"wrote '{HEADING}' in {args.output}")
    return 1 if any(out.failures for _, out in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
