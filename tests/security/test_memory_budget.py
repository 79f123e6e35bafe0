"""One memory budget: wasm memory and the sandbox's in-memory files (MEMFS) together hold at most memory_limit_mb.

Promise (docs/security.md, "One memory budget"): a write or truncate of the sandbox's own files past the budget fails
with OSError(ENOSPC) that says what holds the memory and names the setting; Python's allocations past it raise
MemoryError; the kernel and every variable survive, the next cell runs, and the Deno process's RSS stays under
memory_limit_mb + OVERHEAD_MIB. Without the budget (the control: a guest that puts an unbudgeted write back into
MEMFS, which only the process's hard limits then stop) the same files go past the limit.
"""

from __future__ import annotations

import re

import pytest
from attack_kit import assert_alive, dump, error, result

from conftest import execute, start_kernel, stop_kernel
from test_memory import deno_of

LIMIT_MB = 256
OVERHEAD_MIB = 128  # docs/security.md: Deno, V8 and Pyodide's JS besides the budget (measured: 88-92 MiB)
ENOSPC = 51  # Emscripten's (and so the guest's errno.ENOSPC)
FULL = re.compile(
    r"\[Errno 51\] the sandbox's in-memory files are full: files hold (\d+) MiB and Python's memory (\d+) MiB of "
    rf"SandboxKernel\.memory_limit_mb={LIMIT_MB} \(delete files in /tmp or /home/pyodide, or raise the limit\)"
)
MEMORY_MESSAGE = (
    f"the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb={LIMIT_MB} MiB (raise it to allow more)"
)
MANY_FILES = "for i in range(30):\n    with open(f'/tmp/f{i}', 'wb') as f:\n        f.write(b'x' * 50_000_000)"
HUGE_FILE = "with open('/tmp/huge', 'wb') as f:\n    while True:\n        f.write(b'y' * 2**20)"
PYTHON_HOG = "hog = []\nwhile True:\n    hog.append(bytearray(2**20))"
CLEAN = "import os\nfor name in os.listdir('/tmp'):\n    os.remove('/tmp/' + name)\nhog = None"


def start() -> tuple[object, object]:
    return start_kernel(
        [
            f"--SandboxKernel.memory_limit_mb={LIMIT_MB}",
            "--SandboxKernel.cell_timeout=120",
            "--SandboxKernel.spare_sandbox=False",  # one Deno process: the one measured
        ]
    )


@pytest.fixture(scope="module")
def budgeted():
    km, kc = start()
    yield km, kc
    stop_kernel(km, kc)


def rss_mib(km) -> float:  # type: ignore[no-untyped-def]
    return deno_of(km).memory_info().rss / 2**20


