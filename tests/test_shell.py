"""The sandbox's shell (issue 25): IPython's shell forms run just-bash on the guest's own files, output streamed,
stopped by interrupts and cell_timeout; `python3` in it runs in the same sandbox."""

from __future__ import annotations

import http.server
import subprocess

import pytest

from conftest import execute, once_running, serve_http, start_kernel, stop_kernel, value


@pytest.fixture(scope="module")
def shell_kernel():
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=20"])
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture
def kc(shell_kernel):
    return shell_kernel[1]


def test_bang_runs_a_command_on_the_files_python_wrote(kc):
    execute(
        kc,
        "import os; os.makedirs('/tmp/sh', exist_ok=True)\nfor n in 'abc': open(f'/tmp/sh/{n}.txt', 'w').write(n * 3 + '\\n')",
    )
    run = execute(kc, "!cat /tmp/sh/b.txt && ls /tmp/sh | wc -l")
    assert run.content["status"] == "ok", run.content
    assert run.stream() == "bbb\n3\n"


def test_bang_assignment_gives_an_slist_with_stderr_in_order(kc):
    run = execute(kc, "files = !cd /tmp/sh && ls; echo oops >&2\n(type(files).__name__, list(files))")
    assert value(run) == "('SList', ['a.txt', 'b.txt', 'c.txt', 'oops'])"


def test_python_variables_and_expressions_expand_as_in_ipython(kc):
    run = execute(kc, "name = 'world'\n!echo hello $name {6*7}")
    assert run.stream() == "hello world 42\n"


def test_the_exit_code_lands_in_exit_code(kc):
    run = execute(kc, "!grep -q zzz /tmp/sh/a.txt\n_exit_code")
    assert value(run) == "1"


def test_bash_cell_magic_has_loops_pipes_heredocs_and_substitution(kc):
    cell = """%%bash
total=0
for f in /tmp/sh/*.txt; do n=$(wc -c < "$f"); total=$((total + n)); done
echo "bytes: $total"
cat <<EOF | tr a-z A-Z
heredoc $(basename /tmp/sh/c.txt .txt)
EOF
if [ -f /tmp/sh/a.txt ]; then echo yes; else echo no; fi
"""
    run = execute(kc, cell)
    assert run.content["status"] == "ok", run.content
    assert run.stream() == "bytes: 12\nHEREDOC C\nyes\n"


def test_the_shell_writes_files_python_reads(kc):
    execute(kc, "%%sh\nprintf 'x,1\\ny,2\\n' > /tmp/sh/t.csv\nsort -r /tmp/sh/t.csv | cut -d, -f1 > /tmp/sh/keys")
    assert value(execute(kc, "open('/tmp/sh/keys').read()")) == "'y\\nx\\n'"


def test_script_bash_with_out_captures_into_a_variable(kc):
    run = execute(kc, "%%script bash --out captured\necho inside\n")
    assert run.stream() == ""
    assert value(execute(kc, "captured")) == "'inside\\n'"


def test_os_system_runs_in_the_shell_and_returns_the_wait_status(kc):
    run = execute(kc, "import os\nos.system('mkdir -p /tmp/sh/out && echo made'), os.system('exit 3')")
    assert run.stream() == "made\n"
    assert value(run) == "(0, 768)"


def test_python3_from_the_shell_runs_in_this_sandbox_in_a_fresh_namespace(kc):
    execute(kc, "secret_in_the_notebook = 1")
    run = execute(
        kc, "!python3 -c \"import sys; print(6 * 7, 'secret_in_the_notebook' in dir(), sys.argv)\" | tr a-z A-Z"
    )
    assert run.stream() == "42 FALSE ['-C']\n"
    run = execute(kc, "!python3 -c 'import sys; sys.exit(4)'; echo rc=$?")
    assert run.stream() == "rc=4\n"


def test_sys_executable_is_no_host_path_and_runs_as_python3(kc):
    """Pyodide set it to the worker's script on the host (the kernel's scratch folder and pid); notebooks run
    `!{sys.executable} script.py` and `subprocess.run([sys.executable, ...])`."""
    assert value(execute(kc, "import sys\nsys.executable")) == "'/usr/bin/python3'"
    assert execute(kc, "!{sys.executable} -c 'print(6 * 7)'").stream() == "42\n"
    assert execute(kc, "!cd /tmp && {sys.executable} -c 'import os; print(os.getcwd())'").stream() == "/tmp\n"
    run = execute(
        kc, "import subprocess\nsubprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True).stdout"
    )
    assert value(run) == "b'7\\n'"
    assert execute(kc, "!echo {sys.executable}").stream() == "/usr/bin/python3\n"  # only a command is replaced


