"""`sandbox-kernel eg-ssh`, the forced command of EG's SSH key: what it takes from EG's shell line, and what not.

The lines are built as Enterprise Gateway 3.3.0's DistributedProcessProxy builds them (`eg_launch_line`, the same
format as its `_build_startup_command`); tests/test_multi_host.py drives the gate with EG itself over SSH.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_kernel.enterprise_gateway import ssh_gate
from sandbox_kernel.enterprise_gateway.ssh_gate import Doctor, Launch, Memory, Refused, Signal

PROGRAM = "/opt/env/bin/sandbox-kernel"
KERNEL_ID = "0b7a3c9e-1111-4222-8333-444455556666"
OPTIONS = ["--kernel-id", KERNEL_ID, "--response-address", "127.0.0.5:8877", "--public-key", "AAAA+/=",
           "--port-range", "0..0", "--ip", "route"]  # fmt: skip


def eg_launch_line(env: dict[str, str], argv: list[str], log: str = f"/tmp/kernel-{KERNEL_ID}.log") -> str:
    """EG's line: `export K=json;`... then nohup, the argv joined with spaces, the log, `& echo $!`."""
    line = "".join("export {}={};".format(k, json.dumps(v).replace("'", "''")) for k, v in env.items())
    return line + "nohup" + "".join(f" {a}" for a in argv) + f" >> {log} 2>&1 & echo $!"


def test_egs_launch_line_gives_the_launcher_and_kernel_values_exactly_as_sent():
    hostile = "$(touch /tmp/pwned) `id` \"q\" 'a'' \\ é"
    line = eg_launch_line({"KERNEL_USERNAME": hostile, "KERNEL_ID": KERNEL_ID, "PATH": "/evil"},
                          [PROGRAM, "launch-eg", *OPTIONS])  # fmt: skip
    request = ssh_gate.parse(line, PROGRAM)
    assert request == Launch(OPTIONS, {"KERNEL_USERNAME": hostile, "KERNEL_ID": KERNEL_ID}, KERNEL_ID, ["PATH"])


@pytest.mark.parametrize(
    "argv, says",
    [
        (["/bin/sh", "launch-eg", *OPTIONS], "not /opt/env/bin/sandbox-kernel launch-eg"),
        ([PROGRAM, "run", "-c", "1"], "not /opt/env/bin/sandbox-kernel launch-eg"),
        ([PROGRAM, "launch-eg", *OPTIONS, "--SandboxKernel.os_sandbox=off"], "kernel settings come from this host's"),
        ([PROGRAM, "launch-eg", *OPTIONS, "--ip"], "each with a value"),
        ([PROGRAM, "launch-eg", *OPTIONS, "--kernel-id", "x"], "gives 2 kernel ids"),
        ([PROGRAM, "launch-eg", *OPTIONS[2:]], "gives 0 kernel ids"),
        ([PROGRAM, "launch-eg", "--kernel-id", "../x", *OPTIONS[2:]], "is not a kernel id"),
    ],
)
def test_a_launch_of_anything_but_this_hosts_launcher_with_egs_options_is_refused(argv, says):
    with pytest.raises(Refused, match=says):
        ssh_gate.parse(eg_launch_line({"KERNEL_ID": KERNEL_ID}, argv), PROGRAM)


@pytest.mark.parametrize(
    "command",
    [
        "id",
        "",
        eg_launch_line({}, [PROGRAM, "launch-eg", *OPTIONS]) + "; id",
        "id; " + eg_launch_line({}, [PROGRAM, "launch-eg", *OPTIONS]),
        'export A="$(id)"x;' + eg_launch_line({}, [PROGRAM, "launch-eg", *OPTIONS]),
        "kill -9 1; echo $?; id",
        "kill -9 $(id); echo $?",
        "x" * (ssh_gate.MAX_COMMAND + 1),
    ],
)
def test_any_other_command_is_refused(command):
    with pytest.raises(Refused):
        ssh_gate.parse(command, PROGRAM)


def test_the_preflights_doctor_and_the_load_tests_memory_are_the_only_other_commands():
    assert ssh_gate.parse("doctor", PROGRAM) == Doctor()
    assert ssh_gate.parse("memory", PROGRAM) == Memory()
    for command in ("doctor ", "doctor --fix", "sandbox-kernel doctor", "doctor; id", "memory --all"):
        with pytest.raises(Refused):
            ssh_gate.parse(command, PROGRAM)


def test_egs_signals_and_polls_are_read_and_other_signals_refused():
    assert ssh_gate.parse("kill -0 4242; echo $?", PROGRAM) == Signal(0, 4242)
    assert ssh_gate.parse("kill -15 -4242; echo $?", PROGRAM) == Signal(15, -4242)
    with pytest.raises(Refused, match="signal 11"):
        ssh_gate.parse("kill -11 4242; echo $?", PROGRAM)


