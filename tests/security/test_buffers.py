"""What the sandbox process holds for the guest outside wasm memory and its files (issue 33): pending output and the
shell's buffers. Each is bounded: past its bound the cell gets an error naming SandboxKernel.memory_limit_mb, the
variables survive, the next cell runs, and the Deno process's peak RSS stays bounded.

What cannot be bounded (a guest filling the worker's JS heap itself) ends the sandbox with a plain message.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from attack_kit import assert_alive, dump, error, result

from conftest import execute, sandbox_pids, start_kernel, stop_kernel

LIMIT_MB = 256
# The Deno process's peak RSS may pass what it was before the cell by this much while a flood or a shell run is under
# way (measured: floods ~70 MiB, the shell over 6 MB ~150 MiB). Before the bounds: a 600 MB output flood held
# ~160 MB/s more than the kernel read (crash at ~580 MiB, 10 s into a 2 GB flood), `tr` over an 8 MB file took the
# JS heap past 256 MiB (crash).
PEAK_GROWTH_MIB = 200
SHELL_MIB = LIMIT_MB // 64  # host_ts/shell_limits.ts: SHELL_SHARE
NAMED = (
    f"({SHELL_MIB} MiB: the sandbox's shell handles at most 1/64 of SandboxKernel.memory_limit_mb={LIMIT_MB} at once; "
    "raise that setting to allow more)"
)
DATA = "/tmp/data.csv"  # 8.3 MB of CSV lines (more than the shell reads), made by the fixture's first cell
SMALL = "/tmp/small.csv"  # 3.1 MB of them (less)
TOO_LARGE = (
    f"bash: {DATA}: the file is 7.9 MiB; the sandbox's shell reads at most {SHELL_MIB} MiB at once (1/64 of "
    f"SandboxKernel.memory_limit_mb={LIMIT_MB}; raise that setting to allow more, or read it in Python)\n"
)


@pytest.fixture(scope="module")
def limited():
    km, kc = start_kernel([f"--SandboxKernel.memory_limit_mb={LIMIT_MB}", "--SandboxKernel.cell_timeout=120"])
    made = execute(
        kc,
        f"for path, rows in (({DATA!r}, 200_000), ({SMALL!r}, 75_000)):\n"
        "    with open(path, 'w') as f:\n"
        "        f.writelines(f'row,{n},{n * 7 % 1000},some text here for the row\\n' for n in range(rows))\n"
        "kept = 'still here'",
    )
    assert made.content["status"] == "ok", dump(made)
    yield km, kc
    stop_kernel(km, kc)


def rss_mib(pid: int, field: str) -> float:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())[1]) / 1024


@pytest.fixture
def rss(limited):
    """The serving sandbox's peak RSS is reset before the test (clear_refs); the test may raise it by PEAK_GROWTH_MIB."""
    km, _ = limited
    pids = sandbox_pids(km.provisioner.process.pid)
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    return {pid: rss_mib(pid, "VmRSS") for pid in pids}


def assert_survived(km, kc, rss) -> None:  # type: ignore[no-untyped-def]
    """The variable made before is still there, the next cell runs, the sandbox's peak RSS stayed bounded."""
    assert result(execute(kc, "kept")) == "'still here'"
    assert_alive(kc)
    assert sandbox_pids(km.provisioner.process.pid)[: len(rss)] == list(rss), "the sandbox process changed"
    for pid, before in rss.items():
        assert rss_mib(pid, "VmHWM") - before < PEAK_GROWTH_MIB


# ---- pending output ---------------------------------------------------------------------------------------------


def test_an_output_flood_is_paced_to_the_kernel_not_held_by_the_sandbox(limited, rss):
    """600 MB written as fast as Python can: the supervisor holds at most 8 MiB for the socket, then the ring waits."""
    km, kc = limited
    run = execute(kc, "import sys\nfor i in range(600):\n    sys.stdout.write('x' * 10**6)", timeout=240)
    assert run.content["status"] == "ok", dump(run)[:1000]
    assert run.stream() == "x" * (10 << 20)
    assert run.stream("stderr") == (
        "\n[output truncated: this cell's output passed max_output_bytes=10485760 bytes; the rest is dropped. "
        "Raise the limit with SandboxKernel.max_output_bytes.]\n"
    )
    assert_survived(km, kc, rss)


