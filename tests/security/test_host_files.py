"""Attacks on the host from a sandbox with the default settings: files, environment, processes.

Promise (docs/security.md): the Deno host has no env, run, ffi or sys permission; it may read only
the host code, the cached Pyodide and the guest wheels, and write nothing but its own socket. Guest
code reaches every JS global (`import js`), so each attack is tried through Python and through the
raw Deno / Node APIs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from attack_kit import (
    assert_alive,
    assert_denied,
    assert_no_leak,
    assert_refused,
    attack,
    error,
    fingerprint,
    js_cell,
    private_root,
    process_environ,
    py_env,
    py_read_file,
    py_subprocess_touch,
    py_write_file,
    q,
    result,
    token,
    tree,
)

from conftest import execute, start_kernel, stop_kernel
from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision
from test_lifecycle import sandbox_pids

ENV_NAME = "SBK_ATTACK_SECRET"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Host-side secrets and bystander files that the guest must never see or touch."""
    root = tmp_path_factory.mktemp("host-secrets")
    secret = token("file")
    secret_file = root / f"secret-{token('name')}.txt"
    secret_file.write_text(secret)
    victim = root / "victim.txt"
    victim.write_text("owned by the test")
    return SimpleNamespace(
        root=root,
        secret=secret,
        secret_file=secret_file,
        victim=victim,
        env_value=token("env"),
        api_key=token("apikey"),
        passwd_line=Path("/etc/passwd").read_text().splitlines()[0],
    )


@pytest.fixture(scope="module")
def target(host):
    km, kc = start_kernel(
        ['--SandboxKernel.skills=["SignerSkill"]'], env={ENV_NAME: host.env_value, "SANDBOX_DEMO_API_KEY": host.api_key}
    )
    yield km, kc
    stop_kernel(km, kc)


def needles(host, km) -> tuple[str, ...]:
    """Everything that must never reach the frontend."""
    return host.secret, host.env_value, host.api_key, km.session.key.decode(), host.passwd_line


def read_target(name: str, host, km) -> tuple[str, str]:
    """(absolute host path, its secret content) for a read attack."""
    if name == "token-file":
        return str(host.secret_file), host.secret
    if name == "etc-passwd":
        return "/etc/passwd", host.passwd_line
    assert name == "connection-file"
    return km.connection_file, km.session.key.decode()


# ---- reading host files -----------------------------------------------------------------

PY_READERS = {
    "python-open": py_read_file,
    "python-pathlib": lambda p: f"import pathlib\npathlib.Path({q(p)}).read_bytes()",
    "python-os-open": lambda p: f"import os\nos.read(os.open({q(p)}, os.O_RDONLY), 4096)",
}
JS_READERS = {
    "deno-readTextFileSync": lambda p: js_cell(f"return Deno.readTextFileSync({q(p)})"),
    "deno-readFile": lambda p: js_cell(f"return new TextDecoder().decode(await Deno.readFile({q(p)}))"),
    "deno-readFileSync": lambda p: js_cell(f"return new TextDecoder().decode(Deno.readFileSync({q(p)}))"),
    "python-js-readFileSync": lambda p: f"import js\nbytes(js.Deno.readFileSync({q(p)}).to_py())",
    "deno-openSync-readSync": lambda p: js_cell(
        f"const f = Deno.openSync({q(p)}); const b = new Uint8Array(4096); const n = f.readSync(b);"
        " return new TextDecoder().decode(b.subarray(0, n))"
    ),
    "deno-statSync": lambda p: js_cell(f"return JSON.stringify(Deno.statSync({q(p)}))"),
    "node-fs-readFileSync": lambda p: js_cell(
        f"const fs = await import('node:fs'); return fs.readFileSync({q(p)}, 'utf8')"
    ),
    "node-fs-promises": lambda p: js_cell(
        f"const fs = await import('node:fs/promises'); return await fs.readFile({q(p)}, 'utf8')"
    ),
    "fetch-file-url": lambda p: js_cell(f"return await (await fetch('file://' + {q(p)})).text()"),
    "function-constructor-globalThis": lambda p: js_cell(
        f"const g = ({{}}).constructor.constructor('return globalThis')(); return g.Deno.readTextFileSync({q(p)})"
    ),
    "python-js-eval": lambda p: f"import js\njs.eval({q(f'Deno.readTextFileSync({q(p)})')})",
}


