"""`sandbox-kernel run`, driven as a user drives it: a subprocess with pipes or a pseudo-terminal, a real kernel,
Deno and Pyodide. It must behave like `python` (the guest's runner itself: tests/unit/guest_glue/test_guest_script.py)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox_kernel.sandbox import provision
from test_pyodide_index import pip_download, write_lock

FIXTURES = Path(__file__).parent / "skill_fixtures"
ASK_ECHO = [f"--SandboxKernel.skills_path={FIXTURES}", '--SandboxKernel.skill_policy={"ProbeSkill.echo": "ask"}']
ECHO = "print(device.ProbeSkill.echo('hi', n=3))"


@pytest.fixture(scope="module", autouse=True)
def snapshot() -> None:
    """The start-up snapshot built before the first run (its one-time note would be on the first run's stderr)."""
    if provision.snapshot_if_ready() is None:
        asyncio.run(provision.build_snapshot(lambda message: None))


def cli(*args: str, stdin: str | None = None, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "sandbox_kernel", "run", *args], input=stdin, capture_output=True, text=True, timeout=180
    )


def on_terminal(args: list[str], prompt: str, answer: str | None, timeout: float = 180) -> tuple[int, str]:
    """Run the command with a pseudo-terminal as its stdin, stdout and stderr, as in a shell; type `answer` once
    `prompt` shows (None: wait, answering nothing). Its exit status and everything the terminal showed."""
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox_kernel", "run", *args], stdin=follower, stdout=follower, stderr=follower
    )
    os.close(follower)
    shown, answered = b"", False
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"nothing more within {timeout} s; the terminal showed {shown!r}"
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: every process holding the terminal has ended
                break
            if not chunk:
                break
            shown += chunk
            if not answered and prompt.encode() in shown:
                if answer is not None:
                    os.write(leader, answer.encode())
                answered = True
        proc.wait(timeout=30)
    finally:
        proc.kill()
        os.close(leader)
    assert answered, f"the prompt {prompt!r} never showed: {shown!r}"
    return proc.returncode, shown.decode().replace("\r\n", "\n")


# ---- python's forms: a script, -c, arguments, stdin, the exit status ---------------------------------------------


def test_a_script_runs_as_python_runs_it(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\nprint('to stdout', __name__, __file__ == sys.argv[0])\nprint('to stderr', file=sys.stderr)\n"
        "sum(range(10))\n"  # python shows no expression's value
    )
    proc = cli(str(script))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "to stdout __main__ True\n", "to stderr\n")


def test_arguments_and_stdin_reach_the_code(tmp_path):
    """Script arguments in sys.argv, piped stdin through input() and sys.stdin, sys.exit's status, a quiet stderr."""
    script = tmp_path / "echo.py"
    script.write_text(
        "import sys\nprint(sys.argv)\nname = input('name? ')\nprint('hi', name)\n"
        "print(sys.stdin.read().upper(), end='')\nsys.exit(3)\n"
    )
    proc = cli(str(script), "a", "-b", "--c", "--SandboxKernel.cell_timeout=x", stdin="Ada\nrest 1\nrest 2\n")
    assert proc.stdout == f"{[str(script), 'a', '-b', '--c', '--SandboxKernel.cell_timeout=x']}\nname? hi Ada\n" + (
        "REST 1\nREST 2\n"
    )
    assert (proc.returncode, proc.stderr) == (3, "")
    proc = cli("-c", "import sys; print(sys.argv[1:], input())", "x", "--y", stdin="Bo\n")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "['x', '--y'] Bo\n", "")


@pytest.mark.parametrize(
    ("code", "status", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit('bye')", 1, "bye\n"),
        ("import sys; sys.exit()", 0, ""),
        ("import sys; sys.exit(None)", 0, ""),
        ("print('x'); exit(4)", 4, ""),
    ],
)
def test_sys_exit_is_silent_with_its_status(code, status, stderr):
    proc = cli("-c", code)
    assert (proc.returncode, proc.stderr) == (status, stderr)