def test_an_agent_exploring_the_shell_finds_every_command_it_can_run(kc):
    """Before: `which ls` exited 1, /bin and /usr/bin did not exist and $PATH was `/`, while `command -v grep` said
    /usr/bin/grep: agents probing with `which` concluded nothing was installed. Now the folders hold one file per
    command the shell runs, and `which`, `type`, `command -v`, `ls`, `find` and shutil.which agree."""
    listed = execute(kc, "!ls /usr/bin").stream().split()
    assert {"ls", "grep", "sed", "awk", "curl", "python3", "bash", "which"} <= set(listed), listed
    assert execute(kc, "!ls /bin").stream().split() == listed
    probe = "echo $PATH; which ls python3; type -P grep; command -v sed; test -x /bin/cat && echo runnable"
    assert execute(kc, f"!{probe}").stream() == (
        "/usr/bin:/bin\n/usr/bin/ls\n/usr/bin/python3\n/usr/bin/grep\n/usr/bin/sed\nrunnable\n"
    )
    assert execute(kc, "!find / -name python3").stream() == "/bin/python3\n/usr/bin/python3\n"
    every = "for c in $(ls /usr/bin); do command -v $c >/dev/null || echo missing $c; done; echo checked"
    assert execute(kc, f"!{every}").stream() == "checked\n"  # every file is a command the shell runs
    assert execute(kc, "!/bin/echo by path; /usr/bin/python3 -c 'print(6 * 7)'").stream() == "by path\n42\n"
    assert value(execute(kc, "import shutil\nshutil.which('grep'), shutil.which('gcc')")) == "('/usr/bin/grep', None)"
    run = execute(kc, "!which gcc")
    assert run.stream() == ""
    assert value(execute(kc, "_exit_code")) == "1"


def test_wget_fetches_through_the_shells_curl_and_its_allow_net_check(kc):
    """A tutorial's `!wget URL`: before, `wget: command not found`; now curl's own refusal, naming the setting."""
    run = execute(kc, "!wget -q https://example.com/data.csv")
    assert "allow_net" in run.stream("stderr"), run.stream("stderr")
    assert value(execute(kc, "_exit_code")) == "8"
    assert value(execute(kc, "import os\nos.path.exists('data.csv')")) == "False"


class CsvHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"a,b\n1,2\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_wget_saves_a_file_from_an_allowed_host_as_gnu_wget_names_it():
    server, url = serve_http(CsvHandler)
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{server.server_address[1]}']"])
    try:
        run = execute(kc, f"!cd /tmp && wget {url}files/data.csv && cat data.csv")
        assert run.stream() == "a,b\n1,2\n", run.outputs
        assert "Saving to: 'data.csv'" in run.stream("stderr")
        assert execute(kc, f"!wget -q -O - {url}x.csv").stream() == "a,b\n1,2\n"
        assert execute(kc, f"!wget -q -P /tmp/got {url} && ls /tmp/got").stream() == "index.html\n"
    finally:
        stop_kernel(km, kc)
        server.shutdown()


def test_fork_exec_and_spawn_say_the_sandbox_starts_no_processes(kc):
    code = (
        "import os\nsaid = []\nfor call in (os.fork, lambda: os.execv('/bin/ls', ['ls']),"
        " lambda: os.spawnv(os.P_WAIT, '/bin/ls', ['ls'])):\n"
        "    try:\n        call()\n    except OSError as e:\n        said.append(str(e).split(':')[0])\nsaid"
    )
    assert value(execute(kc, code)) == repr(["[Errno 52] os.fork", "[Errno 52] os.execv", "[Errno 52] os.fork"])


def test_a_native_program_is_not_found_with_a_clear_message(kc):
    run = execute(kc, "!gcc --version")
    assert "gcc: command not found" in run.stream("stderr")
    assert value(execute(kc, "_exit_code")) == "127"


def test_output_streams_as_it_is_produced(kc):
    run = execute(kc, "%%bash\nfor i in 1 2 3; do echo $i; sleep 0.4; done")
    chunks = [m for m in run.outputs if m["msg_type"] == "stream"]
    assert "".join(m["content"]["text"] for m in chunks) == "1\n2\n3\n"
    assert chunks[-1]["received"] - chunks[0]["received"] > 0.6, "all output came at once, at the end"


def test_an_interrupt_stops_a_shell_loop_and_the_kernel_goes_on(shell_kernel):
    km, kc = shell_kernel
    run = execute(kc, "!echo started; while true; do :; done", on_output=once_running(km.interrupt_kernel))
    assert run.content["ename"] == "KeyboardInterrupt", run.content
    assert [error["ename"] for error in run.of_type("error")] == ["KeyboardInterrupt"]  # once: none in the wrap-up
    assert value(execute(kc, "1 + 1")) == "2"