def gate(command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The installed `sandbox-kernel eg-ssh`, as sshd runs it for the key."""
    program = str(Path(sys.executable).with_name("sandbox-kernel"))
    return subprocess.run([program, "eg-ssh", "--log-folder", str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, ssh_gate.COMMAND_ENV: command}, timeout=60)  # fmt: skip


def test_the_installed_gate_refuses_a_shell_command_and_runs_nothing(tmp_path: Path):
    mark = tmp_path / "ran"
    done = gate(f"touch {mark}", tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert "sandbox-kernel eg-ssh refused:" in done.stderr and "is not a command this host runs for EG" in done.stderr
    assert not mark.exists()


def test_the_installed_gate_signals_only_its_own_launchers(tmp_path: Path):
    other = subprocess.Popen(["sleep", "60"])
    try:
        done = gate(f"kill -{int(signal.SIGKILL)} {other.pid}; echo $?", tmp_path)
        assert done.stdout == "1\n" and "is not a launcher of" in done.stderr
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("value, says", [("a\0b", "NUL"), ("\udc00", "lone surrogate")])
def test_a_value_no_process_environment_can_hold_is_refused(value, says):
    line = eg_launch_line({"KERNEL_X": value}, [PROGRAM, "launch-eg", *OPTIONS])
    with pytest.raises(Refused, match=says):
        ssh_gate.parse(line, PROGRAM)


@pytest.mark.parametrize("target", [1, -1])
def test_every_process_and_init_are_never_targets(target):
    with pytest.raises(Refused, match="never 1 or -1"):
        ssh_gate.parse(f"kill -9 {target}; echo $?", PROGRAM)


def test_the_log_is_private_and_never_written_through_a_planted_link(tmp_path: Path):
    folder = tmp_path / "logs"
    log = ssh_gate.open_log(folder, KERNEL_ID)
    os.close(log)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / f"kernel-{KERNEL_ID}.log").stat().st_mode & 0o777 == 0o600
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    other = "1b7a3c9e-1111-4222-8333-444455556666"
    (folder / f"kernel-{other}.log").symlink_to(victim)
    with pytest.raises(OSError):
        ssh_gate.open_log(folder, other)
    assert victim.read_text() == "untouched"


def test_the_launcher_gets_kernel_values_and_the_kept_names_only(tmp_path: Path, monkeypatch):
    """A stand-in launcher that prints its environment, started by run_launch as the gate starts the real one."""
    from eg_payload import eg_public_key, new_key

    program = tmp_path / "sandbox-kernel"
    program.write_text("#!/bin/sh\nenv\n")
    program.chmod(0o755)
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 1 10.0.0.2 22")
    monkeypatch.setenv("LANG", "sent-by-the-client")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    options = [eg_public_key(new_key()) if word == "AAAA+/=" else word for word in OPTIONS]
    line = eg_launch_line({"KERNEL_NOTE": "$(id)", "PATH": "/evil"}, [str(program), "launch-eg", *options])
    request = ssh_gate.parse(line, str(program))
    assert isinstance(request, Launch)
    pid = ssh_gate.run_launch(request, str(program), tmp_path / "logs")
    os.waitpid(pid, 0)
    printed = (tmp_path / "logs" / f"kernel-{KERNEL_ID}.log").read_text().splitlines()
    env = dict(entry.split("=", 1) for entry in printed if "=" in entry and not entry.startswith("eg-ssh:"))
    assert env["KERNEL_NOTE"] == "$(id)" and env["PATH"] == os.environ["PATH"]
    assert not {"SSH_CONNECTION", "LANG", "LD_PRELOAD"} & set(env)


def test_the_installed_gate_refuses_values_the_launcher_would_refuse_before_starting_it(tmp_path: Path):
    program = os.path.realpath(Path(sys.executable).with_name("sandbox-kernel"))
    done = gate(eg_launch_line({}, [program, "launch-eg", *OPTIONS]), tmp_path)  # "AAAA+/=" is no public key
    assert done.returncode == 1 and done.stdout == ""
    assert "is not a base64 DER public key" in done.stderr
    assert not list(tmp_path.iterdir())  # no log: nothing was started


def test_memory_counts_a_launchers_whole_tree_and_nothing_else(tmp_path: Path):
    """A stand-in launcher (its command line `program launch-eg --kernel-id ID`) with a child, beside another
    process: the report names its kernel, counts both processes and their PSS."""
    program = tmp_path / "sandbox-kernel"
    program.write_text("#!/bin/sh\nsleep 60 &\necho forked\nwait\n")
    program.chmod(0o755)
    launcher = subprocess.Popen([str(program), "launch-eg", "--kernel-id", KERNEL_ID], stdout=subprocess.PIPE)
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert launcher.stdout is not None and launcher.stdout.readline() == b"forked\n"  # its child exists now
        found = json.loads(ssh_gate.kernel_memory.report(lambda pid: ssh_gate.is_launcher(pid, str(program))))
        assert [(k["kernel_id"], k["processes"]) for k in found["kernels"]] == [(KERNEL_ID, 2)]
        assert 0 < found["kernels"][0]["pss_mib"] < 50 and 0 < found["mem_available_mib"] <= found["mem_total_mib"]
        assert found["cpus"] == os.cpu_count()
    finally:
        for proc in (launcher, other):
            proc.kill()
            proc.wait()
