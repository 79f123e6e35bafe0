"""The second wall: each OS layer holds on its own, with Deno's permission checks switched off.

Promises (docs/security.md, the second wall): on Linux the Deno process runs in its own user, mount, IPC, UTS
and (without allow_net) network namespaces with a private root that holds only the allowed paths and no
capabilities, under Landlock (files, TCP, scopes) and a seccomp filter, so a
Deno permission bug alone does not reach host files, the network or other processes.

Each kernel here runs with SANDBOX_KERNEL_TEST_DENO_ALL=1 (Deno's `--allow-all`, and the worker
inherits it: the guest can call any Deno API) and exactly one layer, required. A control kernel with
no layer shows that every attack below works when no OS layer stands in the way.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from attack_kit import dump, result, token
from jupyter_client.manager import KernelManager

from conftest import execute, start_kernel, stop_kernel
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME
from sandbox_kernel.sandbox import provision
from sandbox_kernel.sandbox.launch_plan import TEST_DENO_ALL

EPERM, ESRCH = 1, 3
ATTACKS = ("read_host_file", "write_host_file", "symlink_in_mount", "connect_loopback", "start_process", "ptrace")
# What each layer alone must stop (it may stop more).
STOPS = {
    "landlock": {"read_host_file", "write_host_file", "symlink_in_mount", "connect_loopback", "start_process"},
    "seccomp": {"connect_loopback", "start_process", "ptrace"},
    "namespaces": {"read_host_file", "write_host_file", "symlink_in_mount", "connect_loopback"},
}


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Iterator[dict[str, object]]:
    """A secret file outside every allowed root, a folder mounted read-only, and a loopback listener."""
    root = tmp_path_factory.mktemp("oslayers")
    secret = root / "secret.txt"
    secret.write_text(token("host-secret"))
    mount = root / "mounted"
    mount.mkdir()
    (mount / "ok.txt").write_text("fine")
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[bool] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(True)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield {"root": root, "secret": secret, "mount": mount, "port": listener.getsockname()[1], "accepted": accepted}
    listener.close()


def js_attack(body: str) -> str:
    """A cell that runs `body` (JavaScript, may await) in the guest; its result says ALLOWED or DENIED."""
    script = f"(async () => {{ try {{ {body}; return 'ALLOWED'; }} catch (e) {{ return 'DENIED: ' + e; }} }})()"
    return f"from pyodide.code import run_js\nawait run_js({json.dumps(script)})"


def attack_code(name: str, host: dict[str, object]) -> str:
    secret, root, port = host["secret"], host["root"], host["port"]
    if name == "read_host_file":
        return js_attack(f"if (!Deno.readTextFileSync({json.dumps(str(secret))}).startsWith('SBK-')) throw 'empty'")
    if name == "write_host_file":
        return js_attack(f"Deno.writeTextFileSync({json.dumps(str(Path(str(root)) / 'escaped.txt'))}, 'x')")
    if name == "symlink_in_mount":  # Deno checks the path (inside the mount); the OS follows the link
        link = Path(str(host["mount"])) / "link"
        return js_attack(f"if (!Deno.readTextFileSync({json.dumps(str(link))}).startsWith('SBK-')) throw 'empty'")
    if name == "connect_loopback":
        return js_attack(f"const c = await Deno.connect({{hostname: '127.0.0.1', port: {port}}}); c.close()")
    if name == "start_process":
        return js_attack("const out = new Deno.Command('/bin/true').outputSync(); if (!out.success) throw 'failed'")
    if name == "ptrace":
        # PTRACE_ATTACH to a pid that does not exist: ESRCH when the call is made, EPERM when seccomp refuses it.
        return js_attack(
            "const libc = Deno.dlopen('libc.so.6', {ptrace: {parameters: ['i64', 'i64', 'pointer', 'pointer'], "
            "result: 'i64'}, __errno_location: {parameters: [], result: 'pointer'}});"
            "libc.symbols.ptrace(16n, 999999999n, null, null);"
            "const errno = new Deno.UnsafePointerView(libc.symbols.__errno_location()).getInt32();"
            f"if (errno === {EPERM}) throw 'EPERM'; if (errno !== {ESRCH}) throw 'errno ' + errno"
        )
    raise AssertionError(name)


def outcome(run) -> str:
    text = result(run).strip("'\"") if run.of_type("execute_result") else run.stream().strip()
    assert text.startswith(("ALLOWED", "DENIED")), dump(run)[:2000]
    return text


CASES = [("none", attack) for attack in ATTACKS] + [(layer, a) for layer, stops in STOPS.items() for a in sorted(stops)]


@pytest.fixture(scope="module")
def layered(request, host):
    """A kernel with Deno's checks off and only this OS layer ('none': the control)."""
    layer = request.param
    args = [f"--SandboxKernel.mounts=['{host['mount']}:/data:ro']"]
    if layer == "none":
        args.append("--SandboxKernel.os_sandbox=off")
    else:
        args += ["--SandboxKernel.os_sandbox=required", f"--SandboxKernel.os_layers={layer}"]
    (Path(str(host["mount"])) / "link").unlink(missing_ok=True)
    km, kc = start_kernel(args, env={TEST_DENO_ALL: "1"})
    execute(kc, "1")  # the sandbox is up; the link is planted after its start
    (Path(str(host["mount"])) / "link").symlink_to(host["secret"])
    yield layer, kc
    stop_kernel(km, kc)
    (Path(str(host["root"])) / "escaped.txt").unlink(missing_ok=True)


