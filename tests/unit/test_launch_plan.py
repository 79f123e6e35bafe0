"""The launch spec: Deno's flags, the worker's permissions and the OS layers' allow-lists agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox_kernel import paths
from sandbox_kernel.sandbox.launch_plan import NETWORK_READ, SYSTEM_READ, TEST_DENO_ALL, LaunchPlan, elf_interpreter
from sandbox_kernel.sandbox.mounts import Mount
from sandbox_kernel.sandbox.oslayers.report import describe
from sandbox_kernel.sandbox.oslayers.spec import LaunchSpec


def plan(tmp_path: Path, allow_net: list[str] | None = None, **settings: Any) -> LaunchPlan:
    return LaunchPlan(
        host=tmp_path / "host_ts",
        pyodide=tmp_path / "pyodide",
        wheels=tmp_path / "wheels",
        snapshots=tmp_path / "snapshots",
        extra_read=[tmp_path / "packages"],
        mounts=[Mount(tmp_path / "ro", "/ro", False), Mount(tmp_path / "rw", "/rw", True)],
        allow_net=allow_net or [],
        private=tmp_path / "sbk-1",
        shared_deno_dir=tmp_path / "deno",
        **settings,
    )


def flag(argv: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    return value


def test_deno_gets_least_privilege(tmp_path, monkeypatch):
    monkeypatch.delenv(TEST_DENO_ALL, raising=False)
    p = plan(tmp_path)
    argv = p.deno_argv()
    assert "--no-prompt" in argv and "--cached-only" in argv
    for forbidden in (
        "-A",
        "--allow-all",
        "--allow-env",
        "--allow-run",
        "--allow-ffi",
        "--allow-sys",
        "--allow-import",
    ):
        assert not any(a == forbidden or a.startswith(forbidden + "=") for a in argv), forbidden
    assert flag(argv, "allow-write") == f"{tmp_path / 'rw'},{p.socket}"
    assert flag(argv, "allow-net") == f"unix:{p.socket}"
    assert "127.0.0.0/8" in flag(argv, "deny-net")
    assert p.worker_permissions()["workerInherits"] is False


def test_both_walls_allow_the_same_files(tmp_path):
    p = plan(tmp_path)
    argv = p.deno_argv()
    spec = p.launch_spec()
    assert spec.argv == argv
    deno_read = flag(argv, "allow-read").split(",")
    for path in deno_read:  # everything Deno may read, Landlock lets through (the socket: via its folder)
        assert path in spec.read or str(Path(path).parent) in spec.read, path
    assert spec.write == [str(tmp_path / "rw")]  # only rw mounts: not the ro mount, not DENO_DIR
    assert str(p.scratch_deno_dir) not in spec.write and str(p.private) not in spec.write
    assert set(SYSTEM_READ) <= set(spec.read) and not set(NETWORK_READ) & set(spec.read)
    assert spec.execute[0].endswith("deno") and len(spec.execute) == 2  # the binary and its ELF loader
    assert spec.env["DENO_DIR"] == str(p.scratch_deno_dir)


@pytest.mark.parametrize(
    ("allow_net", "network", "ports"),
    [
        ([], False, []),
        (["pypi.org:443", "files.pythonhosted.org:443", "1.2.3.4:8080"], True, [443, 8080]),
        (["pypi.org"], True, None),
    ],
)
def test_tcp_ports_follow_allow_net(tmp_path, allow_net, network, ports):
    spec = plan(tmp_path, allow_net).launch_spec()
    assert spec.network is network and spec.tcp_ports == ports
    assert set(NETWORK_READ) <= set(spec.read) if network else not set(NETWORK_READ) & set(spec.read)


def test_the_spec_survives_json(tmp_path):
    spec = plan(tmp_path, os_sandbox="required", os_layers=["seccomp"], memory_limit_mb=100).launch_spec()
    assert LaunchSpec.from_json(spec.to_json()) == spec
    assert json.loads(spec.to_json())["mode"] == "required" and spec.layers == ["seccomp"]
    assert spec.data_limit == (1280 + 2 * 100) << 20


def test_memory_limit_and_v8_flags_reach_deno(tmp_path):
    argv = plan(tmp_path, memory_limit_mb=512, v8_flags=["--single-threaded-gc"]).deno_argv()
    assert (
        flag(argv, "v8-flags")
        == "--wasm-max-mem-pages=8192,--max-old-space-size=512,--optimize-for-size,--no-wasm-inlining-call-indirect,"
        "--no-wasm-deopt,--single-threaded-gc"
    )


def test_a_bad_allow_net_entry_fails_when_the_plan_is_made(tmp_path):
    with pytest.raises(ValueError, match="allow_net entry 'http://x'"):
        plan(tmp_path, ["http://x"])


def test_test_mode_switches_deno_checks_off(tmp_path, monkeypatch):
    monkeypatch.setenv(TEST_DENO_ALL, "1")
    p = plan(tmp_path)
    assert "--allow-all" in p.deno_argv() and p.worker_permissions()["workerInherits"] is True


def test_elf_interpreter_of_deno_and_of_a_text_file(tmp_path):
    (loader,) = elf_interpreter(paths.deno_executable())
    assert Path(loader).is_file() and "ld-" in Path(loader).name
    (tmp_path / "script").write_text("#!/bin/sh\n")
    assert elf_interpreter(str(tmp_path / "script")) == []
    assert elf_interpreter(str(tmp_path / "missing")) == []


def test_report_in_words():
    assert "off" in describe({"mode": "off", "layers": {}, "missing": {}})
    text = describe(
        {
            "mode": "auto",
            "layers": {"seccomp": {"denied": ["ptrace"]}, "no_new_privs": True},
            "missing": {"landlock": "no Landlock"},
        }
    )
    assert text.startswith("OS layers in force: seccomp (1 calls denied") and text.endswith(
        "missing: landlock (no Landlock)"
    )


CA = b"-----BEGIN CERTIFICATE-----\nTUlJ\n-----END CERTIFICATE-----\n"


def test_a_ca_bundle_is_a_file_of_the_private_folder_named_by_cert_and_opens_no_new_path(tmp_path, monkeypatch):
    monkeypatch.delenv(TEST_DENO_ALL, raising=False)
    without = plan(tmp_path, ["pypi.org:443"])
    with_ca = plan(tmp_path, ["pypi.org:443"], ca_pem=CA, ca_store="mozilla,system")
    assert flag(with_ca.deno_argv(), "cert") == str(tmp_path / "sbk-1" / "ca.pem")
    assert [a for a in with_ca.deno_argv() if not a.startswith("--cert=")] == without.deno_argv()
    spec, plain = with_ca.launch_spec(), without.launch_spec()
    assert (spec.read, spec.write, spec.hide) == (plain.read, plain.write, plain.hide)  # the OS layers: unchanged
    assert spec.env == {**plain.env, "DENO_TLS_CA_STORE": "mozilla,system"}
    (tmp_path / "deno" / "npm").mkdir(parents=True)
    with_ca.private.mkdir()
    with_ca.prepare_scratch()
    written = tmp_path / "sbk-1" / "ca.pem"
    assert written.read_bytes() == CA and written.stat().st_mode & 0o777 == 0o600
    # Without a network there is no TLS: no --cert, no file, no store.
    offline = plan(tmp_path, ca_pem=CA, ca_store="system")
    assert not any(a.startswith("--cert") for a in offline.deno_argv()) and "DENO_TLS_CA_STORE" not in offline.env()
    assert offline.ca_file is None
