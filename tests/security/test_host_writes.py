"""Host folders are default-deny: only plain data files reach them; everything else stays inside the sandbox.

Promise (docs/security.md, "Host folders are default-deny"): a guest write reaches a host folder only when it is a
regular file with a data suffix of host_ts/host_writes.json (not a tool-configuration name such as package.json),
with a plain name in plain folders, within the mount's growth quota; any other write (and every write to a
read-only mount) lands in the sandbox's own layer over the folder, where it works as usual, and the user is told
once per file. Each test writes the attacker's files through the guest (Python and the shell), compares the host
folder before and after, and runs the host program that would trust them, with a control that the same files
written on the host do run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from attack_kit import assert_alive, token
from jupyter_client import KernelManager

from conftest import START_TIMEOUT, execute, start_kernel, stop_kernel, value
from sandbox_kernel import Sandbox
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME

MARKER_DIR = Path(os.environ.get("TMPDIR", "/tmp"))

ALLOWED = [
    "results.csv", "X.CSV", "data/2024/run_1 final.parquet", "plots/fig-1.png", "log.jsonl",
    "arr.npy", "report (v2).pdf", "a.tsv", "c.ndjson", "d.log", "e.jpg", "f.jpeg", "g.gif", "h.webp",
    "i.bmp", "j.tif", "k.tiff", "l.wav", "m.mp3", "n.flac", "o.ogg", "p.mp4", "q.webm", "r.xlsx",
    "deep/er/notes.csv", "__pycache__/cache.csv",
]  # fmt: skip

# Opt-in suffixes (host_writes.json `opt_in`): tools read many such files as settings or code, so they stay inside
# unless the mount's mount_limits[...]["suffixes"] names them.
OPT_IN = ["résumé.txt", "b.json", "deep/er/notes.txt", "__pycache__/cache.json", "requirements/base.txt",
          "build/CMakeCache.txt", "opencode.json", "crush.json", "global.json", "conanfile.txt"]  # fmt: skip

NAMED = [
    "HEAD", "config", "objects/ab/cdef01", "refs/heads/main", "description", ".git/config", ".git/HEAD", ".pdbrc",
    "helpers.py", "helpers.cpython-311-x86_64-linux-gnu.so", "helpers/__init__.py", "pytest.toml", "pytest.ini",
    ".pylintrc", "mypy.ini", ".flake8", "setup.cfg", "tox.ini", "Cargo.toml", "build.rs", "tests/test_x.py",
    "conftest.py", "tests/conftest.py", "evil-1.0.dist-info/entry_points.txt", "evil-1.0.dist-info/METADATA",
    "evil.egg-info/PKG-INFO", ".ipynb_checkpoints/a-checkpoint.ipynb", ".ipynb_checkpoints/a-checkpoint.csv",
    "package.json", "Package.JSON", "deno.json", "tsconfig.json", "tsconfig.app.json", "composer.json",
    "CMakeLists.txt", "requirements.txt", "Requirements.TXT", "dev-requirements.txt", "jupyter_server_config.json",
    "AGENTS.md", "CLAUDE.md", ".mcp.json", ".vscode/settings.json", ".envrc", ".env", "Makefile", "justfile",
    "x.pth", "x.pkl", "x.pickle", "x.joblib", "x.h5", "x.hdf5", "x.npz", "x.sh", "x.html", "x.svg", "x.js",
    "x.toml", "x.yaml", "x.ini", "x.cfg", "x.so", "x.ipynb", "x.PY", "X.Pth", "x.csv.", "x.csv ", "x.c\u200bsv",
    "x\u200b.csv", "e\u0301.csv", "x.csv\u200b", "\u3164.csv", "a.b/x.csv", ".hidden/x.csv", "sub /x.csv",
    " lead.csv", "-dash.csv", "node_modules/x/index.js", "venv/bin/activate", "x.csv/inner.txt.py",
]  # fmt: skip


def generated(seed: int, count: int) -> list[str]:
    """Names no list foresaw: random extensionless files, dot-names, code suffixes, dotted folders."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(rng.randint(1, 9)))  # noqa: E731
    kinds = [
        lambda: word(),
        lambda: f".{word()}",
        lambda: f".{word()}/{word()}.csv",
        lambda: f"{word()}/.{word()}/{word()}.json",
        lambda: f"{word()}.py",
        lambda: f"{word()}.so",
        lambda: f"{word()}.pth",
        lambda: f"{word()}-{rng.randint(0, 9)}.{rng.randint(0, 9)}.dist-info/RECORD",
        lambda: f"{word()}.{rng.choice(['exe', 'bat', 'ps1', 'wasm', 'pyc', 'md', 'rst', 'lock', 'conf'])}",
        lambda: f"{word()}.{word()}/{word()}.txt",
    ]
    return [rng.choice(kinds)() for _ in range(count)]