@pytest.mark.parametrize(("layered", "attack"), CASES, indirect=["layered"])
def test_each_layer_alone_stops_its_attacks(layered, host, attack):
    layer, kc = layered
    connections = len(host["accepted"])  # type: ignore[arg-type]
    got = outcome(execute(kc, attack_code(attack, host)))
    if layer == "none":
        assert got == "ALLOWED", f"control: with Deno's checks off and no OS layer, {attack} should work: {got}"
        return
    assert got.startswith("DENIED"), f"{layer} alone let {attack} through"
    if attack == "ptrace":
        assert "EPERM" in got, got
    if attack == "write_host_file":
        assert not (Path(str(host["root"])) / "escaped.txt").exists()
    if attack == "connect_loopback":
        assert len(host["accepted"]) == connections, "the loopback listener saw a connection"  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def namespaces_alone():
    """Deno's checks off, only the namespaces layer."""
    args = ["--SandboxKernel.os_sandbox=required", "--SandboxKernel.os_layers=namespaces"]
    km, kc = start_kernel(args, env={TEST_DENO_ALL: "1"})
    yield kc
    stop_kernel(km, kc)


def test_the_sandbox_holds_no_capabilities(namespaces_alone):
    """Even when the kernel runs as root (as CI does), Deno is no one with powers in its own namespaces."""
    status = "Deno.readTextFileSync('/proc/self/status').split('\\n').filter((l) => l.startsWith('Cap'))"
    got = outcome(execute(namespaces_alone, js_attack(f"throw {status}.map((l) => l.replace(/\\s+/, '=')).join(' ')")))
    for kind in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{kind}:=0000000000000000" in got, got


def test_deno_scratch_is_a_private_size_capped_folder(namespaces_alone):
    """What Deno writes into its DENO_DIR stays in a small tmpfs of the sandbox's own, never on the host."""
    got = outcome(
        execute(
            namespaces_alone,
            js_attack(
                "const dir = Deno.env.get('DENO_DIR'); Deno.writeFileSync(dir + '/big', new Uint8Array(32 << 20))"
            ),
        )
    )
    assert got.startswith("DENIED") and "os error 28" in got, got  # ENOSPC: the tmpfs is full at 16 MiB


def test_the_private_root_holds_only_what_deno_needs(namespaces_alone):
    """Of /etc, only the loader cache and the time zone are there (no passwd, hosts, ssh, ...)."""
    listing = js_attack("throw [...Deno.readDirSync('/etc')].map((e) => e.name).sort().join(',')")
    got = outcome(execute(namespaces_alone, listing))
    assert got == "DENIED: ld.so.cache,localtime", got


