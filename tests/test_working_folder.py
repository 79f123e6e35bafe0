"""Files next to the notebook: a hint when a relative path misses, and the opt-in working_folder mount."""

from __future__ import annotations

import os
import time

import pytest
from jupyter_client.manager import KernelManager

from conftest import START_TIMEOUT, execute, stop_kernel, value
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

FIRST_COMPLETION_LIMIT = 1.0  # seconds: JupyterLab drops a completion reply that takes longer


def start_in(folder, arguments: list[str], env: dict[str, str] | None = None):
    """A kernel started in `folder`, as JupyterLab starts one in the notebook's folder."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(extra_arguments=arguments, cwd=str(folder), **({"env": {**os.environ, **env}} if env else {}))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=START_TIMEOUT)
    return km, kc


@pytest.fixture
def notebook_folder(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    return tmp_path


def test_a_relative_path_that_misses_says_how_host_files_get_in(notebook_folder):
    km, kc = start_in(notebook_folder, [])
    try:
        run = execute(kc, "open('data.csv')")
        assert run.content["ename"] == "FileNotFoundError"
        shown = run.content["evalue"]
        assert "SandboxKernel.working_folder = 'ro'" in shown and "SandboxKernel.mounts" in shown, shown
        assert str(notebook_folder) not in shown  # no host path reaches the guest
        run = execute(kc, "open('/tmp/nothing-here.txt')")  # an absolute path in the sandbox: the plain error
        assert run.content["evalue"] == "[Errno 44] No such file or directory: '/tmp/nothing-here.txt'"
    finally:
        stop_kernel(km, kc)


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_working_folder_is_the_notebooks_folder(notebook_folder, mode):
    km, kc = start_in(notebook_folder, [f"--SandboxKernel.working_folder={mode}"])
    try:
        assert value(execute(kc, "import os; os.getcwd()")) == "'/work'"
        assert value(execute(kc, "open('data.csv').read()")) == repr("a,b\n1,2\n")
        run = execute(kc, "open('out.csv', 'w').write('made in the sandbox')")
        if mode == "rw":
            assert (notebook_folder / "out.csv").read_text() == "made in the sandbox"
        else:  # the write works inside the sandbox; the host folder is unchanged, and the user is told
            assert run.content["status"] == "ok", run.content
            assert "/work/out.csv stays inside the sandbox" in run.stream("stderr")
            assert "/work is a read-only mount" in run.stream("stderr")
            assert value(execute(kc, "open('out.csv').read()")) == "'made in the sandbox'"
            assert not (notebook_folder / "out.csv").exists()
        # After a restart the sandbox is back in the same folder.
        kc.execute("import os; os._exit(1)")
        execute(kc, "1")  # reports the restart
        assert value(execute(kc, "import os; os.getcwd()")) == "'/work'"
    finally:
        stop_kernel(km, kc)


def test_a_writable_working_folder_may_not_hold_the_kernels_cache(notebook_folder):
    """A notebook in the home folder, working_folder='rw': guest code could rewrite the snapshot later kernels use."""
    cache = notebook_folder / ".cache" / "sandbox-kernel"
    km, kc = start_in(notebook_folder, ["--SandboxKernel.working_folder=rw"], {"SANDBOX_KERNEL_CACHE": str(cache)})
    try:
        run = execute(kc, "1+1")
        assert run.content["ename"] == "SandboxSettingsError", run.content
        assert "sandbox-kernel's own cache" in run.content["evalue"] and "working_folder" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)


def test_the_first_completion_answers_within_jupyterlabs_limit(notebook_folder):
    km, kc = start_in(notebook_folder, [])
    try:
        t0 = time.monotonic()
        msg_id = kc.complete("impo")
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        took = time.monotonic() - t0
        assert reply["content"]["matches"] == ["import"]
        assert took < FIRST_COMPLETION_LIMIT, f"the first completion took {took:.2f} s"
    finally:
        stop_kernel(km, kc)


def test_files_the_guest_makes_get_the_usual_umask_quietly(notebook_folder):
    """As under a normal Python (umask 022): no group/world-writable files left on the host, and no notice."""
    km, kc = start_in(notebook_folder, ["--SandboxKernel.working_folder=rw"])
    try:
        run = execute(
            kc, "import logging, os\nlogging.FileHandler('app.log').close()\nos.mkdir('made')\nopen('made/x.csv', 'w')"
        )  # a folder reaches the host with its first data file
        assert run.content["status"] == "ok", run.content
        assert run.stream("stderr") == ""  # no "[cleared ... world-writable bits ...]" for an ordinary file
        assert (notebook_folder / "app.log").stat().st_mode & 0o777 == 0o644
        assert (notebook_folder / "made").stat().st_mode & 0o777 == 0o755
        run = execute(kc, "os.chmod('app.log', 0o4777)\noct(os.stat('app.log').st_mode)")  # asked for explicitly
        assert value(run) == "'0o100644'"  # no setuid, no group or world write, not executable: as the host holds it
        assert (notebook_folder / "app.log").stat().st_mode & 0o7777 == 0o644
    finally:
        stop_kernel(km, kc)


def test_shelve_and_dbm_work_on_the_notebooks_files(notebook_folder):
    """Pyodide leaves dbm out; the sandbox's dbm.dumb writes CPython's format, so both sides read each other's files."""
    import dbm.dumb

    with dbm.dumb.open(str(notebook_folder / "made-on-host"), "c") as db:
        db["city"] = "Zürich"
    km, kc = start_in(notebook_folder, ["--SandboxKernel.working_folder=rw"])
    try:
        run = execute(kc, "import shelve\nwith shelve.open('results') as s:\n    s['scores'] = {'a': [1, 2.5]}")
        assert run.content["status"] == "ok", run.content
        assert (
            value(execute(kc, "with shelve.open('results', 'r') as s:\n    kept = dict(s)\nkept"))
            == "{'scores': {'a': [1, 2.5]}}"
        )
        assert (
            value(execute(kc, "import dbm\ndbm.whichdb('made-on-host'), dbm.whichdb('absent')")) == "('dbm.dumb', None)"
        )
        assert (
            value(execute(kc, "with dbm.open('made-on-host') as db:\n    city = db['city'].decode()\ncity"))
            == "'Zürich'"
        )
        run = execute(kc, "with dbm.open('made-on-host') as db:\n    db['x'] = 'y'")  # opened read-only ('r')
        assert run.content["ename"] == "OSError" and "reading only" in run.content["evalue"], run.content
        run = execute(kc, "dbm.open('absent')")
        assert run.content["ename"] == "error" and "'c' or 'n'" in run.content["evalue"], run.content
        run = execute(kc, "try:\n    dbm.open('absent')\nexcept dbm.error:\n    print('caught')")
        assert run.stream() == "caught\n"
    finally:
        stop_kernel(km, kc)
    # A shelf holds pickles, which run code when the host loads them: it stays inside the sandbox.
    assert not list(notebook_folder.glob("results.*"))