@pytest.mark.parametrize("where", ["token-file", "etc-passwd", "connection-file"])
@pytest.mark.parametrize("how", list(PY_READERS))
def test_python_cannot_read_host_files(target, host, how, where):
    km, kc = target
    path, content = read_target(where, host, km)
    run = attack(kc, PY_READERS[how](path), content, *needles(host, km))
    ename, evalue = error(run)
    if path.startswith("/tmp/"):  # the guest has a /tmp of its own (in memory): the host's is not there
        assert ename == "FileNotFoundError", evalue
    else:  # anything else outside the sandbox is refused with a message that names what is allowed
        assert_refused(run, ["PermissionError"], "not in the sandbox", "readable: none; writable: none")


@pytest.mark.parametrize("where", ["token-file", "etc-passwd", "connection-file"])
@pytest.mark.parametrize("how", list(JS_READERS))
def test_js_cannot_read_host_files(target, host, how, where):
    km, kc = target
    path, content = read_target(where, host, km)
    run = attack(kc, JS_READERS[how](path), content, *needles(host, km))
    assert_denied(run, "read")


def test_dynamic_import_of_a_host_file_is_refused(target, host):
    km, kc = target
    code = js_cell(f"return (await import('file://' + {q(host.secret_file)}, {{with: {{type: 'text'}}}})).default")
    run = attack(kc, code, *needles(host, km))
    ename, evalue = error(run)
    # Deno looks for the module before it checks the permission: in the private root there is none to find.
    refusal = "Cannot find module" if private_root(kc) else "Requires read access"
    assert ename == "JsException" and refusal in evalue, evalue


LISTERS = {
    "os.listdir": lambda d: f"import os\nos.listdir({q(d)})",
    "os.scandir": lambda d: f"import os\nlist(os.scandir({q(d)}))",
    "deno-readDirSync": lambda d: js_cell(f"return JSON.stringify([...Deno.readDirSync({q(d)})])"),
    "node-fs-readdirSync": lambda d: js_cell(
        f"const fs = await import('node:fs'); return JSON.stringify(fs.readdirSync({q(d)}))"
    ),
    "deno-readDirSync-root": lambda d: js_cell("return JSON.stringify([...Deno.readDirSync('/')])"),
}


@pytest.mark.parametrize("how", list(LISTERS))
def test_host_folders_cannot_be_listed(target, host, how):
    km, kc = target
    run = attack(kc, LISTERS[how](host.root), host.secret_file.name, *needles(host, km))
    ename, evalue = error(run)
    if how.startswith("os."):  # host /tmp is not the guest's /tmp
        assert ename == "FileNotFoundError", evalue
    else:
        assert_denied(run, "read")


def test_guest_root_listing_shows_only_the_sandbox(target):
    """Sanity: the guest's own file system is Pyodide's in-memory one (`.sandbox_overlay`: its layer over mounts;
    /usr/bin and /bin: the shell's command files, nothing of the host's)."""
    _, kc = target
    listed = set(eval(result(execute(kc, "import os\nsorted(os.listdir('/'))"))))
    assert listed <= {"bin", "dev", "home", "lib", "proc", "tmp", "usr", ".sandbox_overlay"}
    assert result(execute(kc, "os.listdir('/usr')")) == "['bin']"
    code = "{open(f'/usr/bin/{n}').read().split(': ')[1][:32] for n in os.listdir('/usr/bin')}"
    assert result(execute(kc, code)) == '{"a command of the sandbox\'s shell"}'