@pytest.mark.parametrize("os_sandbox", ["off", "auto"])
def test_a_symlink_planted_in_a_mount_after_start_leads_nowhere(host, os_sandbox):
    """Deno's own checks on (the default): Deno allows the path inside the mount; only the OS sees the target.

    With every layer on, the private root answers first: the target does not exist in the sandbox's view
    (Landlock alone, which answers EACCES, is tested above).
    """
    link = Path(str(host["mount"])) / "link"
    link.unlink(missing_ok=True)
    km, kc = start_kernel(
        [f"--SandboxKernel.mounts=['{host['mount']}:/data:ro']", f"--SandboxKernel.os_sandbox={os_sandbox}"]
    )
    try:
        execute(kc, "1")
        link.symlink_to(host["secret"])
        got = outcome(execute(kc, attack_code("symlink_in_mount", host)))
        if os_sandbox == "off":
            assert got == "ALLOWED", f"control: Deno alone follows the planted link: {got}"
        else:
            assert got.startswith("DENIED") and "os error 2" in got, got
    finally:
        stop_kernel(km, kc)
        link.unlink(missing_ok=True)


# ---- a system without a layer -------------------------------------------------------------------


def start_without_landlock(arguments: list[str]):
    """A kernel whose whole process tree sees no Landlock (simulated with a seccomp filter: ENOSYS)."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.kernel_spec.argv = [sys.executable, str(Path(__file__).with_name("without_landlock.py")), *km.kernel_spec.argv]
    km.start_kernel(extra_arguments=arguments)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=180)
    return km, kc


def test_required_refuses_to_start_when_a_layer_is_missing():
    km, kc = start_without_landlock(["--SandboxKernel.os_sandbox=required"])
    try:
        run = execute(kc, "1+1")
        assert run.content["status"] == "error", dump(run)[:2000]
        shown = run.content["evalue"] + "".join(m["content"].get("text", "") for m in run.outputs)
        assert "os_sandbox='required'" in shown, shown
        assert "landlock: landlock_create_ruleset failed with ENOSYS" in shown, shown
    finally:
        stop_kernel(km, kc)


def test_auto_runs_without_the_missing_layer_and_says_so():
    km, kc = start_without_landlock([])
    try:
        assert result(execute(kc, "1+1")) == "2"
        report = kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["os_sandbox"]
        assert "landlock" not in report["layers"], report
        assert report["missing"]["landlock"].startswith("landlock_create_ruleset failed with ENOSYS"), report
        assert {"namespaces", "seccomp"} <= set(report["layers"]), report
    finally:
        stop_kernel(km, kc)


# ---- Deno's own writes ------------------------------------------------------------------------

WEB_CACHE_WRITE = js_attack(
    "const src = `caches.open('sbk').then((c) => c.put('https://cache.invalid/x', new Response('A'.repeat(4 << 20))))"
    ".then(() => postMessage('stored'), (e) => postMessage('refused: ' + e))`;"
    "const w = new Worker('data:application/javascript,' + encodeURIComponent(src), {type: 'module'});"
    "const said = await new Promise((r) => { w.onmessage = (e) => r(e.data); w.onerror = (e) => { e.preventDefault(); r('error: ' + e.message); }; });"
    "w.terminate(); if (said !== 'stored') throw said"
)
WEB_CACHE_READ = js_attack(
    "const src = `caches.open('sbk').then((c) => c.match('https://cache.invalid/x'))"
    ".then((r) => postMessage(r ? 'found' : 'absent'), (e) => postMessage('refused: ' + e))`;"
    "const w = new Worker('data:application/javascript,' + encodeURIComponent(src), {type: 'module'});"
    "const said = await new Promise((r) => { w.onmessage = (e) => r(e.data); });"
    "w.terminate(); if (said !== 'found') throw said"
)


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")} if folder.exists() else set()


def host_web_caches() -> set[Path]:
    """Web Cache files that sandboxes' private folders hold on the host disk (their DENO_DIR is <sbk-*>/deno)."""
    return set(Path(tempfile.gettempdir()).glob("sbk-*/deno/location_data/**/*"))


WHERE_CACHES_GO = {
    "auto": ([], "ALLOWED", "private tmpfs"),  # the private root: a 16 MiB tmpfs the host never sees
    "landlock": (["--SandboxKernel.os_sandbox=required", "--SandboxKernel.os_layers=landlock"], "DENIED", "refused"),
    "off": (["--SandboxKernel.os_sandbox=off"], "ALLOWED", "private folder"),  # removed with the sandbox
}


