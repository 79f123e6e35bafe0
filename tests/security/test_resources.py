"""Resource attacks: memory, output floods, recursion, and a flood of Deno's own stdout.

Promise: memory_limit_mb caps the sandbox (wasm memory and the in-memory files together, and the JS heap: see
test_memory_budget.py for the files); Python sees a MemoryError that names the setting, also for sizes 32-bit
WebAssembly cannot address; a JS heap exhaustion restarts the sandbox with a clear message;
one cell sends at most max_output_bytes to the frontend plus a notice; the kernel always answers.
"""

from __future__ import annotations

import queue
import re
from pathlib import Path

import pytest
from attack_kit import assert_alive, assert_refused, attack, dump, error, js_cell, result

from conftest import execute, start_kernel, stop_kernel
from test_lifecycle import sandbox_pids

LIMIT_MB = 512


@pytest.fixture(scope="module")
def limited():
    km, kc = start_kernel([f"--SandboxKernel.memory_limit_mb={LIMIT_MB}", "--SandboxKernel.cell_timeout=60"])
    yield km, kc
    stop_kernel(km, kc)


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


# ---- memory -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "hog = bytearray(2**30)",
        "hog = [bytearray(64 * 2**20) for _ in range(64)]",
        "hog = 'x' * (2**31 - 64)",
        "hog = list(range(10**9))",
    ],
    ids=["one-gib", "many-chunks", "huge-str", "huge-list"],
)
def test_python_allocations_past_the_limit_raise_memory_error_naming_it(limited, code):
    _, kc = limited
    run = attack(kc, code)
    assert_refused(run, ["MemoryError"], f"memory_limit_mb={LIMIT_MB}")
    assert execute(kc, "'hog' in dir()").of_type("execute_result")[0]["data"]["text/plain"] == "False"


MEMORY_MESSAGE = (
    f"the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb={LIMIT_MB} MiB (raise it to allow more)"
)


@pytest.mark.parametrize("size", ["3 * 2**30", "8 * 2**30", "2**31"], ids=["3-gib", "8-gib", "2-gib"])
def test_sizes_wasm32_cannot_address_raise_memory_error_naming_the_limit(limited, size):
    """32-bit WebAssembly's Py_ssize_t cannot hold 2**31 or more: CPython raises OverflowError('cannot fit 'int' into
    an index-sized integer') before any allocation, where a 64-bit build raises MemoryError; the cell shows that."""
    _, kc = limited
    run = attack(kc, f"hog = bytearray({size})")
    assert error(run) == (
        "MemoryError",
        f"{MEMORY_MESSAGE}; no size or count of 2**31 or more fits its 32-bit (wasm32) memory at all",
    )


def test_just_over_the_limit_raises_the_memory_error(limited):
    _, kc = limited
    run = attack(kc, f"hog = bytearray({LIMIT_MB + 1} * 2**20)")
    assert error(run) == ("MemoryError", MEMORY_MESSAGE)


def test_other_overflow_errors_are_left_as_they_are(limited):
    """Only the one OverflowError of sizes is shown as MemoryError; an index is still an IndexError, and other
    OverflowErrors keep their own message."""
    _, kc = limited
    assert error(execute(kc, "[1][2**40]")) == ("IndexError", "cannot fit 'int' into an index-sized integer")
    assert error(execute(kc, "import math\nmath.exp(1000)")) == ("OverflowError", "math range error")


def test_js_heap_exhaustion_restarts_the_sandbox_with_a_clear_message(limited):
    km, kc = limited
    execute(kc, "lost = 1")
    run = attack(kc, js_cell("const a = []; while (true) a.push(new Array(1e6).fill(1))"), timeout=120)
    ename, evalue = error(run)
    assert ename == "SandboxRestarted", evalue
    assert "out of memory" in evalue and f"memory_limit_mb={LIMIT_MB}" in evalue and "restarted" in evalue
    assert execute(kc, "lost").content["ename"] == "NameError"
    assert 1 <= len(sandbox_pids(km.provisioner.process.pid)) <= 2  # current (+ pre-warmed spare)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("let s = 'x'; while (true) s += s;", "RangeError: Invalid string length"),
        (
            "const m = new WebAssembly.Memory({initial: 1, maximum: 65536}); m.grow(65535); return m.buffer.byteLength",
            "RangeError: WebAssembly.Memory.grow(): Unable to grow instance memory",
        ),
    ],
    ids=["string-doubling", "wasm-memory-grow"],
)
def test_single_huge_js_allocations_fail_cleanly(limited, body, message):
    _, kc = limited
    run = attack(kc, js_cell(body))
    assert_refused(run, ["JsException"], message)


