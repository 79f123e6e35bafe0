"""Persistence attacks: does anything a sandbox writes outlive it, on the host's disk or in another kernel?

Promise (docs/security.md): the sandbox may write nothing but its own socket (and ':rw' mounts); each
kernel's sandbox sees only what its own settings grant. These kernels run on a private copy of the
cache folder ($SANDBOX_KERNEL_CACHE), so that nothing written here reaches the user's real cache.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from attack_kit import assert_alive, assert_refused, dump, q, result, token

from conftest import execute, start_kernel, stop_kernel
from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A copy of the user's cache (Deno's npm cache, guest wheels, the current snapshot), without web caches."""
    source, target = paths.cache_dir(), tmp_path_factory.mktemp("cache") / "sandbox-kernel"
    ignore = shutil.ignore_patterns("location_data", "*-wal", "*-shm")
    for name in ("deno", "guest-wheels"):
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, ignore=ignore, symlinks=True)
    snapshot = provision.snapshot_path() if hasattr(provision, "snapshot_path") else None
    if snapshot is not None and snapshot.is_file():
        (target / "snapshots").mkdir(parents=True)
        shutil.copy2(snapshot, target / "snapshots" / snapshot.name)
    return target


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    folder = tmp_path_factory.mktemp("private")
    secret = token("private")
    (folder / "secret.txt").write_text(secret)
    return folder, secret


@pytest.fixture(scope="module")
def writer(cache, private):
    """A kernel that may read a private folder (and reach no network)."""
    folder, _ = private
    km, kc = start_kernel(
        [f"--SandboxKernel.mounts=['{folder}:/private:ro']"], env={"SANDBOX_KERNEL_CACHE": str(cache)}
    )
    yield km, kc
    stop_kernel(km, kc)


STORE = (
    "(async (name, value) => { const c = await caches.open(name);"
    " await c.put('https://x.invalid/' + name, new Response(value)); return 'stored' })"
)
LOAD = (
    "(async (name) => { const c = await caches.open(name); const r = await c.match('https://x.invalid/' + name);"
    " return r ? await r.text() : 'nothing' })"
)


# The worker removes the Web Cache API (globalThis.caches) before any guest code runs.
NO_CACHES = "TypeError: Cannot read properties of undefined (reading 'open')"


def store(name: str, value_expr: str) -> str:
    """A cell that stores the Python expression `value_expr` in the Web Cache API under `name`."""
    return f"import pyodide.code\nawait pyodide.code.run_js({STORE!r})({q(name)}, {value_expr})"


def load(name: str) -> str:
    return f"import pyodide.code\nawait pyodide.code.run_js({LOAD!r})({q(name)})"


def web_cache_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if "location_data" in p.parts and p.is_file())


def test_cache_api_writes_nothing_to_the_host_disk(writer, cache):
    """Deno's Web Cache API (caches.open(...).put(...)) needs no permission and stores under $DENO_DIR."""
    _, kc = writer
    assert web_cache_files(cache) == []
    run = execute(kc, store("disk", "'x' * (1 << 20)"))
    assert_alive(kc)
    assert_refused(run, ["JsException"], NO_CACHES)  # the worker removes the API before any guest code runs
    assert web_cache_files(cache) == [], "the guest wrote to the host's disk"


def test_data_does_not_cross_from_one_kernel_to_another(writer, cache, private):
    """A kernel with a private mount stores its secret via caches.put; a kernel without it tries caches.match."""
    _, secret = private
    _, kc = writer
    stored = execute(kc, store("exfil", "open('/private/secret.txt').read()"))  # the mount is this kernel's only
    assert_alive(kc)
    assert_refused(stored, ["JsException"], NO_CACHES)
    km2, kc2 = start_kernel(env={"SANDBOX_KERNEL_CACHE": str(cache)})  # no mounts at all
    try:
        other = execute(kc2, load("exfil"))
        assert_alive(kc2)
        assert_refused(other, ["JsException"], NO_CACHES)
        assert secret not in dump(other), "LEAK: another kernel read the private mount's secret"
    finally:
        stop_kernel(km2, kc2)


SQLITE = {
    "open-host-file": "new s.DatabaseSync({tmp} + '/evil.db')",
    "open-relative-file": "new s.DatabaseSync('evil.db')",
    "uri-filename": "new s.DatabaseSync('file:evil.db?mode=rwc')",
    "attach-host-file": "new s.DatabaseSync(':memory:').exec(`ATTACH DATABASE '${{{tmp}}}/attached.db' AS a; CREATE TABLE a.t(x)`)",
    "load-extension": "new s.DatabaseSync(':memory:').prepare(\"SELECT load_extension('libc.so.6')\").all()",
}


@pytest.mark.parametrize("how", list(SQLITE))
def test_node_sqlite_cannot_create_files_or_load_code(writer, tmp_path, how):
    """node:sqlite is reachable; its files are still Deno's decision, and ATTACH / extensions are off."""
    _, kc = writer
    body = "const s = await import('node:sqlite'); " + SQLITE[how].format(tmp=q(tmp_path)) + "; return 'done'"
    run = execute(kc, "import pyodide.code\nawait pyodide.code.run_js(" + repr(f"(async () => {{ {body} }})()") + ")")
    assert_alive(kc)
    assert run.content["status"] == "error" and run.content["ename"] == "JsException", dump(run)[:1000]
    assert list(tmp_path.iterdir()) == []


def test_scratch_files_do_not_survive_a_restart(writer):
    """Sanity: the guest's own /tmp is in memory and gone after a restart."""
    _, kc = writer
    execute(kc, f"open('/tmp/left.txt', 'w').write({q(token('tmp'))})")
    execute(kc, "import js\njs.Deno.exit(0)", timeout=60)
    assert_alive(kc)
    assert result(execute(kc, "import os\nos.path.exists('/tmp/left.txt')")) == "False"