REFUSED = NAMED + OPT_IN + generated(32, 60)


def host(argv: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTEST_", "COV_CORE_", "PYTHON"))}
    env["HOME"] = str(cwd)  # no user-wide .pdbrc, .gitconfig or plugins
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=env, input=stdin)


def listing(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder`: files with their bytes, folders and links as None."""
    out: dict[str, bytes | None] = {}
    for path in folder.rglob("*"):
        rel = str(path.relative_to(folder))
        out[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return out


def payload(rel: str) -> bytes:
    return f"written by the guest as {rel}\n".encode()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The user's folder: a git repository with a module and a test."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "helpers.py").write_text("WHO = 'user'\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_user.py").write_text("def test_user():\n    assert True\n")
    assert host(["git", "init", "-q", "."], folder).returncode == 0
    return folder


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return tmp_path_factory.mktemp("plain")


@pytest.fixture(scope="module")
def opted(tmp_path_factory):
    return tmp_path_factory.mktemp("opted")


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    return tmp_path_factory.mktemp("capped")


QUOTA = 1_000_000
OPTED_LIMITS = {
    "/opted": {"suffixes": [".csv", ".json", ".txt"]},
    "/capped": {"max_file_bytes": 1000},
    "/quota": {"max_growth_bytes": QUOTA},
}


@pytest.fixture(scope="module")
def quota(tmp_path_factory):
    return tmp_path_factory.mktemp("quota")


@pytest.fixture(scope="module")
def mounted(project, plain, opted, capped, quota):
    folders = (
        f"'{project}:/out:rw', '{plain}:/plain:rw', '{opted}:/opted:rw', '{capped}:/capped:rw', '{quota}:/quota:rw'"
    )
    km, kc = start_kernel(
        [
            f"--SandboxKernel.mounts=[{folders}]",
            f"--SandboxKernel.mount_limits={json.dumps(OPTED_LIMITS)}",
        ]
    )
    yield km, kc
    stop_kernel(km, kc)


def python_writes(base: str, names: list[str]) -> str:
    entries = [[f"{base}/{rel}", payload(rel).hex()] for rel in names]
    return (
        "import os, json\nfailed = {}\n"
        f"for path, data in json.loads({json.dumps(entries)!r}):\n"
        "    try:\n        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        with open(path, 'wb') as f:\n            f.write(bytes.fromhex(data))\n"
        "        if open(path, 'rb').read() != bytes.fromhex(data):\n            failed[path] = 'read back differs'\n"
        "    except Exception as exc:\n        failed[path] = repr(exc)\nfailed"
    )


def shell_writes(base: str, names: list[str]) -> str:
    lines = []
    for rel in names:
        path = f"{base}/{rel}"
        folder = os.path.dirname(path)
        lines.append(f"!mkdir -p '{folder}' && printf '%s\\n' 'written by the guest as {rel}' > '{path}'")
    return "\n".join(lines)


def expected_host(names: list[str]) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for rel in names:
        out[rel] = payload(rel)
        parts = rel.split("/")
        for k in range(1, len(parts)):
            out["/".join(parts[:k])] = None
    return out


@pytest.mark.parametrize("route", ["python", "shell"])
def test_only_data_files_reach_the_host_and_the_rest_works_inside(mounted, plain, route):
    _, kc = mounted
    base = f"gen-{route}"
    names = ALLOWED + REFUSED
    assert not (plain / base).exists()
    code = python_writes(f"/plain/{base}", names) if route == "python" else shell_writes(f"/plain/{base}", names)
    run = execute(kc, code, timeout=300)
    assert run.content["status"] == "ok", run.content
    if route == "python":
        assert value(run) == "{}"
    else:
        assert "Permission denied" not in run.stream() + run.stream("stderr")
    assert listing(plain / base) == expected_host(ALLOWED)
    # Inside the sandbox every file is there with its bytes.
    check = (
        "import json\nbad = []\n"
        f"for rel in json.loads({json.dumps(names)!r}):\n"
        f"    if open('/plain/{base}/' + rel, 'rb').read() != ('written by the guest as ' + rel + '\\n').encode():\n"
        "        bad.append(rel)\nbad"
    )
    assert value(execute(kc, check)) == "[]"
    notices = execute(kc, f"open('/plain/{base}/helpers.py', 'a').write('#')").stream("stderr")
    assert notices == "", "told once per file, not twice"


def test_the_user_is_told_once_which_file_stayed_inside_and_how_to_take_it_out(mounted, plain):
    _, kc = mounted
    run = execute(kc, "%%writefile /plain/told.py\nX = 1\n")
    err = run.stream("stderr")
    assert "/plain/told.py stays inside the sandbox" in err and "download_file" in err, err
    assert '"host_writes": "any"' in err
    assert execute(kc, "open('/plain/told.py', 'a').write('Y = 2\\n')").stream("stderr") == ""
    assert not (plain / "told.py").exists()


def test_writefile_then_import_works_in_the_sandbox(mounted, project):
    _, kc = mounted
    mod = "mod_" + "".join(c if c.isalnum() else "_" for c in token("m"))
    assert execute(kc, f"%%writefile /out/{mod}.py\nVALUE = 41\n").content["status"] == "ok"
    assert value(execute(kc, f"import sys\nsys.path.insert(0, '/out')\nimport {mod}\n{mod}.VALUE + 1")) == "42"
    assert not (project / f"{mod}.py").exists()


def test_an_atomic_write_then_rename_lands_the_data_file_on_the_host(mounted, plain):
    _, kc = mounted
    code = (
        "import os, tempfile\nfd, tmp = tempfile.mkstemp(dir='/plain', suffix='.tmp')\n"
        "os.write(fd, b'a,b\\n1,2\\n'); os.close(fd)\nos.replace(tmp, '/plain/atomic.csv')\n"
        "sorted(n for n in os.listdir('/plain') if n.endswith('.tmp'))"
    )
    assert value(execute(kc, code)) == "[]"
    assert (plain / "atomic.csv").read_bytes() == b"a,b\n1,2\n"
    assert not list(plain.glob("*.tmp"))


def test_the_users_own_code_is_copied_up_and_deleting_it_keeps_the_host_copy(mounted, project):
    _, kc = mounted
    code = (
        "import os\nopen('/out/helpers.py', 'a').write('WHO = \"guest\"\\n')\n"
        "import importlib, sys\nsys.path.insert(0, '/out')\nimport helpers\nimportlib.reload(helpers)\nw = helpers.WHO\n"
        "os.remove('/out/helpers.py')\nw, os.path.exists('/out/helpers.py')"
    )
    assert value(execute(kc, code)) == "('guest', False)"
    assert (project / "helpers.py").read_text() == "WHO = 'user'\n"
    assert host([sys.executable, "-c", "import helpers; print(helpers.WHO)"], project).stdout.strip() == "user"


def marker() -> Path:
    return MARKER_DIR / f"hostwrite-{token('m')}"


def git_repo_files(mark: Path) -> dict[str, str]:
    config = f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = touch {mark}\n"
    return {"HEAD": "ref: refs/heads/main\n", "config": config, "objects/info/packs": "", "refs/.keep": ""}


def plant_on_host(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def plant_in_guest(kc, base: str, files: dict[str, str]) -> None:
    code = (
        "import os, json\n"
        f"for rel, text in json.loads({json.dumps(files)!r}).items():\n"
        f"    path = {base!r} + '/' + rel\n    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "    open(path, 'w').write(text)"
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content


def test_git_status_runs_nothing_the_guest_wrote(mounted, project, plain, tmp_path):
    _, kc = mounted
    control = marker()
    plant_on_host(tmp_path, git_repo_files(control))
    assert host(["git", "status"], tmp_path).returncode == 0 and control.exists(), "the control must fire"
    # A bare-looking repository from extensionless names, in a folder that is no repository ...
    mark = marker()
    plant_in_guest(kc, "/plain/repo", {**git_repo_files(mark), "data.csv": "a\n"})
    assert sorted(listing(plain / "repo")) == ["data.csv"]
    host(["git", "status"], plain / "repo")
    # ... and the user's own repository's config, changed from the sandbox.
    plant_in_guest(kc, "/out/.git", {"config": git_repo_files(mark)["config"]})
    assert "fsmonitor" not in (project / ".git" / "config").read_text()
    assert host(["git", "status", "--short"], project).returncode == 0
    assert not mark.exists(), "LEAK: git ran the guest's fsmonitor"
    assert_alive(kc)


def test_pytest_runs_nothing_the_guest_wrote(mounted, project, tmp_path):
    _, kc = mounted
    files = lambda m: {  # noqa: E731
        "conftest.py": f"open({str(m)!r}, 'w').write('conftest')\n",
        "tests/conftest.py": f"open({str(m)!r}, 'w').write('conftest')\n",
        "tests/test_planted.py": f"def test_planted():\n    open({str(m)!r}, 'w').write('test')\n",
    }
    control = marker()
    plant_on_host(tmp_path, files(control))
    host([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-cov"], tmp_path)
    assert control.exists(), "the control must fire"
    mark = marker()
    plant_in_guest(kc, "/out", files(mark))
    proc = host([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-cov", "tests"], project)
    assert "1 passed" in proc.stdout, proc.stdout + proc.stderr
    assert not mark.exists(), "LEAK: pytest ran the guest's code"


def test_pdb_runs_no_pdbrc_the_guest_wrote(mounted, project, tmp_path):
    _, kc = mounted
    rc = lambda m: {".pdbrc": f"import pathlib; pathlib.Path({str(m)!r}).touch()\n"}  # noqa: E731
    control = marker()
    plant_on_host(tmp_path, {**rc(control), "run.py": "x = 1\n"})
    host([sys.executable, "-m", "pdb", "run.py"], tmp_path, stdin="c\n")
    assert control.exists(), "the control must fire"
    mark = marker()
    plant_in_guest(kc, "/out", rc(mark))
    host([sys.executable, "-m", "pdb", "helpers.py"], project, stdin="c\n")
    assert not mark.exists(), "LEAK: pdb ran the guest's .pdbrc"


def test_the_users_module_wins_over_what_the_guest_wrote_beside_it(mounted, project, tmp_path):
    _, kc = mounted
    pkg = lambda m: {"helpers/__init__.py": f"open({str(m)!r}, 'w').write('x')\nWHO = 'guest'\n"}  # noqa: E731
    control = marker()
    shutil.copy(project / "helpers.py", tmp_path / "helpers.py")
    plant_on_host(tmp_path, pkg(control))
    assert host([sys.executable, "-c", "import helpers; print(helpers.WHO)"], tmp_path).stdout.strip() == "guest"
    assert control.exists(), "the control must fire"
    mark = marker()
    tag = sys.implementation._multiarch if hasattr(sys.implementation, "_multiarch") else "x86_64-linux-gnu"
    plant_in_guest(kc, "/out", {**pkg(mark), f"helpers.cpython-311-{tag}.so": "not an ELF", "helpers.pth": "import os"})
    proc = host([sys.executable, "-c", "import helpers; print(helpers.WHO)"], project)
    assert proc.stdout.strip() == "user", proc.stdout + proc.stderr
    assert not mark.exists(), "LEAK: the host imported the guest's package"


def test_pylint_runs_no_init_hook_the_guest_wrote(mounted, project, tmp_path):
    pytest.importorskip("pylint", reason="pylint is in the test extras; without it the init-hook attack cannot run")
    _, kc = mounted
    rc = lambda m: {".pylintrc": f'[MAIN]\ninit-hook=\'open({str(m)!r}, "w").write("x")\'\n'}  # noqa: E731
    control = marker()
    plant_on_host(tmp_path, {**rc(control), "m.py": "x = 1\n"})
    host([sys.executable, "-m", "pylint", "m.py"], tmp_path)
    assert control.exists(), "the control must fire"
    mark = marker()
    plant_in_guest(kc, "/out", rc(mark))
    host([sys.executable, "-m", "pylint", "helpers.py"], project)
    assert not mark.exists(), "LEAK: pylint ran the guest's init-hook"


@pytest.mark.parametrize(
    "code",
    [
        "with open('/plain/sparse-1.csv', 'wb') as f:\n    f.seek(1 << 40)\n    f.write(b'x')",
        "import os\nopen('/plain/sparse-2.csv', 'w').close()\nos.truncate('/plain/sparse-2.csv', 1 << 40)",
    ],
    ids=["seek-write", "truncate"],
)
def test_a_sparse_terabyte_is_refused_by_the_growth_quota(mounted, plain, code):
    _, kc = mounted
    run = execute(kc, code)
    assert run.content["status"] == "error", run.content
    assert "max_growth_bytes" in run.content["evalue"] and "apparent sizes" in run.content["evalue"], run.content
    for path in plain.glob("sparse-*.csv"):
        assert path.stat().st_size < 1 << 30


def test_a_read_only_working_folder_takes_writes_inside_and_the_host_is_unchanged(tmp_path):
    (tmp_path / "data.csv").write_text("a\n1\n")
    before = listing(tmp_path)
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(extra_arguments=["--SandboxKernel.working_folder=ro"], cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
        assert execute(kc, "%%writefile x.py\nprint('ran', 6 * 7)\n").content["status"] == "ok"
        run = execute(kc, "%run x.py")
        assert run.stream() == "ran 42\n", run.outputs
        code = "open('data.csv', 'a').write('2\\n')\nopen('out.csv', 'w').write('b\\n')\nopen('data.csv').read()"
        assert value(execute(kc, code)) == "'a\\n1\\n2\\n'"
        assert "read-only mount" in execute(kc, "open('more.csv', 'w').write('c')").stream("stderr")
    finally:
        stop_kernel(km, kc)
    assert listing(tmp_path) == before


def test_a_checkpoint_keeps_the_sandbox_layer(tmp_path):
    with Sandbox(mounts=[f"{tmp_path}:/out:rw"]) as sb:
        assert sb.run("%%writefile /out/kept.py\nK = 7\n").ok
        cp = sb.checkpoint()
        assert sb.run("import os\nos.remove('/out/kept.py')\nos.path.exists('/out/kept.py')").text == "False"
        sb.restore(cp)
        assert sb.run("open('/out/kept.py').read()").text == "'K = 7\\n'"
        assert sb.download("/out/kept.py") == b"K = 7\n"  # how the notice says to take it out
    assert not (tmp_path / "kept.py").exists()


def test_a_forged_call_past_the_driver_is_refused_by_the_supervisor(mounted, plain):
    """Guest code shares the worker's realm: it can call the driver with a node whose mount claims host_writes
    'any'. The supervisor applies its own copy of the mount's rules."""
    _, kc = mounted
    js = (
        "(FS) => { const root = FS.lookupPath('/plain').node;"
        " const forged = {...root, mount: {opts: {...root.mount.opts, hostWrites: 'any'}}}; forged.parent = forged;"
        " try { root.node_ops.mknod(forged, 'HEAD', 0o100644, 0) } catch (e) { return `${e.name} ${e.errno}` }"
        " return 'made' }"
    )
    run = execute(kc, f"import pyodide_js, pyodide.code\npyodide.code.run_js({js!r})(pyodide_js.FS)")
    assert value(run) == "'ErrnoError 2'", run.content  # Emscripten's EACCES
    assert not (plain / "HEAD").exists()


def test_json_and_txt_reach_the_host_only_from_a_mount_whose_suffixes_name_them(mounted, plain, opted):
    _, kc = mounted
    run = execute(kc, "open('/plain/notes.json', 'w').write('{}')\nopen('/plain/notes.json').read()")
    assert value(run) == "'{}'" and not (plain / "notes.json").exists()
    told = run.stream("stderr")
    assert "/plain/notes.json stays inside the sandbox" in told and "not host data by default" in told, told
    assert '"suffixes": [".json", ".txt"' in told, told  # how to opt in
    run = execute(
        kc,
        "open('/opted/notes.json', 'w').write('{}')\nimport os\nos.makedirs('/opted/sub', exist_ok=True)\nopen('/opted/sub/a.txt', 'w').write('t')",
    )
    assert run.content["status"] == "ok", run.content
    assert (opted / "notes.json").read_text() == "{}" and (opted / "sub" / "a.txt").read_text() == "t"  # opted in
    execute(kc, "open('/opted/package.json', 'w').write('{}')\nopen('/opted/requirements.txt', 'w').write('x')")
    assert not (opted / "package.json").exists() and not (opted / "requirements.txt").exists()  # tool names: never
    run = execute(kc, "open('/opted/x.log', 'w')")  # the mount's suffixes narrow the table
    assert run.content["ename"] == "PermissionError" and "must end in .csv, .json, .txt" in run.content["evalue"]


def test_the_suffixes_setting_only_narrows_the_table_or_adds_an_opt_in_suffix(tmp_path):
    from sandbox_kernel.sandbox.mounts import MountError, parse

    with pytest.raises(MountError, match=r"\.py is not a data suffix.*opt-in suffix: \.json, \.txt"):
        parse(f"{tmp_path}:/o:rw", tmp_path, {"/o": {"suffixes": [".csv", ".py"]}})
    assert parse(f"{tmp_path}:/o:rw", tmp_path, {"/o": {"suffixes": ["JSON", ".csv"]}}).suffixes == (".json", ".csv")
    assert parse(f"{tmp_path}:/o:rw", tmp_path, {"/o": {"suffixes": [".py"], "host_writes": "any"}}).suffixes


CMAKE_PROJECT = "cmake_minimum_required(VERSION 3.10)\nproject(p NONE)\n"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed (the host program to fool)")
def test_cmake_runs_no_include_the_guest_planted_through_its_cache(mounted, plain, tmp_path):
    """F1: CMakeCache.txt names any file as an include, whatever its suffix; `cmake --build` re-runs it."""
    _, kc = mounted

    def configure(folder: Path) -> Path:
        folder.mkdir()
        (folder / "CMakeLists.txt").write_text(CMAKE_PROJECT)
        assert host(["cmake", "-S", ".", "-B", "build"], folder).returncode == 0
        return folder / "build"

    def attack(build: Path, mark: Path) -> tuple[str, str]:
        cache = f"CMAKE_PROJECT_INCLUDE:FILEPATH={build}/notes.txt\n"
        return f"execute_process(COMMAND touch {mark})\n", cache

    control, control_build = marker(), configure(tmp_path / "control")
    include, cache = attack(control_build, control)
    (control_build / "notes.txt").write_text(include)
    with (control_build / "CMakeCache.txt").open("a") as f:
        f.write(cache)
    (tmp_path / "control" / "CMakeLists.txt").touch()
    host(["cmake", "--build", "build"], tmp_path / "control")
    assert control.exists(), "the control must fire"

    mark, build = marker(), configure(plain / "cmake")
    include, cache = attack(build, mark)
    code = (
        f"open('/plain/cmake/build/notes.txt', 'w').write({include!r})\n"
        f"open('/plain/cmake/build/CMakeCache.txt', 'a').write({cache!r})"
    )
    assert execute(kc, code).content["status"] == "ok"
    assert not (build / "notes.txt").exists() and "CMAKE_PROJECT_INCLUDE" not in (build / "CMakeCache.txt").read_text()
    (plain / "cmake" / "CMakeLists.txt").touch()
    host(["cmake", "--build", "build"], plain / "cmake")
    assert not mark.exists(), "LEAK: cmake ran the guest's include"


def test_a_refused_rename_over_a_host_file_leaves_it_and_the_source_as_they_were(mounted, capped):
    """F2: the bytes go to a fresh file beside the destination, renamed over it only once all are written."""
    _, kc = mounted
    (capped / "precious.csv").write_bytes(b"p" * 500)
    code = (
        "import os\nopen('/capped/t.bin', 'wb').write(b'n' * 2000)\n"  # stays in the layer (not a data suffix)
        "try:\n    os.replace('/capped/t.bin', '/capped/precious.csv')\nexcept OSError as e:\n    err = str(e)\n"
        "err, os.path.getsize('/capped/t.bin'), open('/capped/precious.csv', 'rb').read() == b'p' * 500"
    )
    err, size, same = eval(value(execute(kc, code)))
    assert "at most 1000 bytes" in err and "max_file_bytes" in err, err
    assert (size, same) == (2000, True)
    assert (capped / "precious.csv").read_bytes() == b"p" * 500
    assert sorted(p.name for p in capped.iterdir()) == ["precious.csv"]  # no partial file left
    code = "open('/capped/t2.bin', 'wb').write(b'ok')\nos.replace('/capped/t2.bin', '/capped/precious.csv')"
    assert execute(kc, code).content["status"] == "ok"
    assert (capped / "precious.csv").read_bytes() == b"ok"
    assert sorted(p.name for p in capped.iterdir()) == ["precious.csv"]
    (capped / "precious.csv").unlink()


TRY_WRITE = (
    "def try_write(path):\n    try:\n        with open(path, 'wb') as f:\n            f.write(b'y' * 600_000)\n"
    "        return 'written'\n    except OSError as e:\n        return str(e)\n"
)


def quota_empty_after(kc, quota: Path) -> None:
    """Removes the test's files through the guest (a real refund) and checks a 900 kB write fits again."""
    code = (
        "import os\nfor n in os.listdir('/quota'):\n    os.remove('/quota/' + n)\n"
        "open('/quota/fits.csv', 'wb').write(b'z' * 900_000)\nos.remove('/quota/fits.csv')"
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    assert not list(quota.iterdir())


def test_unlinking_a_file_still_open_gives_its_bytes_back_only_when_it_is_closed(mounted, quota):
    """F3.1: a removed file held open keeps its blocks (and takes more); the quota counts it until it is closed."""
    _, kc = mounted
    code = (
        "import os\nfds, err = [], None\nfor i in range(3):\n"
        "    fd = os.open(f'/quota/u{i}.csv', os.O_WRONLY | os.O_CREAT)\n"
        "    try:\n        os.write(fd, b'x' * 600_000)\n    except OSError as e:\n"
        "        err = str(e)\n        os.close(fd)\n        break\n"
        "    os.remove(f'/quota/u{i}.csv')\n    fds.append(fd)\n"
        "held = len(fds)\nfor fd in fds:\n    os.close(fd)\nheld, err"
    )
    held, err = eval(value(execute(kc, code)))
    assert held == 1 and "No space left on device" in (err or ""), (held, err)  # ENOSPC: the quota
    quota_empty_after(kc, quota)


def test_a_forged_rename_onto_itself_gives_nothing_back(mounted, quota):
    """F3.3: rename(a, a) is a no-op; it used to give the file's size back each time. The FS ends such a rename
    itself, so the guest calls the driver's rename directly (it shares the worker's realm), past that check; the
    same forged call straight to the file service is in host_ts/file_service_test.ts."""
    _, kc = mounted
    forge = (
        "(FS) => { const a = FS.lookupPath('/quota/a.csv').node;"
        " for (let i = 0; i < 3; i++) a.node_ops.rename(a, a.parent, 'a.csv'); return 'renamed' }"
    )
    code = (
        TRY_WRITE + "import pyodide_js, pyodide.code\nopen('/quota/a.csv', 'wb').write(b'x' * 600_000)\n"
        f"assert pyodide.code.run_js({forge!r})(pyodide_js.FS) == 'renamed'\ntry_write('/quota/b.csv')"
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    assert "max_growth_bytes" in eval(value(run))
    assert sum(p.stat().st_size for p in quota.iterdir()) <= QUOTA
    quota_empty_after(kc, quota)


def test_truncating_through_a_handle_counts_its_own_file_not_the_name_it_was_opened_by(mounted, quota):
    """F3.2: the handle's file moved away and another took its name: truncate(0) gives back the handle's 0 bytes."""
    _, kc = mounted
    code = (
        TRY_WRITE + "import os\nf = open('/quota/s.csv', 'wb')\nos.rename('/quota/s.csv', '/quota/t.csv')\n"
        "with open('/quota/s.csv', 'wb') as g:\n    g.write(b'x' * 600_000)\n"
        "f.truncate(0)\nf.close()\ntry_write('/quota/v.csv')"
    )
    err = eval(value(execute(kc, code)))
    assert "max_growth_bytes" in err, err
    assert sum(p.stat().st_size for p in quota.iterdir()) <= QUOTA
    quota_empty_after(kc, quota)


def test_writing_a_host_file_too_big_for_the_layer_is_refused_before_it_is_read(mounted, plain):
    """F5: copying a 1.5 GB host file up read it all first (the sandbox was killed); the size is checked first."""
    _, kc = mounted
    big = plain / "mid.bin"
    with big.open("wb") as f:
        f.truncate(1500 << 20)  # sparse: costs no disk
    try:
        code = (
            "kept = 1\ntry:\n    open('/plain/mid.bin', 'ab').write(b'x')\nexcept OSError as e:\n    err = str(e)\nerr"
        )
        run = execute(kc, code)
        assert run.content["status"] == "ok", run.content
        err = eval(value(run))
        assert "max_growth_bytes" in err and "1073741824 bytes" in err, err
        assert value(execute(kc, "kept")) == "1"  # the same sandbox
        assert big.stat().st_size == 1500 << 20
    finally:
        big.unlink()


def test_host_folders_keep_their_owners_access_and_file_modes_lose_write_for_others_and_exec(mounted, plain):
    """F4, F7: chmod that takes the owner's access to a folder away is refused; file modes are capped; a write drops an old exec bit."""
    _, kc = mounted
    (plain / "src").mkdir(mode=0o755)
    (plain / "src" / "mod.py").write_text("X = 1\n")
    (plain / "base.csv").write_text("a\n")
    (plain / "base.csv").chmod(0o644)
    (plain / "run.csv").write_text("#!/bin/sh\necho user\n")
    (plain / "run.csv").chmod(0o755)
    try:
        run = execute(kc, "import os\nos.chmod('/plain/src', 0)")
        assert run.content["ename"] == "PermissionError", run.content
        assert "does not take its owner's access to a host folder away" in run.content["evalue"]
        assert (plain / "src").stat().st_mode & 0o7777 == 0o755
        # shutil.copytree copies a folder's mode: one that keeps the owner's access is applied, less group write.
        copy = "import shutil\nos.mkdir('/tmp/t', 0o775)\nopen('/tmp/t/a.csv', 'w').write('x')\n"
        run = execute(kc, copy + "shutil.copytree('/tmp/t', '/plain/copied')")
        assert run.content["status"] == "ok", run.content
        assert (plain / "copied").stat().st_mode & 0o7777 == 0o755
        run = execute(kc, "os.chmod('/plain/base.csv', 0o4777)\nopen('/plain/run.csv', 'w').write('#!/bin/sh\\nid\\n')")
        assert run.content["status"] == "ok", run.content
        assert (plain / "base.csv").stat().st_mode & 0o7777 == 0o644  # no setuid, group write, exec
        assert (plain / "run.csv").stat().st_mode & 0o7777 == 0o644  # the guest's bytes are no program
    finally:
        shutil.rmtree(plain / "src")
        shutil.rmtree(plain / "copied", ignore_errors=True)
        (plain / "base.csv").unlink()
        (plain / "run.csv").unlink()


def test_a_checkpoint_restored_with_other_mounts_puts_each_layer_over_its_own_folder(tmp_path):
    """F8: the layer was keyed by the mount's index, so swapped mounts got each other's files and whiteouts."""
    cx, cy = tmp_path / "cx", tmp_path / "cy"
    for folder, name in ((cx, "userx.py"), (cy, "usery.py")):
        folder.mkdir()
        (folder / name).write_text("U = 1\n")
    with Sandbox(mounts=[f"{cx}:/a:rw", f"{cy}:/b:rw"]) as sb:
        assert sb.run("import os\nopen('/a/evil.py', 'w').write('E = 1')\nos.remove('/a/userx.py')").ok
        cp = sb.checkpoint()
    with Sandbox.from_checkpoint(cp, mounts=[f"{cy}:/b:rw", f"{cx}:/a:rw"]) as sb2:
        listed = sb2.run("import os\nsorted(os.listdir('/a')), sorted(os.listdir('/b'))").text
        assert listed == "(['evil.py'], ['usery.py'])", listed
    assert sorted(p.name for p in cx.iterdir()) == ["userx.py"] and sorted(p.name for p in cy.iterdir()) == ["usery.py"]


@pytest.mark.parametrize(("first", "then"), [("w.py", "w.csv"), ("v.csv", "v.py")])
def test_a_write_through_a_handle_whose_file_moved_to_the_other_layer_raises(mounted, plain, first, then):
    """F6: a rename between a host data name and a name that stays inside moves the file to the other layer; the
    open handle's later writes were lost without an error."""
    _, kc = mounted
    code = (
        f"import os\nf = open('/plain/{first}', 'w')\nf.write('first\\n'); f.flush()\n"
        f"os.rename('/plain/{first}', '/plain/{then}')\n"
        "try:\n    f.write('second\\n'); f.flush()\n    err = None\nexcept OSError as e:\n    err = str(e)\n"
        "try:\n    f.close()\nexcept OSError:\n    pass\n"
        f"err, open('/plain/{then}').read()"
    )
    run = execute(kc, code)
    assert run.content["status"] == "ok", run.content
    err, text = eval(value(run))
    assert err is not None and "was moved between the host folder and the sandbox's layer" in err, err
    assert text == "first\n"
    execute(kc, f"os.remove('/plain/{then}')")


def test_notices_are_capped_per_cell_and_a_too_deep_path_stays_inside(mounted, plain):
    """F9: one notice per file flooded the cell (2,239 lines for a loop); a 300-deep path left 256 empty folders
    on the host and an error that did not say why."""
    _, kc = mounted
    run = execute(kc, "import os\nos.makedirs('/plain/many', exist_ok=True)\n"
                      "for i in range(20):\n    open(f'/plain/many/f{i}.bin', 'w').write('x')")  # fmt: skip
    assert run.content["status"] == "ok", run.content
    lines = run.stream("stderr").splitlines()
    assert len([line for line in lines if "stays inside the sandbox" in line]) == 5, lines
    assert lines[-1].startswith("sandbox: and 15 more files stayed inside the sandbox"), lines
    assert not (plain / "many").exists()
    deep = "/".join(["d"] * 257)
    run = execute(kc, f"os.makedirs('/plain/{deep}')\nopen('/plain/{deep}/x.csv', 'w').write('a')\n"
                      f"open('/plain/{deep}/x.csv').read()")  # fmt: skip
    assert value(run) == "'a'" and "too deep for the host folder (at most 256 names)" in run.stream("stderr")
    assert not (plain / "d").exists()  # no empty folders left on the host
