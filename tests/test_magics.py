"""No magic can hang: every line and cell magic %lsmagic lists answers, within seconds, with harmless input."""

from __future__ import annotations

import json
import time

import pytest

from conftest import execute, ipykernel_control, start_kernel, stop_kernel, value

ANSWER_WITHIN = 20.0  # seconds for one magic (measured: well under a second each, %timeit ~2 s)
NEED_A_PROCESS = ("python2", "pypy", "perl", "ruby")  # %%python and %%python3 run in the sandbox (test_shell.py)
# Harmless arguments where an empty line would do nothing useful (or would ask a question).
LINE_ARGS = {"reset": "-f", "reset_selective": "-f nothing_matches_this", "timeit": "-n1 -r1 pass", "time": "pass",
             "prun": "-q pass", "logstart": "-q /tmp/sbk-magic-log.py", "cd": "/tmp", "pushd": "/tmp",
             "run": "-m this", "doctest_mode": "", "macro": "m 1", "store": "-z"}  # fmt: skip
CELL_BODY = {"code_wrap": "__code__"}  # the identity template: later cells run as they are
CELL_ARGS = {
    "writefile": "/tmp/sbk-magic-file.txt",
    "timeit": "-n1 -r1",
    "capture": "captured",
    "file": "/tmp/f.txt",
}


LIST_MAGICS = (
    "import json\nprint(json.dumps({k: sorted(v) for k, v in get_ipython().magics_manager.lsmagic().items()}))"
)


@pytest.fixture
def magics():
    """A fresh kernel for each walk: line magics such as %doctest_mode or %autocall change how later cells run."""
    km, kc = start_kernel()
    assert "Available line magics" in execute(kc, "%lsmagic").of_type("execute_result")[0]["data"]["text/plain"]
    listed = json.loads(execute(kc, LIST_MAGICS).stream())
    yield kc, listed
    stop_kernel(km, kc)


def answered(kc, code: str):
    t0 = time.monotonic()
    run = execute(kc, code, timeout=ANSWER_WITHIN + 10, allow_stdin=False)  # as nbclient and agents run cells
    took = time.monotonic() - t0
    assert took < ANSWER_WITHIN, f"{code!r} took {took:.1f} s"
    return run


def test_lsmagic_lists_what_we_walk(magics):
    _, listed = magics
    assert len(listed["line"]) > 50 and len(listed["cell"]) > 10, listed


def test_every_line_magic_answers(magics):
    kc, listed = magics
    for name in sorted(listed["line"]):
        if name in ("exit", "quit", "Exit", "Quit"):
            continue  # asks the frontend to end the session: tested in test_lifecycle
        run = answered(kc, f"%{name} {LINE_ARGS.get(name, '')}")
        if name in NEED_A_PROCESS:
            assert run.content.get("ename") == "ShellUnavailableError", (name, run.content)
    assert execute(kc, "1+1").of_type("execute_result"), "the kernel no longer answers"


def test_every_cell_magic_answers_and_none_starts_a_process(magics):
    kc, listed = magics
    for name in sorted(listed["cell"]):
        run = answered(kc, f"%%{name} {CELL_ARGS.get(name, '')}\n{CELL_BODY.get(name, 'x = 1')}\n")
        if name in NEED_A_PROCESS:
            assert run.content.get("ename") == "ShellUnavailableError", (name, run.content)
            run = answered(kc, f"%%{name}\nx = 1\n")  # a second use once hung (lazily registered magics)
            assert run.content.get("ename") == "ShellUnavailableError", (name, run.content)
    assert execute(kc, "1+1").of_type("execute_result"), "the kernel no longer answers"


IPYKERNEL_ONLY = {"subshell"}  # ipykernel 7's subshells: the sandbox serves one request at a time


def test_ipykernels_own_magics_are_here_as_well(magics):
    """ipykernel adds line magics to IPython's (%clear, %less, %autosave, ... and %store, its default extension):
    all are here but IPYKERNEL_ONLY, as ipykernel (the control, in the same test) lists them."""
    _, listed = magics
    with ipykernel_control() as client:
        ipykernel = json.loads(execute(client, LIST_MAGICS).stream())
    assert set(ipykernel["line"]) - set(listed["line"]) == IPYKERNEL_ONLY
    assert set(ipykernel["cell"]) - set(listed["cell"]) == set()


def test_ipykernels_magics_do_what_they_do_there(kc):
    """%less shows a file in the pager, %store keeps a value in the profile's store, %autosave and %clear print
    what ipykernel's print; %connect_info says where the connection file is instead of its key."""
    paged = execute(kc, "open('/tmp/n.txt', 'w').write('hello pager\\n')\n%less /tmp/n.txt")
    assert paged.content["payload"] == [{"source": "page", "data": {"text/plain": "hello pager\n"}, "start": 0}]
    stored = execute(kc, "x = [1]\n%store x\ndel x\n%store -r x\nx")
    assert (stored.stream(), value(stored)) == ("Stored 'x' (list)\n", "[1]")
    assert execute(kc, "%autosave 60").stream() == "Autosaving every 60 seconds\n"
    assert execute(kc, "%clear").stream() == "\x1b[2J\x1b[H"
    info = execute(kc, "%connect_info")
    assert info.content["ename"] == "UsageError" and "connection file stays on the host" in info.stream("stderr")
