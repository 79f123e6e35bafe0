"""Attacks through host folders shown in the sandbox (SandboxKernel.mounts).

Promise (docs/security.md): a ':ro' mount can be read and its host folder never changed (writes work inside the
sandbox, in its own layer over the folder, and the user is told: "Host folders are default-deny"); a ':rw' mount
can be read and written (its data files reach the host); nothing outside the mounted folders
is reachable through them: "Symlinks and '..' inside a mount do not lead outside it". Deno checks its
permissions on the path it is given, not on a symlink's target, so the kernel refuses mounts that hold
symlinks leading out, and clears setuid/setgid/world-writable bits that the guest sets.
"""

from __future__ import annotations

import json
import queue
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from attack_kit import (
    assert_alive,
    assert_denied,
    assert_refused,
    attack,
    fingerprint,
    os_layers,
    private_root,
    q,
    result,
    start_or_refusal,
    token,
    tree,
)

from conftest import execute, start_kernel, stop_kernel

ROOTS = "readable: /data, /out; writable: /out"
UNSAFE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH
MANY = 10_001  # more entries than the kernel's symlink / mode scans look at (MAX_SCAN = 10_000)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """ro/ and rw/ folders for the mounts, a secret and a bystander file next to them."""
    root = tmp_path_factory.mktemp("mounts")
    ro, rw, secret_dir, victim_dir = (root / n for n in ("ro", "rw", "secret", "victimdir"))
    for folder in (ro, rw, secret_dir, victim_dir):
        folder.mkdir()
    secret = token("mount")
    (secret_dir / "token.txt").write_text(secret)
    (ro / "in.txt").write_text("ro-content")
    (ro / "inner").symlink_to("in.txt")  # a symlink that stays inside the mount is fine
    victim = root / "victim.txt"
    victim.write_text("owned by the test")
    return SimpleNamespace(
        root=root, ro=ro, rw=rw, secret=secret, secret_dir=secret_dir, victim=victim, victim_dir=victim_dir
    )


@pytest.fixture(scope="module")
def mounted(layout):
    km, kc = start_kernel(
        [
            f"--SandboxKernel.mounts=['{layout.ro}:/data:ro', '{layout.rw}:/out:rw']",
            """--SandboxKernel.mount_limits={"/out": {"suffixes": [".txt", ".csv"]}}""",
        ]
    )
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture
def unchanged(layout):
    """Asserts after the test that ro/ and everything outside the mounts are as they were."""
    before = {p: tree(p) for p in (layout.ro, layout.secret_dir, layout.victim_dir)}
    victim = fingerprint(layout.victim)
    yield
    assert fingerprint(layout.victim) == victim, "LEAK: a file outside the mounts was changed"
    for path, fingerprints in before.items():
        assert tree(path) == fingerprints, f"LEAK: {path} was changed"


@pytest.fixture
def fresh_overlay(mounted):
    """After the test, the sandbox's layer over the mounts is emptied (the mounts show the host folders again)."""
    yield
    _, kc = mounted
    code = "import shutil, os\nshutil.rmtree('/.sandbox_overlay', ignore_errors=True)\nos.mkdir('/.sandbox_overlay')"
    assert execute(kc, code).content["status"] == "ok"


HOST_ROOT = "import pyodide_js\nhost = pyodide_js.FS.lookupPath({guest}).node.mount.opts.root\n"


def with_host_path(guest: str, js_body: str) -> str:
    """Guest code that first learns the mount's host folder (as any attacker can), then runs JS with it."""
    return (
        HOST_ROOT.format(guest=q(guest))
        + "import pyodide.code\n"
        + f"await pyodide.code.run_js({f'(async (host) => {{ {js_body} }})'!r})(host)"
    )


def with_fs(js_body: str) -> str:
    """Guest code that runs JS with Pyodide's FS and returns the name and number of the error it throws.

    FS throws an ErrnoError object, which reaches Python as an opaque JsException: caught in JS, the
    refusal can be told apart from any other failure. Numbers are Emscripten's: 2 is EACCES, 44 ENOENT.
    """
    js = f"(FS) => {{ try {{ {js_body} }} catch (e) {{ return `${{e.name}} ${{e.errno}}` }} return 'no error' }}"
    return f"import pyodide_js, pyodide.code\npyodide.code.run_js({js!r})(pyodide_js.FS)"


