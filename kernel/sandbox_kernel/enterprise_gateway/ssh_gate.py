"""The only commands Enterprise Gateway's SSH key may run on a kernel host. Security-critical: review with launcher.py.

EG's DistributedProcessProxy runs kernels on other hosts over SSH, and builds each command as one shell line:
`export NAME="value";... nohup ARGV >> LOG 2>&1 & echo $!` to launch, `kill -N TARGET; echo $?` to signal and
poll. Its values are JSON strings inside double quotes, where a shell still expands `$(...)` and backticks, and
KERNEL_* values come from EG's clients: on a plain login shell, any client that may start a kernel runs commands on
the host, outside every sandbox. Installed as the key's forced command (authorized_keys:
`command="/opt/sandbox-kernel/venv/bin/sandbox-kernel eg-ssh",restrict ssh-ed25519 ...`), this module reads what EG
asked for from SSH_ORIGINAL_COMMAND and carries it out without a shell, if it is one of those two shapes:

- **launch**: the words must be this host's own launcher (this program, then `launch-eg` and only EG's own options,
  whose values the launcher's own parser accepts). It starts in a session of its own, with each KERNEL_* value
  exactly as EG meant it (decoded, never expanded), no other exported name, and of the gate's own environment only
  KEPT_ENV; its output goes to LOG_FOLDER/kernel-<kernel id>.log (a private folder; the file is never a link); its
  pid is printed.
- **signal**: the target (a pid, or minus a process group's leader) must be a launcher of this program, by its
  command line (`[python] program launch-eg ...`); kill's status is printed, as EG reads it.

- **doctor**: the command `doctor` (from `sandbox-kernel eg-hosts`, the operator's preflight, not from EG): this
  host's `sandbox-kernel doctor`, whose report and status are passed on.
- **memory**: the command `memory` (from bench/remote_load.py): each launcher's kernel id and the PSS of its
  processes, as one JSON line (kernel_memory.py).

Anything else is refused with one line on stderr saying what was asked and what is allowed (EG shows it), status 1.
Kernel settings do not pass either: a host's kernels take theirs from the host's own configuration files.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sandbox_kernel.enterprise_gateway import arguments, kernel_memory
from sandbox_kernel.enterprise_gateway.arguments import LaunchArgumentError, parse_kernel_id

COMMAND_ENV = "SSH_ORIGINAL_COMMAND"  # what sshd gives a forced command: the client's command line
LAUNCHER = "launch-eg"
DOCTOR = "doctor"  # the preflight's command (host_check.py)
MEMORY = "memory"  # the remote load test's command (kernel_memory.py)
REFUSED = "sandbox-kernel eg-ssh refused:"  # how a refusal begins, on stderr
# launch-eg's options EG's words may carry, each followed by its value (the kernelspec's argv and EG's values)
OPTIONS = frozenset({
    "--kernel-id", "--RemoteProcessProxy.kernel-id", "--response-address", "--RemoteProcessProxy.response-address",
    "--public-key", "--RemoteProcessProxy.public-key", "--port-range", "--RemoteProcessProxy.port-range",
    "--spark-context-initialization-mode", "--RemoteProcessProxy.spark-context-initialization-mode", "--ip",
})  # fmt: skip
KERNEL_ID_OPTIONS = ("--kernel-id", "--RemoteProcessProxy.kernel-id")
PASSED_ENV = re.compile(r"KERNEL_[A-Z0-9_]{1,64}")  # exported names that reach the launcher, as data
# Of the gate's own environment (sshd's, and what the forced command's operator set): what the launcher keeps
KEPT_ENV = re.compile(r"PATH|HOME|USER|LOGNAME|TZ|JUPYTER_[A-Z0-9_]+|SANDBOX_KERNEL_[A-Z0-9_]+")
SIGNALS = frozenset({0, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL, signal.SIGTERM})
MAX_COMMAND = 64 * 1024

_EXPORT = re.compile(r'export ([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*");')  # json.dumps output: ASCII
_LAUNCH = re.compile(r"nohup ([^ ].*) >> (\S+) 2>&1 & echo \$!")
_SIGNAL = re.compile(r"kill -(\d{1,2}) (-?[1-9]\d{0,9}); echo \$\?")


class Refused(ValueError):
    """A command this gate does not run; the message says what it was and what is allowed."""


@dataclass(frozen=True)
class Launch:
    words: list[str]  # launch-eg's options (after `<program> launch-eg`)
    env: dict[str, str]  # KERNEL_* values, decoded
    kernel_id: str
    dropped: list[str]  # exported names that did not pass


@dataclass(frozen=True)
class Signal:
    signum: int
    target: int  # a pid, or minus a process group id


@dataclass(frozen=True)
class Doctor:
    """The preflight's request: this host's `sandbox-kernel doctor`."""


@dataclass(frozen=True)
class Memory:
    """The load test's request: the memory of this host's EG kernels."""


def _shown(command: str) -> str:
    return repr(command[:200]) + ("..." if len(command) > 200 else "")


def _decoded(value: str) -> str:
    """EG's value: json.dumps(value) with each ' doubled (EG's own escaping, undone pair by pair)."""
    decoded = json.loads(value.replace("''", "'"))
    if not isinstance(decoded, str):
        raise Refused(f"an exported value is not a string: {value[:100]!r}")
    try:
        decoded.encode()
    except UnicodeEncodeError:
        raise Refused(f"an exported value is not text (a lone surrogate): {value[:100]!r}") from None
    if "\0" in decoded:
        raise Refused(f"an exported value holds a NUL character: {value[:100]!r}")
    return decoded


def parse(command: str, program: str) -> Launch | Signal | Doctor | Memory:
    """What `command` (EG's line) asks for, if this gate runs it; Refused otherwise. `program` is this host's
    `sandbox-kernel`, the only first word a launch may have."""
    allowed = (
        f'allowed: EG\'s launch of `{program} {LAUNCHER} ...` (export NAME="value";... nohup ... >> LOG 2>&1 & '
        "echo $!) and `kill -N TARGET; echo $?` for its launchers (docs/enterprise-gateway.md, the SSH hosts)"
    )
    if len(command) > MAX_COMMAND:
        raise Refused(f"a command of {len(command)} characters (at most {MAX_COMMAND}); {allowed}")
    if command == DOCTOR:
        return Doctor()
    if command == MEMORY:
        return Memory()
    if found := _SIGNAL.fullmatch(command):
        signum, target = int(found[1]), int(found[2])
        if signum not in SIGNALS:
            raise Refused(f"signal {signum} in {_shown(command)}: allowed are {sorted(map(int, SIGNALS))}")
        if abs(target) == 1:
            raise Refused(f"target {target} in {_shown(command)}: a launcher's pid or group, never 1 or -1")
        return Signal(signum, target)
    env: dict[str, str] = {}
    position = 0
    while found := _EXPORT.match(command, position):
        try:
            env[found[1]] = _decoded(found[2])
        except Refused:
            raise
        except ValueError as exc:
            raise Refused(f"export {found[1]}: {exc}; {allowed}") from None
        position = found.end()
    launch = _LAUNCH.fullmatch(command, position)
    if launch is None:
        where = f" (from character {position}: {command[position : position + 80]!r})" if position else ""
        raise Refused(f"{_shown(command)} is not a command this host runs for EG{where}; {allowed}")
    words = launch[1].split(" ")
    if len(words) < 2 or os.path.realpath(words[0]) != program or words[1] != LAUNCHER:
        raise Refused(f"the launch runs {' '.join(words[:2])[:200]!r}, not {program} {LAUNCHER}; {allowed}")
    options = words[2:]
    for i in range(0, len(options), 2):
        if options[i] not in OPTIONS or i + 1 == len(options) or not options[i + 1]:
            raise Refused(
                f"launcher option {options[i][:100]!r}: allowed are {', '.join(sorted(OPTIONS))}, each with a value "
                "(kernel settings come from this host's own configuration files, not from EG's command line)"
            )
    ids = [options[i + 1] for i in range(0, len(options), 2) if options[i] in KERNEL_ID_OPTIONS]
    if len(ids) != 1:
        raise Refused(f"the launch gives {len(ids)} kernel ids; exactly one is allowed")
    try:
        kernel_id = parse_kernel_id(ids[0])
    except LaunchArgumentError as exc:
        raise Refused(str(exc)) from None
    passed = {name: value for name, value in env.items() if PASSED_ENV.fullmatch(name)}
    return Launch(options, passed, kernel_id, sorted(set(env) - set(passed)))


def is_launcher(pid: int, program: str) -> bool:
    """Whether process `pid` runs `program launch-eg ...` (as its script, `python program launch-eg ...`)."""
    try:
        words = [w.decode(errors="replace") for w in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:3]]
    except OSError:
        return False
    return words[:2] == [program, LAUNCHER] or (len(words) == 3 and words[1:] == [program, LAUNCHER])