def test_tracebacks_name_the_code_as_python_does(tmp_path):
    proc = cli("-c", "def f(x):\n    return 1 / x\nf(0)")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 3, in <module>\n'
        "    f(0)\n"
        "    ~^^^\n"
        '  File "<string>", line 2, in f\n'
        "    return 1 / x\n"
        "           ~~^~~\n"
        "ZeroDivisionError: division by zero\n"
    )
    script = tmp_path / "job.py"
    script.write_text("import json\n\njson.loads('{')\n")
    proc = cli(str(script))
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[:3] == [
        "Traceback (most recent call last):",
        f'  File "{script}", line 3, in <module>',
        "    json.loads('{')",
    ]
    assert (
        lines[-1].startswith("json.decoder.JSONDecodeError: Expecting property name")
        and "sandbox_guest" not in proc.stderr
    )
    proc = cli("-c", "x = (")
    assert (proc.returncode, proc.stderr.splitlines()[0]) == (1, '  File "<string>", line 1')


def test_end_of_input_is_an_eoferror_as_in_python():
    proc = cli("-c", "input()", stdin="")
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        '  File "<string>", line 1, in <module>\n    input()\n    ~~~~~^^\nEOFError: EOF when reading a line\n'
    )
    assert "sandbox_guest" not in proc.stderr


def test_a_file_that_cannot_be_read_and_a_bad_option_say_one_line(tmp_path):
    proc = cli(str(tmp_path / "nope.py"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"sandbox-kernel run: can't open file {str(tmp_path / 'nope.py')!r}: " + (
        f"[Errno 2] No such file or directory: {str(tmp_path / 'nope.py')!r}"
    )
    proc = cli("--mount", "/no/such/folder:/data", "-c", "1")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("sandbox-kernel run: bad setting: --mount: ") and "/no/such/folder" in line


# ---- kernel settings, and the kernel's notes on stderr ------------------------------------------------------------


def test_kernel_settings_are_taken_as_by_mcp():
    proc = cli("--SandboxKernel.memory_limit_mb=300", "-c", "print('ran')")
    assert (proc.returncode, proc.stdout) == (0, "ran\n"), proc.stderr
    proc = cli("--SandboxKernel.cell_timeout=soon", "-c", "print('ran')")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("sandbox-kernel run: bad setting: --timeout: ") and "soon" in line  # this command's flag
    assert line.endswith("(given as --SandboxKernel.cell_timeout of sandbox-kernel run)")


def test_a_bad_flag_is_named_as_given_and_said_once(tmp_path):
    """--mount of a folder that is not there: one line, naming the flag (not the kernel's command line)."""
    missing = tmp_path / "missing"
    proc = cli("--mount", f"{missing}:/data", "-c", "print('ran')")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"sandbox-kernel run: bad setting: --mount: mount '{missing}:/data': host folder '{missing}' does not exist "
        "or is not a folder (given as --mount of sandbox-kernel run)\n"
    )


def test_the_sandboxs_hints_name_this_commands_flags():
    """The guest's advice for a file that is not there names --working-folder and --mount, not SandboxKernel.*."""
    proc = cli("-c", "open('data.csv')")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "FileNotFoundError: [Errno 44] No such file or directory. The sandbox's working folder is /home/pyodide, its "
        "own (host files are not there). To open files next to the notebook, set --working-folder ro (or "
        "--working-folder rw); for other host folders, --mount host_folder:/data, then open('/data/...'): 'data.csv'"
    )
    assert "SandboxKernel." not in proc.stderr


def test_package_loader_notes_go_to_stderr(tmp_path):
    pip_download(["six"], tmp_path)
    write_lock(tmp_path)
    proc = cli(f"--SandboxKernel.pyodide_index={tmp_path}", "-c", "import six\nprint(six.PY3)")
    assert (proc.returncode, proc.stdout) == (0, "True\n"), proc.stderr
    assert "Loading six" in proc.stderr and "Loaded six" in proc.stderr


# ---- --timeout and interrupts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stubborn", [False, True])
def test_timeout_says_so_once_and_returns_within_the_grace(stubborn):
    """A loop stopped at --timeout; a stubborn one (it catches KeyboardInterrupt) when interrupt_grace is over."""
    loop = (
        "while True:\n    try:\n        while True: pass\n    except KeyboardInterrupt: pass"
        if stubborn
        else ("while True: pass")
    )
    grace = 2
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox_kernel", "run", "--timeout", "1", f"--SandboxKernel.interrupt_grace={grace}",
         "-c", f"print('started', flush=True)\n{loop}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline() == "started\n"
        started = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (
        124,
        "",
        "sandbox-kernel run: the code ran past --timeout 1s and was stopped\n",
    )
    assert took < 1 + grace + 10, took  # the limit, the grace (stubborn), the kernel's end: generous bounds