EACCES = "'ErrnoError 2'"
ENOENT = "'ErrnoError 44'"


def link_refusal(kc) -> str:
    """How Deno's attempt to follow a symlink out of a mount ends, by the OS layers of this kernel.

    In the private root (the namespaces layer) the link's target does not exist; under Landlock alone,
    opening it is refused. Without either, Deno follows the link: there is no refusal to expect.
    """
    if private_root(kc):
        return "NotFound: No such file or directory (os error 2)"
    if "landlock" in os_layers(kc):
        return "Permission denied (os error 13)"
    pytest.fail(f"no OS layer stops Deno from following a symlink out of a mount here: {os_layers(kc)}")


# ---- sanity ------------------------------------------------------------------------------------


def test_read_only_mount_is_readable(mounted):
    _, kc = mounted
    assert result(execute(kc, "open('/data/in.txt').read()")) == "'ro-content'"
    assert result(execute(kc, "open('/data/inner').read()")) == "'ro-content'"
    assert "in.txt" in result(execute(kc, "import os\nsorted(os.listdir('/data'))"))


def test_writable_mount_writes_reach_the_host(mounted, layout):
    _, kc = mounted
    run = execute(kc, "with open('/out/result.txt', 'w') as f:\n    f.write('x,y\\n')\nopen('/out/result.txt').read()")
    assert result(run) == "'x,y\\n'"
    assert (layout.rw / "result.txt").read_text() == "x,y\n"
    (layout.rw / "result.txt").unlink()


def test_guest_learns_the_host_folder_of_a_mount(mounted, layout):
    """Not secret (the attacks below use it): Pyodide's mount keeps the host folder it was given."""
    _, kc = mounted
    assert result(execute(kc, HOST_ROOT.format(guest=q("/data")) + "host")) == repr(str(layout.ro))


def test_mount_errors_do_not_reveal_host_paths_to_python(mounted, layout):
    _, kc = mounted
    run = attack(kc, "open('/data/x.txt').read()")
    assert run.content["ename"] == "FileNotFoundError"
    assert str(layout.root) not in json.dumps(run.content)
    assert "/data" in run.content["evalue"]


# ---- the read-only mount ------------------------------------------------------------------------

RO_WRITES = {
    "open-w-new": "open('/data/new.txt', 'w').write('x')",
    "open-a-existing": "open('/data/in.txt', 'a').write('x')",
    "open-r+-existing": "open('/data/in.txt', 'r+').write('x')",
    "os.open-O_WRONLY": "import os\nos.write(os.open('/data/in.txt', os.O_WRONLY), b'x')",
    "os.open-O_CREAT": "import os\nos.write(os.open('/data/new.txt', os.O_WRONLY | os.O_CREAT), b'x')",
    "pathlib-write_text": "import pathlib\npathlib.Path('/data/in.txt').write_text('x')",
    "os.remove": "import os\nos.remove('/data/in.txt')",
    "os.rename-to-rw": "import os\nos.rename('/data/in.txt', '/out/stolen.txt')",
    "os.mkdir": "import os\nos.mkdir('/data/evil')",
    "os.chmod": "import os\nos.chmod('/data/in.txt', 0o777)",
    "shutil.rmtree": "import shutil\nshutil.rmtree('/data', ignore_errors=True)",  # all but the mount point
}
FIRST_WRITES = {"open-w-new", "open-a-existing", "os.remove", "shutil.rmtree"}  # a deletion is told each time
RO_FS_WRITES = {
    "FS.writeFile-new": "FS.writeFile('/data/js.txt', 'x')",
    "FS.writeFile-existing": "FS.writeFile('/data/in.txt', 'x')",
    "FS.unlink": "FS.unlink('/data/in.txt')",
    "FS.rename": "FS.rename('/data/in.txt', '/data/moved.txt')",
}
RO_HOST_PATH_WRITES = {
    "deno-writeTextFileSync-host-path": with_host_path("/data", "Deno.writeTextFileSync(host + '/in.txt', 'x')"),
    "deno-writeTextFileSync-host-new": with_host_path("/data", "Deno.writeTextFileSync(host + '/new.txt', 'x')"),
    "deno-removeSync-host-path": with_host_path("/data", "Deno.removeSync(host + '/in.txt')"),
    "node-fs-writeFileSync-host-path": with_host_path(
        "/data", "(await import('node:fs')).writeFileSync(host + '/in.txt', 'x')"
    ),
}