@pytest.fixture
def project(tmp_path):
    """A project folder: data and a script above the notebooks' folder, where the kernel starts."""
    (tmp_path / "data.txt").write_text("from above")
    (tmp_path / "tools.py").write_text("TOOL = 'ran'\n")
    (tmp_path / "notebooks").mkdir()
    return tmp_path


def test_a_path_above_the_working_folder_says_how_to_show_it(project):
    km, kc = start_in(project / "notebooks", ["--SandboxKernel.working_folder=ro"])
    try:
        for code in ("open('../data.txt')", "%run ../tools.py"):
            run = execute(kc, code)
            assert run.content["status"] == "error", run.content
            shown = run.content["evalue"]
            assert "goes above the working folder /work" in shown, (code, shown)
            assert "SandboxKernel.project_folder = '..'" in shown, (code, shown)
            assert str(project) not in shown
        run = execute(kc, "open('missing-here.txt')")  # inside the working folder: an ordinary miss
        assert run.content["evalue"] == "[Errno 44] No such file or directory: 'missing-here.txt'"
    finally:
        stop_kernel(km, kc)


def test_project_folder_shows_the_folder_above_with_the_working_folder_in_its_place(project):
    km, kc = start_in(project / "notebooks", ["--SandboxKernel.working_folder=rw", "--SandboxKernel.project_folder=.."])
    try:
        assert value(execute(kc, "import os; os.getcwd()")) == "'/project/notebooks'"
        assert value(execute(kc, "open('../data.txt').read()")) == "'from above'"
        assert value(execute(kc, "%run ../tools.py\nTOOL")) == "'ran'"
        run = execute(kc, "open('made.csv', 'w').write('here')")  # the working folder stays rw
        assert run.content["status"] == "ok", run.content
        assert (project / "notebooks" / "made.csv").read_text() == "here"
        run = execute(kc, "open('../made.csv', 'w')")  # the project folder is read-only: it stays inside
        assert run.content["status"] == "ok", run.content
        assert "/project is a read-only mount" in run.stream("stderr")
        assert not (project / "made.csv").exists()
        run = execute(kc, "open('../../x.txt')")
        assert "goes above /project, the folder SandboxKernel.project_folder shows" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            ["--SandboxKernel.working_folder=ro", "--SandboxKernel.project_folder=sub"],
            "does not hold the working folder",
        ),
        (["--SandboxKernel.project_folder=.."], "needs working_folder 'ro' or 'rw'"),
    ],
)
def test_a_project_folder_that_cannot_be_used_says_why(project, arguments, expected):
    (project / "notebooks" / "sub").mkdir()
    km, kc = start_in(project / "notebooks", arguments)
    try:
        run = execute(kc, "1")
        assert run.content["ename"] == "SandboxSettingsError" and expected in run.content["evalue"], run.content
    finally:
        stop_kernel(km, kc)


