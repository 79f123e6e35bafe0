"""The glue's shell runs (sh.py) and subprocess routing (processes.py) under CPython, with a fake host's shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sandbox_guest import processes, sh


@pytest.fixture
def shell(host, fake_pyodide, monkeypatch, tmp_path):
    """The fake host, with sh's proxy forgotten between tests, and captured output caught under tmp_path."""
    monkeypatch.setattr(sh, "_python_command", None)
    monkeypatch.setattr(processes, "_CAPTURE_FOLDER", str(tmp_path / "caught"))
    return host


def sent(host) -> list[dict]:
    return [entry[1] for entry in host.log if entry[0] == "shell"]


def test_a_run_sends_the_script_with_pythons_cwd_env_stdin_and_allowed_hosts(shell, tmp_path, monkeypatch):
    from sandbox_guest import guards

    monkeypatch.setattr(guards.LIMITS, "allow_net", ["pypi.org:443"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SBK_TEST", "1")
    shell.shell_results = [{"stdout": "out", "stderr": "err", "exitCode": 3}]
    result = sh.run("echo hi", stdin=b"\xff\x00", stream=True)
    assert result == sh.ShellRun("out", "err", 3)
    [request] = sent(shell)
    assert request["script"] == "echo hi" and request["cwd"] == str(tmp_path) and request["stream"] is True
    assert request["env"]["SBK_TEST"] == "1"
    assert request["stdin"] == "\xff\x00"  # bytes as latin-1: one char per byte
    assert request["allowNet"] == ["pypi.org:443"]
    # The guards' own words, for the writes the shell refuses (pyodide_fs.ts asks before each one)
    monkeypatch.setattr(guards.LIMITS, "own_roots", ("tmp",))
    assert shell.write_refusal("/etc/x").startswith("Read-only file system: '/etc/x' is not in the sandbox")
    assert shell.write_refusal("/tmp/x") == ""


def test_an_interrupted_run_raises_keyboardinterrupt_in_the_cell(shell):
    shell.shell_results = [{"interrupted": True, "exitCode": 124}]
    with pytest.raises(KeyboardInterrupt):
        sh.run("while true; do :; done")


def test_python3_runs_code_in_a_fresh_main_and_puts_everything_back(tmp_path):
    before = (list(sys.argv), os.getcwd(), dict(os.environ))
    code = "import os, sys; print(sys.argv, os.getcwd(), os.environ.get('X'), 'before' in dir()); sys.exit(5)"
    answer = json.loads(sh.run_python_command(json.dumps(["-c", code, "a"]), "", str(tmp_path), '{"X": "y"}'))
    assert answer == {"stdout": f"['-c', 'a'] {tmp_path} y False\n", "stderr": "", "exitCode": 5}
    assert (list(sys.argv), os.getcwd(), dict(os.environ)) == before


def test_python3_reads_code_from_stdin_and_reports_a_traceback(tmp_path):
    answer = json.loads(sh.run_python_command("[]", "print(1)\n1/0\n", str(tmp_path), "{}"))
    assert answer["stdout"] == "1\n" and answer["exitCode"] == 1
    assert answer["stderr"].rstrip().endswith("ZeroDivisionError: division by zero")


def test_python3_runs_a_script_with_its_arguments(tmp_path):
    (tmp_path / "s.py").write_text("import sys\nprint(sys.argv[1:], __name__)\nraise SystemExit('bad')\n")
    answer = json.loads(sh.run_python_command('["s.py", "x"]', "", str(tmp_path), "{}"))
    assert answer == {"stdout": "['x'] __main__\n", "stderr": "bad\n", "exitCode": 1}


@pytest.mark.parametrize(
    ("args", "shell_", "script"),
    [
        (["grep", "-r", "a b", "."], False, "grep -r 'a b' ."),
        ("ls -la | wc -l", True, "ls -la | wc -l"),
        ([sys.executable, "-c", "print(1)"], False, "python3 -c 'print(1)'"),
        (["/usr/bin/python3.12", "x.py"], False, "python3 x.py"),
        ("wc", False, "wc"),
    ],
)
def test_popen_args_become_the_shells_script(args, shell_, script):
    assert processes.command_line(args, shell_)[0] == script


def test_run_with_capture_and_input_and_check(shell):
    shell.shell_results = [{}, {"stdout": "2\n"}, {}, {"stderr": "nope\n", "exitCode": 1}]
    done = processes.SandboxPopen(["wc", "-l"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert done.communicate("a\nb\n") == ("2\n", None)
    assert done.returncode == 0 and sent(shell)[0]["script"] == "command -v wc" and sent(shell)[1]["stdin"] == "a\nb\n"
    failed = processes.SandboxPopen(["grep", "x", "f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert failed.communicate() == (b"", b"nope\n") and failed.returncode == 1


def test_stderr_to_stdout_merges_in_the_shell(shell):
    shell.shell_results = [{"stdout": "both\n"}]
    merged = processes.SandboxPopen("make", shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert merged.stdout is not None and merged.stdout.read() == b"both\n"
    assert sent(shell)[0]["script"] == f"{{ make\n}} > {processes._CAPTURE_FOLDER}/{merged.pid}.out 2>&1"


def test_captured_output_is_the_commands_bytes_from_the_files_its_redirections_name(shell):
    """The shell decodes a script's own output; a command redirected to a file writes its bytes unchanged. What the
    shell itself said (outside the redirections) follows; text mode decodes with universal newlines."""
    gzip_bytes = b"\x1f\x8b\x08\x00\xe9\xff"

    def gzip(request: dict) -> dict:
        out, err = (word for word in request["script"].split() if word.startswith(processes._CAPTURE_FOLDER))
        with open(out, "wb") as f:
            f.write(gzip_bytes)
        with open(err, "wb") as f:
            f.write(b"warn\r\n")
        return {"stderr": "bash: said after\n"}

    shell.shell_results = [{}, gzip, {}, gzip]
    done = processes.SandboxPopen(["gzip", "-c", "f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert sent(shell)[1]["script"].startswith("gzip -c f > ")  # the command itself is redirected, not a group
    assert done.communicate() == (gzip_bytes, b"warn\r\nbash: said after\n")
    text = processes.SandboxPopen(["gzip", "-c", "f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  encoding="latin-1")  # fmt: skip
    assert text.communicate() == (gzip_bytes.decode("latin-1"), "warn\nbash: said after\n")
    assert os.listdir(processes._CAPTURE_FOLDER) == []  # the files are gone


def test_a_missing_program_raises_file_not_found_as_cpython_does(shell):
    shell.shell_results = [{"exitCode": 1}]  # `command -v gcc` finds nothing
    with pytest.raises(FileNotFoundError) as raised:
        processes.SandboxPopen(["gcc", "x.c"])
    assert [request["script"] for request in sent(shell)] == ["command -v gcc"]  # and gcc x.c never ran
    assert raised.value.filename == "gcc" and "runs no native programs" in raised.value.strerror


def test_a_pipe_stdin_runs_the_command_when_the_input_is_complete(shell):
    shell.shell_results = [{}, {"stdout": "a\nb\n"}]
    sort = processes.SandboxPopen(["sort"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert sent(shell) == [] and sort.poll() is None
    assert sort.stdin is not None
    sort.stdin.write(b"b\na\n")
    sort.stdin.close()
    assert sort.poll() == 0 and sent(shell)[1]["stdin"] == "b\na\n"


def test_os_popen_reads_the_output_and_close_gives_the_status(shell):
    shell.shell_results = [{"stdout": "x\n", "exitCode": 2}]
    pipe = processes.popen("false")
    assert pipe.read() == "x\n" and pipe.close() == 512
    with pytest.raises(ValueError, match="mode 'r'"):
        processes.popen("cat", "w")


def test_fork_and_exec_say_the_sandbox_starts_no_processes():
    """As ENOSYS OSErrors (what callers catch), naming the call and where commands run instead."""
    import errno

    with pytest.raises(OSError) as raised:
        processes._no_process("fork")()
    assert raised.value.errno == errno.ENOSYS
    assert str(raised.value).startswith("[Errno 38] os.fork: the sandbox starts no processes; its shell runs commands")


def test_a_run_too_large_for_the_shell_is_a_memory_error_before_it_crosses_into_js(shell, monkeypatch):
    """The script, environment and stdin go to the worker's JS heap whole: past the shell's limit they are refused."""
    from sandbox_guest import guards

    monkeypatch.setattr(guards.LIMITS, "memory_limit_mb", 256)
    shell.shell_limit_bytes = 4 << 20
    with pytest.raises(MemoryError) as raised:
        sh.run("wc -c", stdin=b"z" * 5_000_000)
    assert str(raised.value) == (
        "the shell command's script, environment and stdin take 4.8 MiB; the sandbox's shell takes at most 4 MiB at "
        "once (its share of SandboxKernel.memory_limit_mb=256; raise that setting to allow more)"
    )
    assert sent(shell) == []