@pytest.mark.parametrize("how", list(RO_WRITES))
def test_read_only_mount_writes_stay_inside_the_sandbox(mounted, unchanged, fresh_overlay, how):
    """The host folder is unchanged (`unchanged`); the write works in the sandbox and the user is told."""
    _, kc = mounted
    run = attack(kc, RO_WRITES[how])
    if how == "os.rename-to-rw":  # another mount: another file system, as a rename across devices
        assert run.content["ename"] == "OSError" and "Cross-device" in run.content["evalue"], run.content
        return
    assert run.content["status"] == "ok", run.content
    if how in FIRST_WRITES:  # told once per file (and a folder alone is no file the user must hear of)
        assert "stays inside the sandbox" in run.stream("stderr"), run.outputs


@pytest.mark.parametrize("how", list(RO_FS_WRITES))
def test_read_only_mount_js_fs_writes_stay_inside_the_sandbox(mounted, unchanged, fresh_overlay, how):
    """Pyodide's FS, below Python's guards: the same overlay driver serves it."""
    _, kc = mounted
    assert result(attack(kc, with_fs(RO_FS_WRITES[how]))) == "'no error'"


@pytest.mark.parametrize("how", list(RO_HOST_PATH_WRITES))
def test_read_only_mount_refuses_js_writes_to_the_host_path(mounted, unchanged, layout, how):
    _, kc = mounted
    run = attack(kc, RO_HOST_PATH_WRITES[how])
    assert_refused(run, ["JsException"], "NotCapable: Requires write access to ", str(layout.ro))


REMOUNTS = {
    "host-root": "FS.mkdirTree('/x'); FS.mount(FS.filesystems.NODEFS, {root: '/'}, '/x');"
    " return FS.readFile('/x/etc/passwd', {encoding: 'utf8'})",
    "mount-parent": "FS.mkdirTree('/y'); FS.mount(FS.filesystems.NODEFS, {root: ROOT}, '/y');"
    " return FS.readFile('/y/secret/token.txt', {encoding: 'utf8'})",
    "ro-folder-again": "FS.mkdirTree('/z'); FS.mount(FS.filesystems.NODEFS, {root: RO}, '/z');"
    " FS.writeFile('/z/in.txt', 'x'); return 'written'",
}


@pytest.mark.parametrize("how", list(REMOUNTS))
def test_remounting_does_not_widen_access(mounted, unchanged, layout, how):
    """Pyodide's FS.mount is reachable, but which host folders it can use is still Deno's decision."""
    _, kc = mounted
    body = REMOUNTS[how].replace("ROOT", q(layout.root)).replace("RO", q(layout.ro))
    run = attack(kc, with_fs(body), layout.secret, "root:x:0:0")
    assert result(run) == EACCES


# ---- symlinks ------------------------------------------------------------------------------------

ESCAPING = {
    "file-link": ("ro", "link", "{secret}/token.txt"),
    "dir-link": ("ro", "dirlink", "{secret}"),
    "relative-link": ("ro", "rel", "../secret/token.txt"),
    "nested-link": ("ro", "sub/deeper/link", "{secret}/token.txt"),
    "etc-passwd": ("ro", "passwd", "/etc/passwd"),
    "root-dir": ("ro", "slash", "/"),
    "rw-file-link": ("rw", "escape", "{victim}"),
    "rw-dir-link": ("rw", "dirlink", "{victimdir}"),
}


