"""Mounts, mount limits, the network allow-list and resource limits, as a user configures them."""

from __future__ import annotations

import pytest

from conftest import Listener, execute, start_kernel, stop_kernel, value


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mounts")
    (root / "data").mkdir()
    (root / "out").mkdir()
    (root / "data" / "input.csv").write_text("a,b\n1,2\n")
    return root


@pytest.fixture(scope="module")
def mounted(folders):
    km, kc = start_kernel(
        [
            f"--SandboxKernel.mounts=['{folders / 'data'}:/data:ro', '{folders / 'out'}:/out:rw']",
            """--SandboxKernel.mount_limits={"/out": {"suffixes": [".csv", ".txt"], "max_file_bytes": 1000}}""",
            "--SandboxKernel.memory_limit_mb=512",
            "--SandboxKernel.max_output_bytes=50000",
        ]
    )
    yield km, kc
    stop_kernel(km, kc)


def test_read_only_mount_reads(mounted):
    _, kc = mounted
    assert value(execute(kc, "open('/data/input.csv').read()")) == "'a,b\\n1,2\\n'"
    assert value(execute(kc, "import os; sorted(os.listdir('/data'))")) == "['input.csv']"


def test_read_only_mount_writes_stay_inside_the_sandbox(mounted, folders):
    _, kc = mounted
    run = execute(kc, "open('/data/new.csv', 'w').write('x')\nopen('/data/new.csv').read()")
    assert value(run) == "'x'"
    assert "/data/new.csv stays inside the sandbox" in run.stream("stderr")
    assert "/data is a read-only mount" in run.stream("stderr")
    run = execute(kc, "import pyodide_js\npyodide_js.FS.writeFile('/data/js.csv', 'x')")
    assert run.content["status"] == "ok"
    assert sorted(p.name for p in (folders / "data").iterdir()) == ["input.csv"]
    assert value(execute(kc, "1+1")) == "2"


def test_writable_mount_writes_to_the_host(mounted, folders):
    _, kc = mounted
    execute(kc, "with open('/out/result.csv', 'w') as f:\n    f.write('x,y\\n')")
    assert (folders / "out" / "result.csv").read_text() == "x,y\n"


def test_host_paths_outside_mounts_name_the_roots(mounted):
    _, kc = mounted
    run = execute(kc, "open('/etc/passwd').read()")
    assert run.content["ename"] == "PermissionError"
    assert "not in the sandbox" in run.content["evalue"] and "writable: /out" in run.content["evalue"]


def test_mount_suffix_and_size_limits(mounted, folders):
    _, kc = mounted
    run = execute(kc, "open('/out/tool.json', 'w')")  # a data file, but not of this mount's suffixes
    assert run.content["ename"] == "PermissionError"
    assert "must end in .csv, .txt" in run.content["evalue"]
    run = execute(kc, "with open('/out/big.txt', 'w') as f:\n    f.write('z' * 2000)")
    assert run.content["ename"] == "OSError"
    assert "at most 1000 bytes" in run.content["evalue"] and "mount_limits" in run.content["evalue"]


def test_limits_hold_for_writes_around_python(mounted, folders):
    """Pyodide's FS below Python's guards: the supervisor applies the limits where the write happens."""
    _, kc = mounted
    run = execute(kc, "import pyodide_js\npyodide_js.FS.writeFile('/out/sneaky.txt', 'q' * 5000)")
    assert run.content["ename"] == "JsException", run.content  # FS's ErrnoError (EFBIG), as JS sees it
    assert (folders / "out" / "sneaky.txt").read_bytes() == b""  # made, then refused the bytes
    run = execute(kc, "import pyodide_js\npyodide_js.FS.writeFile('/out/sneaky.json', 'q')")
    assert run.content["ename"] == "JsException", run.content
    assert not (folders / "out" / "sneaky.json").exists()


def test_memory_limit_is_named(mounted):
    _, kc = mounted
    run = execute(kc, "hog = bytearray(1024 * 1024 * 1024)")
    assert run.content["ename"] == "MemoryError"
    assert "memory_limit_mb=512" in run.content["evalue"]
    assert value(execute(kc, "1+1")) == "2"


def test_output_cap_truncates_with_a_notice(mounted):
    _, kc = mounted
    run = execute(kc, "for i in range(2000):\n    print('x' * 99)")
    assert run.content["status"] == "ok"
    out = run.stream("stdout")
    assert 40000 < len(out) <= 50000
    assert "max_output_bytes=50000" in run.stream("stderr")
    assert value(execute(kc, "'next cell'")) == "'next cell'"


def test_recursion_is_a_clean_error(mounted):
    _, kc = mounted
    run = execute(kc, "def f(n):\n    return f(n + 1)\nf(0)", timeout=120)
    assert run.content["ename"] == "RecursionError", run.content
    assert run.content["evalue"] == "maximum recursion depth exceeded"
    assert value(execute(kc, "1+1", timeout=120)) == "2"


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def fetch(port: int, host: str = "127.0.0.1") -> str:
    return f"from pyodide.http import pyfetch\nr = await pyfetch('http://{host}:{port}/')\nawait r.string()"


def test_no_network_by_default(kc, listener):
    run = execute(kc, fetch(listener.port))
    assert run.content["ename"] == "PermissionError"
    assert "allow_net): none" in run.content["evalue"]
    assert listener.settle() == []


def test_allow_list_permits_exactly_what_is_listed(listener):
    other = Listener()
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{listener.port}']"])
    try:
        assert value(execute(kc, fetch(listener.port))) == "'hello'"
        assert len(listener.settle()) == 1
        run = execute(kc, fetch(other.port))
        assert run.content["ename"] == "PermissionError"
        assert f"127.0.0.1:{listener.port}" in run.content["evalue"]
        assert other.settle() == []
        run = execute(kc, fetch(listener.port, host="localhost"))
        assert run.content["status"] == "error"
        assert len(listener.settle()) == 1
    finally:
        other.close()
        stop_kernel(km, kc)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("--SandboxKernel.mounts=['/nonexistent/folder:/data']", "does not exist"),
        ("--SandboxKernel.mounts=['/tmp:/lib/x']", "/lib belongs to the sandbox itself"),
        ("--SandboxKernel.mounts=['/tmp:/data:rx']", "the mode must be 'ro' or 'rw'"),
        ("--SandboxKernel.allow_net=['http://example.com/']", "use host, host:port"),
        ("--SandboxKernel.allow_net=['example.com:99999']", "the port must be 1-65535"),
    ],
)
def test_bad_isolation_settings_are_refused_in_the_notebook(setting, message):
    """No sandbox starts with them; every cell answers with what is wrong and which setting it is."""
    km, kc = start_kernel([setting])
    try:
        run = execute(kc, "1+1", timeout=30)
        assert run.content["ename"] == "SandboxSettingsError", run.content
        name = setting.split("=")[0].removeprefix("--")
        assert message in run.content["evalue"] and name in run.content["evalue"], run.content["evalue"]
    finally:
        stop_kernel(km, kc)