def test_the_guards_words_survive_a_notebook_that_replaces_os_functions(notebook_folder):
    km, kc = start_in(notebook_folder, ["--SandboxKernel.working_folder=ro"])
    try:
        run = execute(kc, "import os\nos.getcwd = lambda: '/somewhere/else'\nos.fspath = os.fsdecode = str")
        assert run.content["status"] == "ok", run.content
        run = execute(kc, "open('missing.txt')")  # an ordinary miss: the working folder is a host folder
        assert run.content["evalue"] == "[Errno 44] No such file or directory: 'missing.txt'", run.content
        run = execute(kc, "open('../x.txt')")
        assert run.content["ename"] == "PermissionError", run.content
        assert run.content["evalue"].startswith("[Errno 2] '/x.txt' is not in the sandbox"), run.content
        assert "goes above the working folder /work" in run.content["evalue"]
        run = execute(kc, "open('data.csv', 'a').write('3,4\\n')")  # a read-only folder: it stays inside
        assert run.content["status"] == "ok" and "/work/data.csv stays inside the sandbox" in run.stream("stderr")
        # Emscripten's numbers: a refusal is errno.EACCES there (2), so code that tests e.errno sees what it expects
        run = execute(
            kc,
            "import errno\ntry:\n    open('../x.txt')\nexcept OSError as e:\n    caught = e\n"
            "(type(caught).__name__, caught.errno == errno.EACCES, OSError(caught.errno, '').__class__.__name__)",
        )
        assert value(run) == "('PermissionError', True, 'PermissionError')", run.content
    finally:
        stop_kernel(km, kc)


def test_a_write_the_sandbox_cannot_take_is_a_read_only_file_system_in_python_and_the_shell(notebook_folder):
    """Under working_folder='ro' a write there stays in the sandbox's layer; one above it (outside every folder the
    sandbox has) is what Linux gives on a read-only file system: EROFS, not PermissionError [Errno 2] (Emscripten's
    EACCES). The shell refuses it in the same words (guards.write_refusal)."""
    km, kc = start_in(notebook_folder, ["--SandboxKernel.working_folder=ro"])
    why = (
        "Read-only file system: '/x.txt' is not in the sandbox: the host's files are not visible here. The path goes "
        "above the working folder /work, and the sandbox shows nothing of the host there: to reach the folder above "
        "the notebook's, set SandboxKernel.project_folder = '..' (mounted read-only at /project, with the working "
        "folder in its own place inside it); for other host folders, SandboxKernel.mounts = ['host_folder:/data'], "
        "then open('/data/...'). Host folders visible here (SandboxKernel.mounts): readable: /work; writable: none. "
        "The sandbox's own scratch space (in memory, lost on restart): /tmp, /home/pyodide."
    )
    try:
        run = execute(kc, "open('../x.txt', 'w')")
        assert (run.content["ename"], run.content["evalue"]) == ("OSError", f"[Errno 69] {why}: '/x.txt'"), run.content
        run = execute(
            kc,
            "import errno\ntry:\n    open('../x.txt', 'w')\nexcept OSError as e:\n    caught = e\n"
            "(type(caught).__name__, caught.errno == errno.EROFS, errno.errorcode[caught.errno])",
        )
        assert value(run) == "('OSError', True, 'EROFS')", run.content
        # The same write by its absolute path (no hint about climbing out of the working folder), from both
        plain = (
            "Read-only file system: '/x.txt' is not in the sandbox: the host's files are not visible here. "
            + why[why.index("Host folders visible") :]
        )
        run = execute(kc, "try:\n    open('/x.txt', 'w')\nexcept OSError as e:\n    caught = e\ncaught.strerror")
        assert value(run) == repr(plain)
        run = execute(kc, "!echo hi > /x.txt")
        assert run.content["status"] == "ok", run.content
        assert run.stream("stderr") == f"bash: /x.txt: {plain}\n"  # bash's form, Python's words
        assert run.stream("stderr").count("is not in the sandbox") == 1
    finally:
        stop_kernel(km, kc)