# ---- environment ----------------------------------------------------------------------------

ENV_ATTACKS = {
    "deno-env-toObject": (js_cell("return JSON.stringify(Deno.env.toObject())"), "env"),
    "deno-env-get-secret": (js_cell(f"return Deno.env.get({q(ENV_NAME)})"), "env"),
    "deno-env-get-HOME": (js_cell("return Deno.env.get('HOME')"), "env"),
    "node-process-env-secret": (
        js_cell(f"const p = await import('node:process'); return String(p.env[{q(ENV_NAME)}])"),
        "env",
    ),
    "node-process-env-json": (js_cell("const p = await import('node:process'); return JSON.stringify(p.env)"), "env"),
    "node-os-userInfo": (js_cell("const os = await import('node:os'); return JSON.stringify(os.userInfo())"), "sys"),
    "deno-proc-self-environ": (js_cell("return Deno.readTextFileSync('/proc/self/environ')"), "read"),
    "deno-proc-kernel-environ": (js_cell("return Deno.readTextFileSync('/proc/' + Deno.ppid + '/environ')"), "read"),
}


@pytest.mark.parametrize("how", list(ENV_ATTACKS))
def test_environment_is_not_readable_from_js(target, host, how):
    km, kc = target
    code, access = ENV_ATTACKS[how]
    run = attack(kc, code, *needles(host, km))
    assert_denied(run, access)


def test_python_environment_is_the_guests_own(target, host):
    km, kc = target
    run = attack(kc, py_env(ENV_NAME), *needles(host, km))
    assert result(run) == "'None'"
    run = attack(kc, "open('/proc/self/environ').read()", *needles(host, km))
    assert_refused(run, ["FileNotFoundError"], "No such file or directory: '/proc/self/environ'")  # Pyodide's /proc
    run = attack(kc, "import os\nos.environ.get('HOME')", *needles(host, km))
    assert result(run) == "'/home/pyodide'"


def test_the_secret_is_not_even_in_the_sandbox_process_environment(target, host):
    km, _ = target
    assert host.env_value.encode() in process_environ(km.provisioner.process.pid), "the kernel should have it"
    denos = sandbox_pids(km.provisioner.process.pid)  # the current sandbox and the pre-warmed spare, if any
    assert denos
    for deno in denos:
        assert host.env_value.encode() not in process_environ(deno)
        assert host.api_key.encode() not in process_environ(deno)
        assert ENV_NAME.encode() not in process_environ(deno)


# ---- processes ------------------------------------------------------------------------------

PROCESS_ATTACKS = {
    "deno-command-outputSync": (
        lambda m: js_cell(f"return new Deno.Command('/bin/sh', {{args: ['-c', 'touch ' + {q(m)}]}}).outputSync().code"),
        "JsException",
        'NotCapable: Requires run access to "/bin/sh"',
    ),
    "deno-command-spawn": (
        lambda m: js_cell(
            f"const c = new Deno.Command('/bin/sh', {{args: ['-c', 'touch ' + {q(m)}]}}).spawn(); return (await c.status).code"
        ),
        "JsException",
        'NotCapable: Requires run access to "/bin/sh"',
    ),
    "deno-command-by-name": (
        lambda m: js_cell(f"return new Deno.Command('touch', {{args: [{q(m)}]}}).outputSync().code"),
        "JsException",
        "NotFound: Failed to spawn 'touch'",  # found nowhere: the sandbox process has no PATH (launch_plan.env)
    ),
    "node-child_process-execSync": (
        lambda m: js_cell(
            f"const cp = await import('node:child_process'); return String(cp.execSync('touch ' + {q(m)}))"
        ),
        "JsException",
        "NotCapable: Requires env access",
    ),
    "node-child_process-spawnSync": (
        lambda m: js_cell(
            "const cp = await import('node:child_process');"
            f" const r = cp.spawnSync('/bin/sh', ['-c', 'touch ' + {q(m)}]); return String(r.status) + String(r.error)"
        ),
        "JsException",
        "NotCapable: Requires env access",
    ),
    "node-child_process-exec": (
        lambda m: js_cell(
            "const cp = await import('node:child_process');"
            f" return await new Promise((ok, no) => cp.exec('touch ' + {q(m)}, (e) => e ? no(e) : ok('ran')))"
        ),
        "JsException",
        "NotCapable: Requires env access",
    ),
    "node-child_process-execFileSync": (
        lambda m: js_cell(
            f"const cp = await import('node:child_process'); return String(cp.execFileSync('/usr/bin/touch', [{q(m)}]))"
        ),
        "JsException",
        "NotCapable: Requires env access",
    ),
    "os.posix_spawn": (
        lambda m: f"import os\nos.posix_spawn('/usr/bin/touch', ['touch', {q(m)}], {{}})",
        "AttributeError",
        "module 'os' has no attribute 'posix_spawn'",
    ),
    "os.fork": (lambda m: "import os\nos.fork()", "OSError", "os.fork: the sandbox starts no processes"),
}


