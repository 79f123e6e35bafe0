"""bench/remote_load.py's report: a table per step, memory per kernel per host, and the sizing taken from the largest
step that ran without a failure."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import remote_load
from remote_load import Outcome


def step(kernels: int, pss: dict[str, list[float]], failures: list[str] = ()) -> Outcome:  # type: ignore[assignment]
    """An outcome whose hosts' gates reported `pss` (host: its kernels' PSS) plus one kernel of another run."""
    out = Outcome(held=kernels - len(failures), failures=list(failures))
    out.started = [5.0 + i / 10 for i in range(kernels)]
    out.cells["cpu"] = [0.2, 0.3, 0.4]
    for host, values in pss.items():
        ids = [f"{host}-k{i}" for i in range(len(values))]
        out.kernel_ids += ids
        kernels_there = [{"kernel_id": k, "processes": 3, "pss_mib": v} for k, v in zip(ids, values, strict=True)]
        kernels_there.append({"kernel_id": "not-this-run", "processes": 3, "pss_mib": 999.0})
        out.memory[host] = {"kernels": kernels_there, "mem_available_mib": 6000, "mem_total_mib": 8192, "cpus": 2}
    return out


def test_the_sizing_comes_from_the_largest_step_without_a_failure():
    args = remote_load.parse(["--stand-in-hosts", "2", "--kernels", "2", "4"])
    clean = step(4, {"10.0.0.1": [180.0, 200.0], "10.0.0.2": [190.0, 190.0]})
    failed = step(
        8, {"10.0.0.1": [150.0] * 4, "10.0.0.2": [150.0] * 4}, failures=["client 3: the kernel did not start"]
    )
    text = remote_load.report(args, [(2, step(2, {"10.0.0.1": [210.0], "10.0.0.2": [210.0]})), (4, clean), (8, failed)],
                              "EG to 2 hosts")  # fmt: skip
    assert text.startswith(remote_load.HEADING + "\n")
    assert "2 then 4 then 8 at a time" in text
    assert "| 10.0.0.1 | 2 | 180, 200 | 190 | 6000 |" in text  # the other run's kernel is not counted
    assert "- client 3: the kernel did not start" in text
    sizing = text[text.index("### Sizing") :]
    assert "From the 4-kernel step (2 hosts, no failure)" in sizing and "(8192 MiB)" in sizing
    assert "| PSS per kernel, mean | 190 MiB |" in sizing
    assert "| kernels per GiB | 5.4 |" in sizing
    assert "| kernels a host holds by memory | 37 (18 per CPU, 2 CPUs) |" in sizing  # (8192 - 1024) / 190
    assert "| busy kernels held without a failure | 4 on 2 hosts (2 per host); CPU cell p50 / p99 300 / " in sizing


def test_no_sizing_is_given_when_every_step_failed_or_a_host_was_not_read():
    args = remote_load.parse(["--stand-in-hosts", "2"])
    unread = step(4, {"10.0.0.1": [180.0, 200.0]})
    unread.memory["10.0.0.2"] = {"error": "ssh exited 255"}
    text = remote_load.report(args, [(4, unread)], "EG")
    assert "| 10.0.0.2 | | could not be read: ssh exited 255 | | |" in text
    assert "No step ran without a failure with every host's memory read, so none is given." in text