def run_signal(request: Signal, program: str) -> int:
    """kill's exit status (0 or 1), as EG reads it from stdout. The process is held by a pidfd from before the
    check, so a pid reused meanwhile is never signalled; a group must be led by the launcher."""
    leader = abs(request.target)
    try:
        handle = os.pidfd_open(leader)
    except OSError:
        return 1
    try:
        if not is_launcher(leader, program) or (request.target < 0 and os.getpgid(leader) != leader):
            print(f"sandbox-kernel eg-ssh: process {leader} is not a launcher of {program}", file=sys.stderr)
            return 1
        signal.pidfd_send_signal(handle, 0)  # still the process that was checked
        if request.target < 0:
            os.killpg(leader, request.signum)
        elif request.signum:
            signal.pidfd_send_signal(handle, request.signum)
    except OSError:
        return 1
    finally:
        os.close(handle)
    return 0


def kept_env() -> dict[str, str]:
    """What a program the gate starts keeps of the gate's own environment (KEPT_ENV)."""
    return {k: v for k, v in os.environ.items() if KEPT_ENV.fullmatch(k)}


def default_log_folder() -> Path:
    """A folder only this user can open (EG's own default, /tmp, lets others plant a link at a kernel's log)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "sandbox-kernel" / "eg-kernel-logs"


def open_log(folder: Path, kernel_id: str) -> int:
    """The launcher's log, appended to: made 0600 in a 0700 folder, never through a link, and only a regular file
    of this user."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / f"kernel-{kernel_id}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(fd)
        raise Refused(f"{folder}/kernel-{kernel_id}.log is not a regular file of this user")
    return fd


