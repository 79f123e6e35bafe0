"""Python calls that ask the system about itself, in a real kernel: each answers as Pyodide in a browser does, or
raises a clean Python exception, and the session goes on. Pyodide takes Deno for Node, and some of its Node paths
call what the worker's permissions refuse (`os.getuid` read the host's uid through Deno: "Requires sys access to
'uid'", and the sandbox died with the session's state); no permission is granted for them (host_ts/node_paths.ts).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from conftest import Run, execute, start_kernel, stop_kernel

pytestmark = pytest.mark.slow

IMPORTS = "import os, posix, platform, getpass, socket, time, datetime, secrets, uuid, multiprocessing"


@pytest.fixture(scope="module")
def kc() -> Iterator[BlockingKernelClient]:
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=30"])
    yield kc
    stop_kernel(km, kc)


def run_keeping_state(kc: BlockingKernelClient, code: str) -> Run:
    """Run `code` in its own cell after a cell that sets a variable; that variable is still there afterwards (the
    sandbox neither died nor restarted), and no cell was told of a restart."""
    marker = f"kept-{abs(hash(code))}"
    assert execute(kc, f"{IMPORTS}\nmarker = {marker!r}").content["status"] == "ok"
    run = execute(kc, code, timeout=60)
    after = execute(kc, "print(marker)")
    told = [c for r in (run, after) for c in r.of_type("stream") if "SandboxRestarted" in c["text"]]
    assert "Sandbox" not in run.content.get("ename", ""), run.content
    assert (after.stream(), told) == (f"{marker}\n", []), (run.content, after.content, told)
    return run


# What Emscripten answers in a browser: fixed values, none of them the host's.
ANSWERS = [
    ("os.getuid()", "0"),  # the owner of every file in Emscripten's file system, as os.getgid()
    ("posix.getuid()", "0"),
    ("os.getgid()", "0"),
    ("os.stat('/tmp').st_uid == os.getuid()", "True"),
    ("os.getlogin()", "'web_user'"),
    ("getpass.getuser()", "'web_user'"),
    ("(os.getpid(), os.getppid())", "(42, 1)"),
    ("os.uname().sysname, os.uname().nodename", "('Emscripten', 'emscripten')"),
    ("socket.gethostname()", "'emscripten'"),
    ("platform.system(), platform.machine()", "('Emscripten', 'wasm32')"),
    ("os.cpu_count(), multiprocessing.cpu_count()", "(1, 1)"),
    ("os.getloadavg()", "(0.1, 0.1, 0.1)"),
    ("len(os.urandom(16)), len(secrets.token_bytes(8)), uuid.uuid4().version", "(16, 8, 4)"),
    ("type(time.localtime()).__name__, len(time.tzname)", "('struct_time', 2)"),
    ("datetime.datetime.now().astimezone().tzinfo is not None", "True"),
]


@pytest.mark.parametrize(("call", "answer"), ANSWERS, ids=[call for call, _ in ANSWERS])
def test_a_call_answers_as_pyodide_in_a_browser_and_the_session_goes_on(kc, call, answer):
    run = run_keeping_state(kc, call)
    assert run.content["status"] == "ok", run.content
    assert run.of_type("execute_result")[0]["data"]["text/plain"] == answer


# What the sandbox has not (as Pyodide in a browser has no `resource`, no `os.geteuid`, no server socket): a clean
# Python exception at once.
REFUSALS = [
    # A listening socket would start a `ws` server on the host (refused by the net permission in a JS callback).
    ("s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()", "OSError", "socket.listen: the sandbox accepts no"),
    ("import _socket; _socket.socket().listen(1)", "OSError", "[Errno 138] Not supported"),  # below the guard
    # A connection would be a `ws` WebSocket (refused its environment variables, or the net permission in a callback).
    ("socket.create_connection(('127.0.0.1', 9), timeout=5)", "OSError", "[Errno 23] Host is unreachable"),
    (
        "socket.socket(type=socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9))",
        "OSError",
        "[Errno 23] Host is unreachable",
    ),
    ("import resource", "ModuleNotFoundError", "resource"),
    ("os.geteuid()", "AttributeError", "geteuid"),
]


@pytest.mark.parametrize(("call", "ename", "fragment"), REFUSALS, ids=[call for call, _, _ in REFUSALS])
def test_a_call_the_sandbox_cannot_serve_raises_a_clean_exception_and_the_session_goes_on(kc, call, ename, fragment):
    run = run_keeping_state(kc, call)
    assert (run.content["status"], run.content["ename"]) == ("error", ename), run.content
    assert fragment in run.content["evalue"], run.content["evalue"]