def assert_files_full(run) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The cell failed with the budget's ENOSPC; what the message says the files and Python's memory hold."""
    ename, evalue = error(run)
    assert ename == "OSError", dump(run)[:2000]
    full = FULL.fullmatch(evalue)
    assert full, evalue
    files, wasm = int(full[1]), int(full[2])
    assert LIMIT_MB - 60 <= files + wasm <= LIMIT_MB, evalue  # stopped by the budget, near it (a write is <= 50 MB)
    return files, wasm


@pytest.mark.parametrize("fill", [MANY_FILES, HUGE_FILE], ids=["thirty-50-mb-files", "one-huge-file"])
def test_full_files_raise_enospc_and_keep_the_session(budgeted, fill):
    km, kc = budgeted
    assert execute(kc, "kept = 'defined before'").content["status"] == "ok"
    try:
        files, _ = assert_files_full(execute(kc, fill, timeout=240))
        assert files > 100  # the files got what Python's memory left of the budget
        assert result(execute(kc, "kept")) == "'defined before'"
        assert result(
            execute(kc, f"import os\nsum(os.path.getsize('/tmp/' + n) for n in os.listdir('/tmp')) < {LIMIT_MB} << 20")
        )
        assert rss_mib(km) < LIMIT_MB + OVERHEAD_MIB
    finally:
        assert execute(kc, CLEAN).content["status"] == "ok"
    assert_alive(kc)


def test_the_error_is_oserror_enospc_for_code_that_catches_it(budgeted):
    _, kc = budgeted
    code = (
        "import errno, os\ntry:\n    with open('/tmp/big', 'wb') as f:\n        while True:\n"
        "            f.write(b'z' * 2**20)\n"
        "except OSError as e:\n    caught = (type(e).__name__, e.errno == errno.ENOSPC, errno.ENOSPC)\n"
        "os.remove('/tmp/big')\ncaught"
    )
    assert result(execute(kc, code, timeout=120)) == f"('OSError', True, {ENOSPC})"


def test_a_truncate_past_the_budget_is_enospc(budgeted):
    _, kc = budgeted
    try:
        run = execute(kc, f"with open('/tmp/sparse', 'wb') as f:\n    f.truncate({LIMIT_MB + 1} * 2**20)")
        assert_files_full_or_bigger(run)
        assert result(execute(kc, "import os\nos.path.getsize('/tmp/sparse')")) == "0"
    finally:
        execute(kc, CLEAN)


def assert_files_full_or_bigger(run) -> None:  # type: ignore[no-untyped-def]
    """A single change larger than the whole budget: the same message, whatever the budget holds."""
    ename, evalue = error(run)
    assert ename == "OSError" and FULL.fullmatch(evalue), evalue


@pytest.mark.parametrize("first", ["files", "python"])
def test_files_and_python_share_one_budget(budgeted, first):
    """Filled in either order, the second finds what the first left; the RSS stays under the limit + overhead."""
    km, kc = budgeted
    try:
        if first == "files":
            files, _ = assert_files_full(execute(kc, HUGE_FILE, timeout=240))
            ename, evalue = error(execute(kc, PYTHON_HOG, timeout=240))
            held = re.fullmatch(
                rf"{re.escape(MEMORY_MESSAGE)}; the sandbox's in-memory files hold (\d+) MiB of it \(delete files in "
                r"/tmp or /home/pyodide to free it\)",
                evalue,
            )
            assert ename == "MemoryError" and held, evalue
            assert abs(int(held[1]) - files) <= 1
        else:
            assert error(execute(kc, PYTHON_HOG, timeout=240)) == ("MemoryError", MEMORY_MESSAGE)
            execute(kc, "hog = None")  # wasm memory never shrinks: its pages stay the interpreter's
            files, wasm = assert_files_full(execute(kc, HUGE_FILE, timeout=240))
            assert wasm > LIMIT_MB - 60 and files < 60
        assert rss_mib(km) < LIMIT_MB + OVERHEAD_MIB
    finally:
        execute(kc, CLEAN, timeout=120)
    assert_alive(kc)


# A guest that tampers with the JS side: MEMFS's write replaced by one that takes storage from no budget.
UNBUDGETED = (
    "import pyodide_js, pyodide.code\n"
    "pyodide.code.run_js('''(MEMFS) => { MEMFS.ops_table.file.stream.write = (stream, buffer, offset, length, at) => {"
    " const node = stream.node; const end = at + length;"
    " if (node.contents.length < end) { const c = new Uint8Array(end); c.set(node.contents.subarray(0, node.usedBytes));"
    " node.contents = c; }"
    " node.contents.set(buffer.subarray(offset, offset + length), at);"
    " node.usedBytes = Math.max(node.usedBytes, end); return length; } }''')(pyodide_js.FS.filesystems.MEMFS)"
)


def test_control_without_the_budget_the_same_files_pass_the_limit():
    """The control: with MEMFS's write unbudgeted, the files of the test above pass memory_limit_mb (300 MB here,
    more than the 256 MiB limit; only RLIMIT_DATA, 1280 + 2 x 256 MiB, would stop them) and so does the RSS."""
    km, kc = start()
    try:
        assert execute(kc, UNBUDGETED).content["status"] == "ok"
        fill = "for i in range(6):\n    with open(f'/tmp/f{i}', 'wb') as f:\n        f.write(b'x' * 50_000_000)"
        run = execute(kc, fill, timeout=240)
        assert run.content["status"] == "ok", dump(run)[:2000]
        total = "import os\nsum(os.path.getsize('/tmp/' + n) for n in os.listdir('/tmp'))"
        assert result(execute(kc, total)) == "300000000"
        assert rss_mib(km) > LIMIT_MB + OVERHEAD_MIB
    finally:
        stop_kernel(km, kc)