@pytest.mark.parametrize("what", list(ESCAPING))
def test_mount_holding_a_symlink_that_leaves_it_is_refused(tmp_path, what):
    """The guest's JS could follow such a link (Deno checks the path, not the target): no such mount starts."""
    where, name, target = ESCAPING[what]
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "token.txt").write_text(token("link"))
    (tmp_path / "victim.txt").write_text("owned by the test")
    (tmp_path / "victimdir").mkdir()
    folder = tmp_path / where
    link = folder / name
    link.parent.mkdir(parents=True)
    link.symlink_to(
        target.format(secret=tmp_path / "secret", victim=tmp_path / "victim.txt", victimdir=tmp_path / "victimdir")
    )
    mode = "rw" if where == "rw" else "ro"
    started = start_or_refusal([f"--SandboxKernel.mounts=['{folder}:/m:{mode}']"], tmp_path)
    if not isinstance(started, str):
        stop_kernel(*started)
        pytest.fail(f"a mount holding {link} -> {target} was accepted")
    assert "symlinks that lead outside" in started and str(link) in started, started[-2000:]


def test_symlink_hidden_behind_many_files_is_refused_too(tmp_path):
    """The start-up scan stops at 10,000 entries, so the kernel starts; the OS layers refuse the read."""
    secret = token("deep")
    (tmp_path / "secret.txt").write_text(secret)
    folder = tmp_path / "big"
    folder.mkdir()
    for i in range(MANY):
        (folder / f"f{i:05d}.txt").touch()
    (folder / "zsub").mkdir()
    (folder / "zsub" / "link").symlink_to(tmp_path / "secret.txt")
    started = start_or_refusal([f"--SandboxKernel.mounts=['{folder}:/data:ro']"], tmp_path)
    assert not isinstance(started, str), f"the scan went past {MANY - 1} entries after all: {started[-2000:]}"
    km, kc = started
    try:
        run = attack(kc, with_host_path("/data", "return Deno.readTextFileSync(host + '/zsub/link')"), secret)
        assert_refused(run, ["JsException"], link_refusal(kc))
    finally:
        stop_kernel(km, kc)


@pytest.fixture
def late_links(layout):
    """Symlinks that appear in the mounted folders AFTER the kernel started (made by some host process)."""
    links = {
        layout.ro / "late": layout.secret_dir / "token.txt",
        layout.ro / "latedir": layout.secret_dir,
        layout.rw / "late-escape": layout.victim,
        layout.rw / "late-dir": layout.victim_dir,
    }
    for link, target in links.items():
        link.symlink_to(target)
    yield
    for link in links:
        link.unlink()
    layout.victim.write_text("owned by the test")
    (layout.victim_dir / "planted.txt").unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("code", "ename", "message"),
    [
        ("open('/data/late').read()", "FileNotFoundError", "No such file or directory: '/data/late'"),
        (
            "open('/data/latedir/token.txt').read()",
            "FileNotFoundError",
            "No such file or directory: '/data/latedir/token.txt'",
        ),
        ("import os\nos.listdir('/data/latedir')", "FileNotFoundError", "No such file or directory: '/data/latedir'"),
        pytest.param(
            "import shutil\nshutil.copy('/data/late', '/out/copy.txt')\nopen('/out/copy.txt').read()",
            "FileNotFoundError",
            "No such file or directory: '/data/late'",
        ),
        (with_fs("return FS.readFile('/data/late', {encoding: 'utf8'})"), None, ENOENT),
        # Pyodide resolves the link in its own file system, where its target does not exist.
        ("open('/out/late-escape', 'w').write('PWNED')", "FileNotFoundError", "No such file or directory: '/out/late"),
        (
            "open('/out/late-dir/planted.txt', 'w').write('PWNED')",
            "FileNotFoundError",
            "No such file or directory: '/out/late-dir/planted.txt'",
        ),
    ],
    ids=["file-link", "dir-link-file", "dir-link-listing", "copy", "FS.readFile", "write-file-link", "write-dir-link"],
)
def test_python_does_not_follow_symlinks_out_of_a_mount(mounted, late_links, unchanged, layout, code, ename, message):
    """Pyodide resolves a link's target inside its own file system, where the host's paths do not exist."""
    _, kc = mounted
    run = attack(kc, code, layout.secret, str(layout.secret_dir))
    if ename is None:  # the code catches FS's error and returns it
        assert result(run) == message
    else:
        assert_refused(run, [ename], message)
    assert not (layout.rw / "copy.txt").exists()