@pytest.mark.parametrize("how", list(PROCESS_ATTACKS))
def test_no_process_can_be_started(target, host, tmp_path, how):
    km, kc = target
    marker = tmp_path / "pwned"
    make, ename, message = PROCESS_ATTACKS[how]
    run = attack(kc, make(marker), *needles(host, km))
    assert_refused(run, [ename], message)
    assert not marker.exists(), "LEAK: a process ran on the host"


SHELL_COMMANDS = {
    "os.system": lambda path: f"import os\nos.system('touch ' + {q(path)})",
    "subprocess.run": py_subprocess_touch,
    "shell-escape": lambda path: f"!touch {path}",
    "bash-cell": lambda path: f"%%bash\ntouch {path}",
}


@pytest.mark.parametrize("how", list(SHELL_COMMANDS))
def test_shell_commands_touch_only_the_sandboxs_own_files(target, host, tmp_path, how):
    """The shell runs in the sandbox, on its file system: a host path is not there; a path the sandbox has is
    changed there, and the host's file of the same name is not."""
    km, kc = target
    marker = tmp_path / "pwned"
    attack(kc, SHELL_COMMANDS[how](marker), *needles(host, km))
    assert not marker.exists(), "LEAK: a shell command wrote a host file"
    inside = Path("/tmp") / token(f"shell-{how}")
    run = execute(kc, SHELL_COMMANDS[how](inside))
    assert result(execute(kc, f"import os; os.path.exists({q(inside)})")) == "True", run.content
    assert not inside.exists(), "LEAK: a shell command wrote a host file"


def test_ffi_is_refused(target, host):
    km, kc = target
    for library in ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"):
        run = attack(kc, js_cell(f"Deno.dlopen({q(library)}, {{}}); return 'opened'"), *needles(host, km))
        assert_denied(run, "ffi")


@pytest.mark.parametrize(
    "code",
    [
        js_cell("Deno.kill(Deno.ppid, 'SIGKILL'); return 'sent'"),
        js_cell("const p = await import('node:process'); p.kill(Deno.ppid, 'SIGKILL'); return 'sent'"),
        js_cell("Deno.kill(0, 'SIGKILL'); return 'sent'"),
        js_cell("Deno.kill(-Deno.ppid, 'SIGKILL'); return 'sent'"),
    ],
    ids=["deno-kill-kernel", "node-process-kill-kernel", "deno-kill-own-group", "deno-kill-kernel-group"],
)
def test_guest_cannot_signal_the_kernel(target, host, code):
    km, kc = target
    run = attack(kc, code, *needles(host, km))
    assert_denied(run, "run")
    assert km.is_alive()


