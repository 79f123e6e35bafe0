"""Nothing in the suite can pass without the sandbox: the same attack code succeeds in ipykernel's `python3`.

Each test runs, in an ordinary kernel, exactly the code that the sandbox tests run (the builders in
attack_kit), and checks that the attack works there and that the suite's own checks catch it.
"""

from __future__ import annotations

import pytest
from attack_kit import (
    assert_no_leak,
    fingerprint,
    py_env,
    py_read_file,
    py_socket_get,
    py_subprocess_touch,
    py_urlopen,
    py_write_file,
    result,
    start_python3,
    token,
)

from conftest import Listener, execute, stop_kernel

ENV_NAME = "SBK_ATTACK_SECRET"  # as in test_host_files


@pytest.fixture(scope="module")
def env_secret() -> str:
    return token("env")


@pytest.fixture(scope="module")
def plain(env_secret):
    km, kc = start_python3(env={ENV_NAME: env_secret})
    yield km, kc
    stop_kernel(km, kc)


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def test_python3_reads_a_host_file_and_the_leak_check_sees_it(plain, tmp_path):
    _, kc = plain
    secret = token("file")
    (tmp_path / "secret.txt").write_text(secret)
    run = execute(kc, py_read_file(tmp_path / "secret.txt"))
    assert secret in result(run)
    with pytest.raises(AssertionError, match="LEAK"):
        assert_no_leak(run, secret)


def test_python3_reads_its_connection_file(plain):
    km, kc = plain
    run = execute(kc, py_read_file(km.connection_file))
    assert km.session.key.decode() in result(run)


def test_python3_sees_the_secret_environment_variable(plain, env_secret):
    _, kc = plain
    run = execute(kc, py_env(ENV_NAME))
    assert result(run) == repr(env_secret)
    with pytest.raises(AssertionError, match="LEAK"):
        assert_no_leak(run, env_secret)


def test_python3_starts_processes(plain, tmp_path):
    _, kc = plain
    marker = tmp_path / "pwned"
    assert execute(kc, py_subprocess_touch(marker)).content["status"] == "ok"
    assert marker.exists()


def test_python3_writes_host_files(plain, tmp_path):
    _, kc = plain
    victim = tmp_path / "victim.txt"
    victim.write_text("owned by the test")
    before = fingerprint(victim)
    assert execute(kc, py_write_file(victim)).content["status"] == "ok"
    assert fingerprint(victim) != before


@pytest.mark.parametrize("make", [py_socket_get, py_urlopen], ids=["socket", "urllib"])
def test_python3_reaches_the_listener(plain, listener, make):
    _, kc = plain
    run = execute(kc, make(listener.port))
    assert "hello" in result(run)
    with pytest.raises(AssertionError, match="LEAK"):
        listener.assert_untouched()