def test_a_file_can_be_copied_out_of_a_read_only_mount(mounted, layout):
    """A ':ro' mount can be read: shutil.copy from it into a ':rw' mount is a read and a write there."""
    _, kc = mounted
    try:
        run = execute(
            kc, "import shutil\nshutil.copy('/data/in.txt', '/out/copied.txt')\nopen('/out/copied.txt').read()"
        )
        assert result(run) == "'ro-content'"
    finally:
        (layout.rw / "copied.txt").unlink(missing_ok=True)


LATE_LINK_ATTACKS = {
    "read-file-link": ("/data", "return Deno.readTextFileSync(host + '/late')", None),
    "read-dir-link": ("/data", "return Deno.readTextFileSync(host + '/latedir/token.txt')", None),
    "write-file-link": ("/out", "Deno.writeTextFileSync(host + '/late-escape', 'PWNED'); return 'ok'", "victim.txt"),
    "write-dir-link": (
        "/out",
        "Deno.writeTextFileSync(host + '/late-dir/planted.txt', 'PWNED'); return 'ok'",
        "victimdir/planted.txt",
    ),
}


@pytest.mark.parametrize("how", list(LATE_LINK_ATTACKS))
def test_symlinks_that_appear_after_the_start_do_not_lead_out(mounted, late_links, layout, how):
    """Made by another host process after the start check: Landlock checks the real file (os_sandbox, default)."""
    _, kc = mounted
    guest, body, outside = LATE_LINK_ATTACKS[how]
    before = fingerprint(layout.root / outside) if outside else None
    run = attack(kc, with_host_path(guest, body), layout.secret)
    # Writes: the worker may write no host file at all (the supervisor makes every change to a mount).
    refusal = "NotCapable: Requires write access to " if outside else link_refusal(kc)
    assert_refused(run, ["JsException"], refusal)
    if outside:
        assert fingerprint(layout.root / outside) == before, f"LEAK: {outside} (outside the mount) was written"


@pytest.mark.parametrize(
    ("code", "ename", "message"),
    [
        ("import os\nos.symlink('/etc', '/out/etc')", "PermissionError", "'/etc' is not in the sandbox"),
        (
            with_host_path("/out", "Deno.symlinkSync('/etc/passwd', host + '/pw'); return 'made'"),
            "JsException",
            "NotCapable: Deno.symlinkSync() requires unscoped --allow-read and --allow-write permissions",
        ),
        (
            with_host_path("/out", "(await import('node:fs')).symlinkSync('/etc', host + '/etc'); return 'made'"),
            "JsException",
            "NotCapable: Deno.symlinkSync() requires unscoped --allow-read and --allow-write permissions",
        ),
        (
            with_host_path("/out", "Deno.linkSync(host + '/../victim.txt', host + '/hard.txt'); return 'made'"),
            "JsException",
            "NotCapable: Requires read access to ",
        ),
    ],
    ids=["os.symlink-out", "deno-symlinkSync", "node-symlinkSync", "deno-hardlink-out"],
)
def test_guest_cannot_create_links_in_a_writable_mount(mounted, unchanged, layout, code, ename, message):
    _, kc = mounted
    before = tree(layout.rw)
    run = attack(kc, code)
    assert_refused(run, [ename], message)
    assert tree(layout.rw) == before


def test_a_link_made_in_a_writable_mount_stays_inside_the_sandbox(mounted, unchanged, fresh_overlay, layout):
    _, kc = mounted
    before = tree(layout.rw)
    run = attack(kc, "import os\nos.symlink('/data/in.txt', '/out/alias')\nos.readlink('/out/alias')")
    assert result(run) == "'/data/in.txt'"
    assert "/out/alias stays inside the sandbox" in run.stream("stderr")
    assert tree(layout.rw) == before