def test_array_buffers_cannot_exceed_the_memory_limit(limited):
    """1.5 GiB of filled ArrayBuffers (outside wasm memory and the V8 heap) with memory_limit_mb=512: the OS
    limit on the process's data (sandbox.data_limit_mb) makes an allocation fail before they all exist."""
    _, kc = limited
    body = (
        "globalThis.__hog = [];"
        " for (let i = 0; i < 6; i++) { const b = new ArrayBuffer(256 * 2 ** 20); new Uint8Array(b).fill(1);"
        " __hog.push(b); } return __hog.length"
    )
    try:
        run = execute(kc, js_cell(body), timeout=120)
        assert_refused(run, ["JsException"], "RangeError: Array buffer allocation failed")
    finally:
        execute(kc, "import js\njs.Deno.exit(0)", timeout=60)  # give the memory back
        assert_alive(kc)


# ---- output floods ---------------------------------------------------------------------------------

FLOODS = {
    "stdout-lines": "for i in range(200):\n    print('x' * (2**20 - 1))",
    "stderr-lines": "import sys\nfor i in range(200):\n    print('y' * (2**20 - 1), file=sys.stderr)",
    "one-80-mib-write": "import sys\nsys.stdout.write('z' * (80 * 2**20))",
    "display-data": "from IPython.display import HTML, display\nfor i in range(40):\n    display(HTML('<b>' + 'h' * 2**20 + '</b>'))",
}


@pytest.mark.parametrize("how", list(FLOODS))
def test_output_floods_are_cut_at_max_output_bytes(limited, how):
    _, kc = limited
    run = execute(kc, FLOODS[how], timeout=240)
    assert run.content["status"] == "ok", dump(run)[:1000]
    sizes = sum(len(str(m["content"]).encode()) for m in run.outputs)
    assert sizes <= (10 << 20) + (1 << 20), f"{sizes} bytes reached the frontend"
    stderr = run.stream("stderr")
    assert "output truncated" in stderr and "max_output_bytes=10485760" in stderr
    assert_alive(kc)


def test_output_under_the_limit_is_complete(limited):
    """Sanity: 1 MiB of output arrives whole, without a notice."""
    _, kc = limited
    run = execute(kc, "for i in range(1024):\n    print('%1023d' % i)")
    assert len(run.stream()) == 1024 * 1024
    assert "truncated" not in run.stream("stderr")


# ---- recursion ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "ename", "message"),
    [
        ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError", "maximum recursion depth exceeded"),
        (js_cell("function f() { return f() + 1 } return f()"), "JsException", "RangeError: Maximum call stack size"),
    ],
    ids=["python", "js"],
)
def test_infinite_recursion_is_an_error(limited, code, ename, message):
    _, kc = limited
    run = attack(kc, code, timeout=120)
    assert_refused(run, [ename], message)


@pytest.fixture(scope="module")
def untimed():
    """memory_limit_mb as above, but no cell_timeout: only the overflow itself ends these cells."""
    km, kc = start_kernel([f"--SandboxKernel.memory_limit_mb={LIMIT_MB}"])
    yield km, kc
    stop_kernel(km, kc)


@pytest.mark.parametrize(
    "code",
    [
        "import sys\nsys.setrecursionlimit(10**7)\ndef g(n):\n    return g(n + 1)\ng(0)",
        "import json\nx = []\nfor _ in range(200000):\n    x = [x]\njson.dumps(x)",
    ],
    ids=["python-limit-raised", "json-nesting"],
)
def test_recursion_past_the_js_stack_is_a_clean_restart(untimed, code):
    """The interpreter's recursion overflows the worker's JS stack: the sandbox crashes and is restarted.

    It takes about a second here; a raised recursion limit was once seen to recurse for 30-60 s first, which
    is why this kernel has no cell_timeout (that would turn the same crash into a SandboxTimeout).
    """
    _, kc = untimed
    run = attack(kc, code, timeout=240)
    assert_refused(
        run,
        ["SandboxRestarted"],
        "the sandbox crashed: sandbox worker error: Uncaught (in promise) RangeError: Maximum call stack size "
        "exceeded; the sandbox was restarted and all variables were lost.",
    )


# ---- Deno's own stdout: only logged, never read as protocol -- and never able to block the kernel ---


def test_flooding_deno_stdout_cannot_wedge_the_kernel():
    """A 100 kB line, then 64 MB, on Deno's own stdout (which the kernel only logs): the kernel keeps answering.

    The kernel drains that pipe, so the flood ends in about a second; were the pipe left full, Deno's writes
    would block the worker until cell_timeout stopped the cell (SandboxTimeout: the test fails).
    """
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=30", "--SandboxKernel.interrupt_grace=1"])
    try:
        assert execute(kc, "import js\njs.console.log('A' * 100_000)").content["status"] == "ok"
        try:
            run = execute(kc, "import js\nfor i in range(64):\n    js.console.log('B' * 1_000_000)\n'done'", timeout=90)
        except queue.Empty:
            pytest.fail("the kernel never answered the flooding cell")
        assert result(run) == "'done'", dump(run)[:1000]
        assert result(execute(kc, "1+1", timeout=60)) == "2"
    finally:
        stop_kernel(km, kc)