def test_an_interrupt_cuts_a_shell_sleep_short(shell_kernel):
    km, kc = shell_kernel
    run = execute(kc, "!echo started; sleep 100", timeout=30, on_output=once_running(km.interrupt_kernel))
    assert run.content["ename"] == "KeyboardInterrupt", run.content
    assert run.stream() == "started\n"  # streamed before the interrupt, and kept


def test_cell_timeout_stops_a_shell_loop_and_keeps_the_variables():
    """The loop stops at cell_timeout and the sandbox is kept, every time. Before: each `:` appended nothing to the
    cell's stream, and those empty records kept the supervisor from reading the kernel's interrupts, so about one
    loop in two ran past interrupt_grace and lost the variables. The grace is generous for the suite's load."""
    km, kc = start_kernel(["--SandboxKernel.cell_timeout=3", "--SandboxKernel.interrupt_grace=15"])
    try:
        execute(kc, "kept = 5")
        for _ in range(3):
            run = execute(kc, "%%bash\nwhile true; do :; done", timeout=60)
            assert run.content["ename"] == "SandboxTimeout", run.content
            assert [error["ename"] for error in run.of_type("error")] == ["KeyboardInterrupt"]
        assert value(execute(kc, "kept")) == "5"
    finally:
        stop_kernel(km, kc)


def test_bang_pip_install_is_percent_pip_install(kc):
    bang = execute(kc, "!pip install sandbox-kernel-no-such-package-xyz")
    percent = execute(kc, "%pip install sandbox-kernel-no-such-package-xyz")
    assert bang.content["status"] == percent.content["status"]
    assert bang.stream("stderr") + bang.stream() == percent.stream("stderr") + percent.stream()


SUBPROCESS_FORMS = """
import os, subprocess, sys
r = subprocess.run(["wc", "-l"], input="a\\nb\\n", capture_output=True, text=True)
out = subprocess.check_output("echo $((6*7))", shell=True)
rc = subprocess.call(["false"])
try:
    subprocess.run(["grep", "zz", "/tmp/sh/a.txt"], check=True)
except subprocess.CalledProcessError as e:
    failed = e.returncode
try:
    subprocess.run(["gcc", "x.c"])
except FileNotFoundError as e:
    missing = e.filename
py = subprocess.run([sys.executable, "-c", "print('hi')"], capture_output=True).stdout
with subprocess.Popen(["sort"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as p:
    sorted_out, _ = p.communicate("b\\na\\n")
(r.stdout.strip(), r.returncode, out, rc, failed, missing, py, sorted_out, os.popen("echo popen").read())
"""


def test_subprocess_and_os_popen_run_in_the_shell(kc):
    assert value(execute(kc, SUBPROCESS_FORMS)) == ("('2', 0, b'42\\n', 1, 1, 'gcc', b'hi\\n', 'a\\nb\\n', 'popen\\n')")


BINARY_FORMS = """
import gzip, os, subprocess
os.makedirs("/tmp/sh", exist_ok=True)
original = bytes(range(256)) * 4
with open("/tmp/sh/blob.bin", "wb") as f:
    f.write(original)
packed = subprocess.run(["gzip", "-c", "/tmp/sh/blob.bin"], capture_output=True, check=True).stdout
raw = subprocess.check_output(["cat", "/tmp/sh/blob.bin"])
with open("/tmp/sh/copy.gz", "wb") as target:
    subprocess.run(["gzip", "-c", "/tmp/sh/blob.bin"], stdout=target, check=True)
(gzip.decompress(packed) == original, raw == original, gzip.decompress(open("/tmp/sh/copy.gz", "rb").read()) == original)
"""


def test_subprocess_gives_a_commands_binary_output_byte_for_byte(kc):
    """Bytes mode, to a pipe or a binary file: gzip's output decompresses to what went in (all 256 byte values)."""
    assert value(execute(kc, BINARY_FORMS)) == "(True, True, True)"


INPUT = "banana 3\napple 10\ncherry 7\napple 10\ndate 1\n"
# Commands run on the same input in the sandbox and by the host's GNU tools: their outputs must match.
SAME_AS_GNU = [
    "sort input.txt",
    "sort -k2 -n input.txt",
    "sort -u input.txt",
    "uniq input.txt",
    "wc -l input.txt",
    "head -n 2 input.txt",
    "tail -n 2 input.txt",
    "cut -d' ' -f1 input.txt",
    "tr a-z A-Z < input.txt",
    "sed 's/a/A/g' input.txt",
    "awk '{s += $2} END {print s}' input.txt",
    "grep -n apple input.txt",
    "grep -c an input.txt",
    "base64 input.txt",
    "md5sum input.txt",
    "sha256sum input.txt",
    "rev input.txt",
    "tac input.txt",
    "paste -d, input.txt input.txt",
    "seq 3 3 12",
    "printf '%05.1f|%s\\n' 3.14159 x",
    "echo $((7 * 6)) ${#HOME}",
    "fold -w 5 input.txt",
    "sort input.txt | uniq | wc -l",
    "cat input.txt | awk '$2 > 5' | sort -r",
    "sort input.txt | uniq -c",  # (just-bash pads the count to 4, GNU to 7)
    "sort input.txt | uniq -c | sort -rn | head -n 2",
    "cut -d' ' -f1 input.txt | xargs -I{} echo fruit: {} '({})'",
    "xargs -I % echo [%] < input.txt",
    "mkdir -p d && realpath d/../input.txt | xargs basename && realpath -m d/x/../y | xargs basename",
]