def test_permission_prompts_are_refused(target, host):
    km, kc = target
    code = js_cell(
        "const out = {};"
        " for (const name of ['read', 'write', 'net', 'env', 'run', 'ffi', 'sys', 'import'])"
        " { out[name] = (await Deno.permissions.request({name})).state; }"
        f" try {{ out.after = Deno.readTextFileSync({q(host.secret_file)}); }} catch (e) {{ out.after = e.name; }}"
        " return JSON.stringify(out)"
    )
    run = attack(kc, code, *needles(host, km))
    states = json.loads(eval(result(run)))
    assert {k: v for k, v in states.items() if k != "after"} == dict.fromkeys(
        ["read", "write", "net", "env", "run", "ffi", "sys", "import"], "denied"
    )
    assert states["after"] == "NotCapable"


def test_nested_worker_cannot_escalate_permissions(target, host):
    km, kc = target
    source = f"postMessage(Deno.readTextFileSync({q(host.secret_file)}))"
    for permissions, refusal in (
        # Asking for more than the parent has fails at once ...
        ("{read: true, env: true, run: true}", "JsException: NotCapable: Can't escalate parent thread permissions"),
        ("{read: true}", "JsException: NotCapable: Can't escalate parent thread permissions"),
        # ... and a worker that inherits gets the parent's refusals.
        ("'inherit'", "'worker error: Uncaught (in promise) NotCapable: Requires read access to "),
    ):
        code = js_cell(
            f"const w = new Worker('data:text/javascript,' + encodeURIComponent({q(source)}),"
            f" {{type: 'module', deno: {{permissions: {permissions}}}}});"
            " return await new Promise((ok, no) => {"
            "   setTimeout(() => { w.terminate(); ok('timeout'); }, 5000);"
            "   w.onmessage = (e) => { w.terminate(); ok('GOT ' + e.data); };"
            "   w.onerror = (e) => { e.preventDefault(); w.terminate(); ok('worker error: ' + e.message); };"
            " })"
        )
        run = attack(kc, code, *needles(host, km))
        if refusal.startswith("JsException: "):
            assert_refused(run, ["JsException"], refusal.removeprefix("JsException: "))
        else:  # the promise resolves with the worker's error
            assert result(run).startswith(refusal), result(run)


# ---- writing on the host ----------------------------------------------------------------------

WRITE_ATTACKS = {
    "deno-writeTextFileSync-new": lambda h: js_cell(f"Deno.writeTextFileSync({q(h.root / 'new.txt')}, 'pwned')"),
    "deno-writeTextFileSync-tmp": lambda h: js_cell("Deno.writeTextFileSync('/tmp/sbk-pwned-' + Deno.pid, 'pwned')"),
    "deno-mkdirSync": lambda h: js_cell(f"Deno.mkdirSync({q(h.root / 'evil-dir')})"),
    "deno-makeTempDirSync": lambda h: js_cell("return Deno.makeTempDirSync()"),
    "deno-removeSync-victim": lambda h: js_cell(f"Deno.removeSync({q(h.victim)})"),
    "deno-renameSync-victim": lambda h: js_cell(f"Deno.renameSync({q(h.victim)}, {q(h.root / 'moved.txt')})"),
    "deno-writeFileSync-victim": lambda h: js_cell(f"Deno.writeTextFileSync({q(h.victim)}, 'pwned')"),
    "deno-truncateSync-victim": lambda h: js_cell(f"Deno.truncateSync({q(h.victim)}, 0)"),
    "deno-chmodSync-victim": lambda h: js_cell(f"Deno.chmodSync({q(h.victim)}, 0o777)"),
    "deno-utimeSync-victim": lambda h: js_cell(f"Deno.utimeSync({q(h.victim)}, 0, 0)"),
    "node-fs-writeFileSync": lambda h: js_cell(
        f"const fs = await import('node:fs'); fs.writeFileSync({q(h.victim)}, 'pwned')"
    ),
    "node-fs-appendFileSync": lambda h: js_cell(
        f"const fs = await import('node:fs'); fs.appendFileSync({q(h.victim)}, 'pwned')"
    ),
    "node-fs-rmSync": lambda h: js_cell(f"const fs = await import('node:fs'); fs.rmSync({q(h.victim)})"),
    "python-open-write": lambda h: py_write_file(h.victim),
}