def run_launch(request: Launch, program: str, log_folder: Path) -> int:
    """Start the launcher in a session of its own, once its own parser has taken EG's values; its pid."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage: the refusal below says it instead
            arguments.parse(request.words)
    except LaunchArgumentError as exc:
        raise Refused(str(exc)) from None
    except SystemExit:
        raise Refused(f"launch-eg's options do not parse: {' '.join(request.words)[:300]!r}") from None
    try:
        log = open_log(log_folder, request.kernel_id)
    except OSError as exc:
        raise Refused(f"the launcher's log in {log_folder} cannot be opened: {exc}") from None
    try:
        if request.dropped:
            os.write(log, f"eg-ssh: exported names not passed to the kernel: {', '.join(request.dropped)}\n".encode())
        try:
            proc = subprocess.Popen(
                [program, LAUNCHER, *request.words], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=kept_env() | request.env, start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            raise Refused(f"the launcher {program} could not be started: {exc}") from None
    finally:
        os.close(log)
    return proc.pid


def main(log_folder: Path | None = None) -> int:
    """The forced command: carry out SSH_ORIGINAL_COMMAND if allowed, print what EG reads."""
    program = os.path.realpath(sys.argv[0])
    log_folder = log_folder or default_log_folder()
    command = os.environ.get(COMMAND_ENV, "")
    try:
        request = parse(command, program)
        if isinstance(request, Doctor):
            return subprocess.run([program, DOCTOR], stdin=subprocess.DEVNULL, env=kept_env(), check=False).returncode
        if isinstance(request, Memory):
            print(kernel_memory.report(lambda pid: is_launcher(pid, program)))
            return 0
        answer = (
            run_signal(request, program) if isinstance(request, Signal) else run_launch(request, program, log_folder)
        )
    except Refused as exc:
        print(f"{REFUSED} {exc}", file=sys.stderr)
        return 1
    print(answer)
    return 0