@pytest.mark.parametrize("command", SAME_AS_GNU)
def test_commands_give_what_gnu_tools_give(kc, tmp_path, command):
    (tmp_path / "input.txt").write_text(INPUT)
    host = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env={"HOME": "/home/pyodide"}
    )
    assert host.returncode == 0, host.stderr
    setup = f"import os; os.makedirs('/tmp/gnu', exist_ok=True); open('/tmp/gnu/input.txt', 'w').write({INPUT!r})"
    execute(kc, setup)
    run = execute(kc, f"%%bash\ncd /tmp/gnu\n{command}")
    assert run.content["status"] == "ok", run.content
    assert run.stream() == host.stdout


def test_python_script_magics_run_the_cell_in_this_sandbox_in_a_fresh_namespace(kc):
    """%%python3, %%python and %%script python3, as IPython's script magics: the cell is the program's stdin."""
    execute(kc, "secret_in_the_notebook = 1")
    for magic in ("%%python3", "%%python", "%%script python3", "%%script --out said python3"):
        run = execute(kc, f"{magic}\nimport sys\nprint(6 * 7, 'secret_in_the_notebook' in dir(), sys.argv)\n")
        assert run.content["status"] == "ok", (magic, run.content)
        if "--out" in magic:
            assert value(execute(kc, "said")) == "\"42 False ['-']\\n\"", magic
        else:
            assert run.stream() == "42 False ['-']\n", (magic, run.stream())


def test_bash_names_itself_and_ls_aliases_work(kc):
    """$BASH as bash sets it; IPython's `ls`/`ll` aliases (typed without %) use options the sandbox's ls has."""
    assert execute(kc, '%%bash\necho "hello from $BASH"').stream() == "hello from /bin/bash\n"
    execute(kc, "!mkdir -p /tmp/sh/aliases/sub && touch /tmp/sh/aliases/a.txt")
    assert execute(kc, "ls /tmp/sh/aliases").stream() == "a.txt  sub/\n"
    listed = execute(kc, "ll /tmp/sh/aliases").stream().splitlines()
    assert [line.split()[0] for line in listed] == ["total", "-rw-r--r--", "drwxr-xr-x"], listed
    assert [line.split()[-1] for line in listed[1:]] == ["a.txt", "sub/"], listed
    (folder,) = execute(kc, "ldir /tmp/sh/aliases").stream().splitlines()
    assert folder.startswith("drwxr-xr-x") and folder.endswith(" sub/"), folder


def test_df_shows_the_sandboxs_memory_budget_and_its_host_folders_in_gnus_table(tmp_path):
    """`df -h` (tutorials run it): `/` is the memory the files and Python share (memory_limit_mb), and what a file
    takes shows in Used; a host folder is listed without the host's sizes. GNU's df on this machine gives the header
    (its spacing, which follows the widest cell, is held by df_command_test.ts)."""
    km, kc = start_kernel(["--SandboxKernel.memory_limit_mb=512", f"--SandboxKernel.mounts=['{tmp_path}:/data:rw']"])
    try:
        run = execute(kc, "!df -h")
        header, root, data = run.stream().splitlines()
        assert (
            header.split() == subprocess.run(["df", "-h"], capture_output=True, text=True).stdout.split("\n")[0].split()
        )
        assert root.split()[0:2] == ["sandbox", "512M"] and root.endswith(" /"), root
        assert data.split() == ["host", "-", "-", "-", "-", "/data"]
        used_kib = "int(__import__('subprocess').run(['df', '/'], capture_output=True, text=True).stdout.split()[-4])"
        grown = value(
            execute(
                kc,
                f"chunk = bytes(2**20)\nbefore = {used_kib}\nwith open('/tmp/big', 'wb') as f:\n"
                f"    for _ in range(50):\n        f.write(chunk)\n({used_kib} - before) // 1024",
            )
        )
        assert 50 <= int(grown) <= 52, f"50 MiB written to /tmp: Used grew by {grown} MiB"
        missing = execute(kc, "!df /nowhere 2>&1; echo status $?")
        assert missing.stream() == "df: /nowhere: No such file or directory\nstatus 1\n"
    finally:
        stop_kernel(km, kc)