def test_one_huge_print_crosses_into_the_worker_in_pieces(limited, rss):
    """print() of 120 MB: handed to JS whole, it took 120 MB of the JS heap plus a 360 MB encoding buffer (crash)."""
    km, kc = limited
    run = execute(kc, "print('y' * 120_000_000)", timeout=240)
    assert run.content["status"] == "ok", dump(run)[:1000]
    assert run.stream() == "y" * (10 << 20)
    assert_survived(km, kc, rss)


# ---- the shell --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "stderr", "status"),
    [
        (f"!tr a-z A-Z < {DATA} > /tmp/upper.csv", f"{TOO_LARGE}bash: {DATA}: No such file or directory\n", 1),
        (f"!sed s/row/ROW/ {DATA} > /tmp/rows.csv", f"{TOO_LARGE}sed: {DATA}: No such file or directory\n", 1),
        (f"!sort {DATA} > /tmp/sorted.csv", f"{TOO_LARGE}sort: {DATA}: No such file or directory\n", 1),
        (f"!cat {DATA}", f"{TOO_LARGE}cat: {DATA}: No such file or directory\n", 1),
        (f"!cat {SMALL} {SMALL} > /tmp/twice.csv", f"bash: cat: output size limit exceeded {NAMED}\n", 126),
        ("!printf '%05000000d' 0 | wc -c", f"bash: format width limit exceeded {NAMED}\n", 126),
    ],
    ids=["tr", "sed", "sort", "cat-to-the-cell", "output", "string"],
)
def test_a_shell_run_past_its_share_of_memory_fails_as_bash_does_naming_the_setting(limited, rss, cell, stderr, status):
    """tr, sed and sort over the 8.3 MB file ended the sandbox (V8's heap full) before the shell's limits."""
    km, kc = limited
    run = execute(kc, cell, timeout=240)
    assert run.content["status"] == "ok", dump(run)[:1000]
    assert run.stream("stderr") == stderr
    assert result(execute(kc, "_exit_code")) == str(status)
    assert_survived(km, kc, rss)


def test_captured_shell_output_past_the_limit_is_an_error_in_the_list(limited, rss):
    km, kc = limited
    error_line = f"bash: cat: output size limit exceeded {NAMED}"
    run = execute(kc, f"lines = !cat {SMALL} {SMALL}\nlen(lines) == 1, lines[-1] == {error_line!r}, _exit_code")
    assert result(run) == "(True, True, 126)"
    assert_survived(km, kc, rss)


def test_shell_input_too_large_for_the_shell_is_a_memory_error_naming_the_setting(limited, rss):
    """stdin (with the script and environment) crosses into the worker's JS heap whole: refused before it does."""
    km, kc = limited
    run = execute(kc, "import subprocess\nsubprocess.run(['wc', '-c'], input=b'z' * 5_000_000, capture_output=True)")
    ename, evalue = error(run)
    assert ename == "MemoryError"
    assert re.fullmatch(
        r"the shell command's script, environment and stdin take 4\.8 MiB; the sandbox's shell takes at most 4 MiB "
        rf"at once \(its share of SandboxKernel\.memory_limit_mb={LIMIT_MB}; raise that setting to allow more\)",
        evalue,
    ), evalue
    fits = execute(kc, "subprocess.run(['wc', '-c'], input=b'z' * 3_000_000, capture_output=True).stdout")
    assert result(fits) == "b'3000000\\n'"
    assert_survived(km, kc, rss)


# ---- the worker's JS heap, filled by the guest itself: not bounded, but said plainly ---------------------------


def test_filling_the_js_heap_from_python_restarts_the_sandbox_saying_what_was_lost(limited):
    _, kc = limited
    run = execute(
        kc, "import js\na = js.Array.new()\nwhile True:\n    a.push('x' * 10**5 + str(a.length))", timeout=240
    )
    assert error(run) == (
        "SandboxRestarted",
        f"the sandbox ran out of memory (SandboxKernel.memory_limit_mb={LIMIT_MB}; raise it to allow more); "
        "the sandbox was restarted and all variables were lost.",
    )
    assert execute(kc, "kept").content["ename"] == "NameError"
    assert_alive(kc)