def test_a_prompt_nobody_answers_ends_at_the_timeout():
    """input() at a terminal nobody answers: --timeout still ends the run (the prompt is not waited on)."""
    started = time.monotonic()
    status, shown = on_terminal(["--timeout", "3", "-c", "input('name? ')"], "name? ", None, timeout=90)
    assert status == 124 and shown.endswith("sandbox-kernel run: the code ran past --timeout 3s and was stopped\n")
    assert time.monotonic() - started < 60


def test_ctrl_c_ends_the_code_as_python_does():
    # As from a terminal's shell. A runner started in the background (`.ci/run &`) ignores SIGINT, and an ignored
    # signal stays ignored in its children (python then takes no Ctrl-C either); a caught one is default again.
    runner_has = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox_kernel", "run", "-c", "print('started', flush=True)\nwhile True: pass"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, runner_has)
    try:
        assert proc.stdout.readline() == "started\n"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (130, "KeyboardInterrupt\n")


def test_cli_says_so_when_the_kernel_process_dies():
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox_kernel", "run", "-c", "import time\nprint('ready', flush=True)\ntime.sleep(120)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline() == "ready\n"
        (kernel,) = [pid for t in Path(f"/proc/{proc.pid}/task").glob("*/children") for pid in t.read_text().split()]
        os.kill(int(kernel), signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "sandbox-kernel run: the kernel process exited (exit code -9) before the code finished" in err


# ---- skills whose policy is 'ask' --------------------------------------------------------------------------------


def test_an_ask_skill_prompts_the_person_at_the_terminal():
    prompt = "Allow it? [y/N] "
    status, shown = on_terminal([*ASK_ECHO, "-c", ECHO], prompt, "y\n")
    assert status == 0, shown
    assert (
        "sandbox-kernel run: the code asks to call a skill whose policy is 'ask': ProbeSkill.echo('hi', n=3)\n"
        f"{prompt}y\n{{'args': ['hi'], 'kwargs': {{'n': 3}}}}\n"
    ) in shown
    status, shown = on_terminal([*ASK_ECHO, "-c", ECHO], prompt, "n\n")
    assert status == 1, shown
    assert shown.endswith(
        "SkillRefused: ProbeSkill.echo was not approved (policy 'ask'): the person at the terminal said no\n"
    ), shown


def test_an_ask_skill_without_a_terminal_is_refused_saying_why():
    proc = cli(*ASK_ECHO, "-c", ECHO, stdin="")
    assert proc.returncode == 1 and proc.stdout == ""
    entry = json.dumps({"ProbeSkill.echo": "allow"})
    assert proc.stderr.splitlines()[-1].endswith(
        "SkillRefused: ProbeSkill.echo was not approved (policy 'ask'): no terminal to ask on (sandbox-kernel run "
        "was not started with a terminal as stdin); allow it in skill_policy to run it without asking (add "
        f"{entry} to SandboxKernel.skill_policy)"
    ), proc.stderr


# ---- no kernelspec -----------------------------------------------------------------------------------------------


def test_without_the_kernelspec_one_line_says_how_to_install_it(tmp_path):
    """A Python environment of its own (no kernelspec in its prefix) that imports this one's packages."""
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    site = next(env_dir.glob("lib/python3*/site-packages"))
    parent = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    (site / "parent.pth").write_text(f"import site; site.addsitedir({str(parent)!r})\n")
    python = str(env_dir / "bin" / "python")
    empty = tmp_path / "jupyter"
    env = {**os.environ, "JUPYTER_PATH": str(empty), "JUPYTER_DATA_DIR": str(empty)}
    hint = (
        "the pyodide-sandbox kernel is not installed where Jupyter looks: run `sandbox-kernel install --sys-prefix` "
        "(this environment) or `sandbox-kernel install --user`"
    )
    proc = subprocess.run(
        [python, "-m", "sandbox_kernel", "run", "-c", "1"], capture_output=True, text=True, timeout=120, env=env
    )
    assert (proc.returncode, proc.stderr) == (2, f"sandbox-kernel run: {hint}\n")
    proc = subprocess.run(
        [python, "-c", "from sandbox_kernel import Sandbox\nSandbox().start()"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.stderr.splitlines()[-1] == f"sandbox_kernel.client.local_kernel.KernelNotInstalled: {hint}", proc.stderr
    assert "NoSuchKernel" not in proc.stderr  # one error, not a chain