@pytest.mark.parametrize("layers", list(WHERE_CACHES_GO))
def test_web_cache_writes_of_a_nested_worker_reach_no_shared_disk(layers):
    """Before: 4 MB written to DENO_DIR/location_data by a guest Worker, and read back by a second kernel."""
    arguments, expected, where = WHERE_CACHES_GO[layers]
    shared = provision.deno_dir() / "location_data"
    before, on_host = files_under(shared), host_web_caches()
    km, kc = start_kernel(arguments)
    try:
        wrote = outcome(execute(kc, WEB_CACHE_WRITE))
        assert wrote.startswith(expected), f"{layers}: the cache write should be {where}: {wrote}"
        written = host_web_caches() - on_host
        if where == "private folder":
            assert written, "the write should have landed in the sandbox's private folder"
        else:
            assert not written, f"{layers}: Deno's cache reached the host disk: {written}"
        km2, kc2 = start_kernel(arguments)
        try:
            seen = outcome(execute(kc2, WEB_CACHE_READ))
            assert seen.startswith("DENIED"), f"a second kernel saw the first one's cache: {seen}"
        finally:
            stop_kernel(km2, kc2)
    finally:
        stop_kernel(km, kc)
    assert files_under(shared) == before, "Deno wrote into the shared DENO_DIR"
    assert not host_web_caches() - on_host, "a sandbox's private folder outlived it"


# ---- the report ---------------------------------------------------------------------------------


def doctor(*wrapper: str) -> subprocess.CompletedProcess[str]:
    command = [*wrapper, sys.executable, "-m", "sandbox_kernel", "doctor"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_doctor_shows_every_layer_in_force():
    done = doctor()
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "os layers:" in line]
    assert line.startswith("[  ok]"), line
    for shown in (
        "namespaces (user, mount, ipc, uts, net, private root)",
        "landlock (ABI",
        "seccomp (",
        "no_new_privs",
    ):
        assert shown in line, line
    for check in ("deno", "pyodide", "guest wheels", "kernelspec"):
        assert f"[  ok] {check}:" in done.stdout, done.stdout


def test_doctor_names_a_missing_layer():
    done = doctor(sys.executable, str(Path(__file__).with_name("without_landlock.py")))
    assert done.returncode == 0, done.stdout + done.stderr  # the kernel still starts (auto)
    (line,) = [line for line in done.stdout.splitlines() if "os layers:" in line]
    assert line.startswith("[warn]"), line
    assert "missing: landlock (landlock_create_ruleset failed with ENOSYS (Function not implemented): a seccomp" in line


def test_the_private_root_hides_secrets_and_keeps_tool_files_read_only(tmp_path):
    """Deno's checks off, namespaces alone: `.ssh` at a mount's top is an empty, unreadable folder, and an
    existing `.git` at an rw mount's top is read-only, whatever JS in the guest calls."""
    folder = tmp_path / "proj"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id").write_text(token("key"))
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("[core]\n")
    args = [
        "--SandboxKernel.os_sandbox=required", "--SandboxKernel.os_layers=namespaces",
        f"--SandboxKernel.mounts=['{folder}:/proj:rw']",
    ]  # fmt: skip
    km, kc = start_kernel(args, env={TEST_DENO_ALL: "1"})
    try:
        read = js_attack(f"Deno.readTextFileSync({json.dumps(str(folder / '.ssh' / 'id'))})")
        assert outcome(execute(kc, read)).startswith("DENIED"), "the private root showed a hidden file"
        listing = js_attack(f"throw [...Deno.readDirSync({json.dumps(str(folder / '.ssh'))})].length")
        assert "Permission denied" in outcome(execute(kc, listing))
        write = js_attack(
            f"Deno.writeTextFileSync({json.dumps(str(folder / '.git' / 'config'))}, 'x', {{append: true}})"
        )
        got = outcome(execute(kc, write))
        assert got.startswith("DENIED") and "Read-only file system" in got, got
        assert (folder / ".git" / "config").read_text() == "[core]\n"
        ok = js_attack(f"Deno.writeTextFileSync({json.dumps(str(folder / 'result.txt'))}, 'x')")
        assert outcome(execute(kc, ok)) == "ALLOWED"  # the rest of the mount stays writable (Deno's checks off)
    finally:
        stop_kernel(km, kc)