READ_FIRST = {"deno-renameSync-victim", "node-fs-rmSync"}  # these APIs need read access too, and ask for it first


@pytest.mark.parametrize("how", list(WRITE_ATTACKS))
def test_nothing_outside_the_mounts_can_be_written(target, host, how):
    km, kc = target
    before_victim, before_tree = fingerprint(host.victim), tree(host.root)
    run = attack(kc, WRITE_ATTACKS[how](host), *needles(host, km))
    if how.startswith("python"):  # the host's /tmp is not the guest's /tmp
        assert_refused(run, ["FileNotFoundError"], "No such file or directory")
    elif how in READ_FIRST:
        assert_denied(run, "read")
    else:
        assert_denied(run, "write")
    assert fingerprint(host.victim) == before_victim, "LEAK: the test's file was changed"
    assert tree(host.root) == before_tree, "LEAK: the test's folder was changed"


def _sandbox_files() -> list[Path]:
    """Host code, Pyodide, the guest's code and wheels, the start-up snapshot: all readable by the sandbox."""
    pyodide = paths.pyodide_dir(provision.deno_dir())
    candidates = [
        paths.host_dir() / "worker.ts",
        paths.host_dir() / "main.ts",
        paths.host_dir() / "guest" / "sandbox_guest" / "guards.py",
        pyodide / "pyodide.asm.wasm",
        pyodide / "python_stdlib.zip",
        *sorted(provision.wheels_dir().glob("ipython-*.whl"))[:1],
    ]
    if hasattr(provision, "guest_site_dir"):
        candidates.append(provision.guest_site_dir() / "IPython" / "__init__.py")
    if hasattr(provision, "snapshot_if_ready"):
        candidates.append(provision.snapshot_if_ready())
    return [f for f in candidates if f is not None and f.is_file()]


SELF_WRITES = {
    "deno-writeFileSync": "Deno.writeFileSync(p, new Uint8Array([0]))",
    "deno-writeTextFileSync-append": "Deno.writeTextFileSync(p, 'x', {append: true})",
    "deno-truncateSync": "Deno.truncateSync(p, 0)",
    "deno-removeSync": "Deno.removeSync(p)",
    "deno-renameSync": "Deno.renameSync(p, p + '.bak')",
    "deno-chmodSync": "Deno.chmodSync(p, 0o777)",
    "deno-utimeSync": "Deno.utimeSync(p, 0, 0)",
    "deno-openSync-write": "Deno.openSync(p, {write: true}).writeSync(new Uint8Array([0]))",
    "deno-openSync-read-then-truncate": "Deno.openSync(p).truncateSync(0)",
    "node-fs-writeFileSync": "(await import('node:fs')).writeFileSync(p, 'x')",
    "node-fs-unlinkSync": "(await import('node:fs')).unlinkSync(p)",
}


@pytest.mark.parametrize("how", list(SELF_WRITES))
def test_host_code_pyodide_and_wheels_cannot_be_changed(target, host, how):
    """The files the sandbox is made of are readable by design, never writable."""
    km, kc = target
    files = _sandbox_files()
    before = {f: fingerprint(f) for f in files}
    code = js_cell(
        f"const out = {{}}; for (const p of {q([str(f) for f in files])}) {{"
        f" try {{ {SELF_WRITES[how]}; out[p] = 'DONE'; }} catch (e) {{ out[p] = e.name + ': ' + e.message; }} }}"
        " return JSON.stringify(out)"
    )
    run = attack(kc, code, *needles(host, km))
    outcomes = json.loads(eval(result(run)))
    assert not [p for p, o in outcomes.items() if o == "DONE"], outcomes
    assert {f: fingerprint(f) for f in files} == before, "LEAK: a file of the sandbox itself was changed"
    for f in files:
        assert not Path(str(f) + ".bak").exists()