# ---- '..' traversal ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "ename", "message"),
    [
        # '..' is resolved in the guest's own file system, whose root holds no host folder.
        ("open('/out/../../{root}/victim.txt').read()", "FileNotFoundError", "No such file or directory"),
        ("open('/out/../../{root}/secret/token.txt').read()", "FileNotFoundError", "No such file or directory"),
        ("open('/data/../etc/passwd').read()", "PermissionError", "'/etc/passwd' is not in the sandbox"),
        (
            "open('/out/../out/../../{root}/victim.txt', 'w').write('x')",
            "FileNotFoundError",
            "No such file or directory",
        ),
    ],
    ids=["read-victim", "read-secret", "etc-passwd", "write-victim"],
)
def test_dotdot_from_a_mount_stays_in_the_sandbox(mounted, unchanged, layout, code, ename, message):
    _, kc = mounted
    run = attack(kc, code.replace("{root}", str(layout.root).lstrip("/")), layout.secret, "root:x:0:0")
    assert_refused(run, [ename], message)


def test_the_parent_of_a_mount_is_the_guests_own_root(mounted, layout):
    _, kc = mounted
    listed = set(eval(result(attack(kc, "import os\nos.listdir('/out/..')"))))
    assert {"tmp", "home", "data", "out"} <= listed, listed
    host_names = {p.name for p in layout.root.iterdir()}  # ro, rw, secret, victimdir, victim.txt
    assert not listed & (host_names - {"data", "out"}), listed


@pytest.mark.parametrize(
    "body",
    [
        "return Deno.readTextFileSync(host + '/../secret/token.txt')",
        "Deno.writeTextFileSync(host + '/../victim.txt', 'PWNED'); return 'written'",
        "return [...Deno.readDirSync(host + '/..')].map((e) => e.name).join(',')",
    ],
    ids=["read", "write", "list"],
)
def test_dotdot_from_a_host_path_is_refused(mounted, unchanged, layout, body):
    _, kc = mounted
    run = attack(kc, with_host_path("/out", body), layout.secret, "victimdir")
    assert_denied(run)


# ---- file modes of what the guest writes ---------------------------------------------------------


def test_setuid_bits_set_by_the_guest_do_not_stay_on_the_host(mounted, layout):
    _, kc = mounted
    target = layout.rw / "tool.txt"
    try:
        code = "import os\nopen('/out/tool.txt', 'w').write('#!/bin/sh\\nid\\n')\nos.chmod('/out/tool.txt', 0o6777)"
        execute(kc, code)
        assert_alive(kc)
        mode = target.stat().st_mode
        assert not mode & UNSAFE_BITS, f"unsafe mode on the host: {stat.filemode(mode)}"
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(
            "import os, time\nopen('/out/win1.txt', 'w').write('x')\nos.chmod('/out/win1.txt', 0o6755)\ntime.sleep(3)",
            id="chmod-6755",
        ),
        # New files get the usual umask (022) as they are made: never world-writable, not even for a moment.
        pytest.param("import time\nopen('/out/win2.txt', 'w').write('x')\ntime.sleep(3)", id="plain-new-file"),
    ],
)
def test_unsafe_modes_never_appear_on_the_host_while_a_cell_runs(mounted, layout, code):
    _, kc = mounted
    target = layout.rw / ("win1.txt" if "chmod" in code else "win2.txt")
    msg_id = kc.execute(code)  # the cell sleeps 3 s after it made the file: the host looks meanwhile
    seen = []
    try:
        deadline = time.monotonic() + 30
        while True:  # sample the file's mode until the cell's reply comes
            if target.exists():
                seen.append(target.stat().st_mode)
            try:
                reply = kc.get_shell_msg(timeout=0.05)
            except queue.Empty:
                assert time.monotonic() < deadline, "the cell never replied"
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["status"] == "ok", reply["content"]
        assert_alive(kc)
        unsafe = {stat.filemode(m) for m in seen if m & UNSAFE_BITS}
        assert seen and not unsafe, f"the host held {unsafe} while the cell ran"
    finally:
        target.unlink(missing_ok=True)


def test_unsafe_modes_are_refused_however_many_files_the_mount_holds(tmp_path):
    """The supervisor cleans a mode when it is set: no scan with a ceiling to outrun (10,001 files first)."""
    folder = tmp_path / "out"
    folder.mkdir()
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{folder}:/out:rw']"])
    try:
        code = (
            f"import os\nfor i in range({MANY}):\n    open(f'/out/f{{i:05d}}.csv', 'w').close()\n"
            "os.mkdir('/out/zsub')\nopen('/out/zsub/tool.csv', 'w').write('x')\nos.chmod('/out/zsub/tool.csv', 0o6777)"
        )
        execute(kc, code, timeout=180)
        assert_alive(kc)
        mode = (folder / "zsub" / "tool.csv").stat().st_mode
        assert not mode & UNSAFE_BITS, f"unsafe mode left on the host: {stat.filemode(mode)}"
    finally:
        stop_kernel(km, kc)


def test_js_writes_around_pythons_checks_are_refused(mounted, layout):
    """The worker may not write host files at all: guest JS that goes around Python meets Deno's refusal."""
    _, kc = mounted
    run = execute(kc, with_host_path("/out", "Deno.writeTextFileSync(host + '/tool.exe', 'x'); return 'ok'"))
    assert_refused(run, ["JsException"], "NotCapable: Requires write access to ")
    assert not (layout.rw / "tool.exe").exists()
    assert_alive(kc)


def test_hard_to_see_paths_in_the_listing_are_the_mounts_own(mounted, fresh_overlay, layout):
    """Sanity: listing a mount shows exactly the host folder's entries."""
    _, kc = mounted
    listed = set(eval(result(execute(kc, "import os\nsorted(os.listdir('/data'))"))))
    assert listed == {p.name for p in Path(layout.ro).iterdir()}


# ---- the total size of a mount -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "open('/out/sparse.csv', 'wb').truncate(1 << 40)",
        "import os\nopen('/out/sparse.csv', 'wb').close()\nos.truncate('/out/sparse.csv', 1 << 40)",
        "f = open('/out/sparse.csv', 'wb')\nf.seek(1 << 40)\nf.write(b'x')\nf.close()",
        "for i in range(20):\n    with open(f'/out/part{i}.csv', 'wb') as f:\n        f.write(b'x' * (64 << 10))",
        "import pyodide_js\npyodide_js.FS.writeFile('/out/big.csv', 'y' * (2 << 20))",
    ],
    ids=["truncate-1TiB", "os.truncate-1TiB", "seek-1TiB", "many-files", "js-fs"],
)
def test_max_total_bytes_bounds_a_mount_sparse_files_included(tmp_path, code):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "already.bin").write_bytes(b"z" * 1000)  # counted from the start
    limits = json.dumps({"/out": {"max_total_bytes": 1 << 20}})
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{folder}:/out:rw']", f"--SandboxKernel.mount_limits={limits}"])
    try:
        run = execute(kc, code, timeout=120)
        assert run.content["status"] == "error", run.content
        if run.content["ename"] != "JsException":  # Python's error carries the host's reason
            assert "may hold at most 1048576 bytes" in run.content["evalue"], run.content["evalue"]
            assert "max_total_bytes" in run.content["evalue"]
        total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        assert total <= 1 << 20, f"the mount holds {total} bytes"
        assert_alive(kc)
    finally:
        stop_kernel(km, kc)


def test_suffix_limits_hold_past_ten_thousand_entries(tmp_path):
    """No scan with a ceiling: the rule is applied to the write itself, whatever else the mount holds."""
    folder = tmp_path / "out"
    folder.mkdir()
    for i in range(MANY):
        (folder / f"f{i:05d}.csv").touch()
    limits = json.dumps({"/out": {"suffixes": [".csv"]}})
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{folder}:/out:rw']", f"--SandboxKernel.mount_limits={limits}"])
    try:
        code = "import os, pyodide_js\nos.mkdir('/out/zzz')\npyodide_js.FS.writeFile('/out/zzz/tool.txt', 'x')"
        run = execute(kc, code)
        assert run.content["ename"] == "JsException", run.content
        assert not (folder / "zzz" / "tool.txt").exists()
        run = execute(kc, "open('/out/zzz/tool.txt', 'w')")
        assert run.content["ename"] == "PermissionError" and "must end in .csv" in run.content["evalue"]
    finally:
        stop_kernel(km, kc)