GUEST_SYSTEM_WRITES = {
    "guest-code-open": "open('/lib/sandbox-guest/sandbox_guest/guards.py', 'w').write('# pwned')",
    "guest-code-FS": "import pyodide_js\npyodide_js.FS.writeFile('/lib/sandbox-guest/sandbox_guest/guards.py', '# pwned')",
    "guest-site-open": "open('/lib/sandbox-site/IPython/__init__.py', 'a').write('# pwned')",
    "guest-site-remove": "import os\nos.remove('/lib/sandbox-site/IPython/__init__.py')",
}


@pytest.mark.parametrize("how", list(GUEST_SYSTEM_WRITES))
def test_the_guests_own_code_mounts_are_read_only(target, host, how):
    """The guest's code and IPython come from host folders mounted into Pyodide: writes must not reach them."""
    km, kc = target
    guest_file = (
        "/lib/sandbox-guest/sandbox_guest/guards.py" if "code" in how else "/lib/sandbox-site/IPython/__init__.py"
    )
    assert result(execute(kc, f"import os\nos.path.isfile({guest_file!r})")) == "True", "the attack has no target"
    files = _sandbox_files()
    before = {f: fingerprint(f) for f in files}
    run = attack(kc, GUEST_SYSTEM_WRITES[how], *needles(host, km))
    assert run.content["status"] == "error"
    assert {f: fingerprint(f) for f in files} == before


def test_host_code_is_readable_but_that_is_all(target, host):
    """Sanity: reading the host code is allowed (the worker needs it), and secrets are not in it."""
    km, kc = target
    run = attack(kc, js_cell(f"return Deno.readTextFileSync({q(paths.host_dir() / 'worker.ts')}).length"))
    assert int(result(run)) == len((paths.host_dir() / "worker.ts").read_text())
    assert_no_leak(run, *needles(host, km))


def test_scratch_space_works(target):
    """Sanity: the guest's own /tmp and home are writable (in memory)."""
    _, kc = target
    code = "open('/tmp/note.txt', 'w').write('hi')\nopen('/home/pyodide/n.txt', 'w').write('yo')\nopen('/tmp/note.txt').read()"
    assert result(execute(kc, code)) == "'hi'"
    assert_alive(kc)


# ---- the skill bridge: host code the guest may call --------------------------------------------------


def test_skill_uses_the_host_secret_without_revealing_it(target, host):
    """Sanity: SignerSkill signs with the key from the kernel's environment; the key stays on the host."""
    km, kc = target
    run = attack(kc, "device.SignerSkill.sign('hello')", *needles(host, km))
    expected = hmac.new(host.api_key.encode(), b"hello", hashlib.sha256).hexdigest()
    assert result(run) == repr(expected)


@pytest.mark.parametrize(
    ("skill", "method"),
    [
        ("SignerSkill", "_key"),
        ("SignerSkill", "__init__"),
        ("SignerSkill", "__class__"),
        ("SignerSkill", "sign.__globals__"),
        ("SignerSkill", "sign.__func__"),
        ("os", "system"),
        ("builtins", "open"),
        ("SignerSkill.__dict__", "get"),
    ],
)
def test_raw_skill_calls_reach_only_public_skill_methods(target, host, skill, method):
    """The bridge takes an exact Skill.method of a loaded skill: no _names, no attribute chains, no modules."""
    km, kc = target
    request = {"type": "skill_call", "skill": skill, "method": method, "args": [], "kwargs": {}}
    run = attack(kc, f"from sandbox_guest import _host\n_host.request({request!r})", *needles(host, km))
    assert "SkillRefused" in result(run)
