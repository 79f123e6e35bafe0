"""One launch plan: every path, permission and limit of a sandbox process, decided once per sandbox.

Deno's command line, the supervisor's init message (the worker's permissions among it) and the OS layers'
allow-lists are all made from one `LaunchPlan` value, so the two walls always agree on what the sandbox may
touch. README's "exact command line" is checked against `deno_argv` by tests/unit/test_readme_command_line.py.
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox_kernel import paths, private_files
from sandbox_kernel.sandbox import guarded_paths, netpolicy, provision
from sandbox_kernel.sandbox.mounts import Mount, supervisor_config
from sandbox_kernel.sandbox.oslayers.spec import LaunchSpec

# Files the Deno binary itself needs (its libraries, time zones, CPU count), never secrets.
SYSTEM_READ = (
    "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo",
    "/dev/null", "/dev/urandom", "/proc/self", "/sys/devices/system/cpu", "/sys/fs/cgroup",
)  # fmt: skip
# ... and what name resolution and TLS read, only when allow_net names anything.
NETWORK_READ = (
    "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/host.conf", "/etc/ssl",
    "/etc/ca-certificates", "/usr/share/ca-certificates",
)  # fmt: skip
LAUNCHER = Path(__file__).resolve().parent / "oslayers" / "launch.py"
TEST_DENO_ALL = "SANDBOX_KERNEL_TEST_DENO_ALL"  # tests only: Deno's own checks off, to test the OS layers alone
# V8's own memory savers (bench/NOTES.md, issues 15 and 28): `--optimize-for-size`, ~15 MiB less per sandbox with
# CPU-bound guest code as fast; and no speculative inlining of indirect calls into optimised wasm: CPython's
# interpreter loop (one 79 KB function) breaks its guesses, and V8 deoptimised and recompiled it three more times in
# a sandbox's first seconds (each ~0.2-1.2 s of CPU and ~28 MB of compiler memory); without it, it is compiled once
# and guest code runs as fast or faster.
V8_MEMORY_FLAGS = ("--optimize-for-size", "--no-wasm-inlining-call-indirect")
# Deno allocates with glibc's malloc. One arena instead of one per thread (Deno runs ~15), and blocks of 32 KiB or
# more (V8's compiler memory: ~25 MB while it optimises the interpreter loop) in their own mappings, given back when
# freed; a fixed threshold also keeps the heap's top given back from 128 KiB. ~20 MiB less per sandbox, for ~0.05 s
# more system time at start (bench/NOTES.md, issue 28).
MALLOC_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "32768"}
# Optimised wasm code that may deoptimise is compiled again and again: CPython's interpreter loop (a function of
# 79 KB) deoptimises on polymorphic indirect calls, and each recompile takes 0.2-0.8 s of a V8 thread. Without
# deopts: warm `pass` 3.0 ms instead of 14.6 ms and p90 7.7 instead of 24.7 ms on a busy machine, the CPU-bound loop
# warm from the second cell instead of the sixth, ~6% slower once warm (bench/NOTES.md, issue 28).
V8_TIERING_FLAGS = ("--no-wasm-deopt",)
# V8 and Deno map about 1.1 GiB of writable memory before any guest code runs (measured here).
DATA_BASELINE_MB = 1280


def data_limit_mb(memory_limit_mb: int) -> int:
    """The OS limit on the sandbox process's writable memory: baseline, wasm memory and JS heap."""
    return DATA_BASELINE_MB + 2 * memory_limit_mb


def _deno_checks_off() -> bool:
    return os.environ.get(TEST_DENO_ALL) == "1"


@dataclass(frozen=True)
class LaunchPlan:
    """What one sandbox process may read, write, connect to and run; made once per sandbox."""

    host: Path  # host_ts/
    pyodide: Path
    wheels: Path
    snapshots: Path
    extra_read: list[Path]
    mounts: list[Mount]
    allow_net: list[str]
    private: Path  # the sandbox's own folder: its socket, and Deno's scratch DENO_DIR
    shared_deno_dir: Path
    ca_pem: bytes | None = None  # CA certificates TLS trusts besides Deno's own, written into `private`
    ca_store: str | None = None  # DENO_TLS_CA_STORE for Deno, when the host names a valid one
    memory_limit_mb: int = 1024
    v8_flags: list[str] = field(default_factory=list)
    os_sandbox: str = "auto"  # auto | required | off
    os_layers: list[str] = field(default_factory=list)
    # What the supervisor starts Python with (the rest of its init message).
    guest_site: Path = field(default_factory=provision.guest_site_dir)  # the guest's extracted wheels
    snapshot: Path | None = None  # the memory snapshot offered to this sandbox (in `snapshots`), if any
    packages_site: Path | None = None  # SandboxKernel.packages unpacked on the host, mounted read-only (in extra_read)
    pyodide_lock: str | None = None  # lock file contents of SandboxKernel.pyodide_index
    pyodide_packages: Path | None = None  # where the host puts Pyodide package files for the guest
    ring_bytes: int = 4 << 20
    reply_bytes: int = 1 << 20
    max_frame_bytes: int = 64 << 20
    max_event_bytes: int = 32 << 20
    deno_checks_off: bool = field(default_factory=_deno_checks_off)
    net_allowed: list[str] = field(init=False)  # allow_net as Deno takes it
    net_denied: list[str] = field(init=False)  # private ranges not named by allow_net

    def __post_init__(self) -> None:
        allowed, denied = netpolicy.deno_flags(self.allow_net)  # checked once, here
        object.__setattr__(self, "net_allowed", allowed)
        object.__setattr__(self, "net_denied", denied)

    @property
    def socket(self) -> Path:
        return self.private / "host.sock"

    @property
    def scratch_deno_dir(self) -> Path:
        return self.private / "deno"

    @property
    def ca_file(self) -> Path | None:
        """The CA certificates Deno's `--cert` reads (in the private folder the OS layers let it read), if any."""
        return self.private / "ca.pem" if self.ca_pem and self.net_allowed else None

    @property
    def view_root(self) -> Path:
        """Where the launcher builds the sandbox's private root (an empty folder, not part of it)."""
        return self.private / "view"

    @property
    def worker_read(self) -> list[Path]:
        """What guest code may read through Deno (its worker)."""
        return [self.host, self.pyodide, self.wheels, self.snapshots, *self.extra_read, *(m.host for m in self.mounts)]

    @property
    def writable(self) -> list[Path]:
        """Read-write mounts: only the supervisor writes there, on the worker's behalf (file_service.ts)."""
        return [m.host for m in self.mounts if m.writable]

    @property
    def hidden(self) -> list[Path]:
        """Secret-holding entries at the top of mounts (`.ssh`, `.env`, ...): no read, an empty view."""
        return [p for m in self.mounts for p in guarded_paths.hidden(m)]

    @property
    def write_denied(self) -> list[Path]:
        """Protected names at the top of read-write mounts, for Deno's --deny-write (existing or not)."""
        return [p for m in self.mounts for p in guarded_paths.write_denied(m)]

    @property
    def data_limit(self) -> int:
        """RLIMIT_DATA for the process, in bytes."""
        return data_limit_mb(self.memory_limit_mb) << 20

    def deno_argv(self) -> list[str]:
        """The exact Deno command line: least privilege, no prompts, cached code only."""
        read = ",".join(str(p) for p in (*self.worker_read, self.socket))
        write = ",".join(str(p) for p in (*self.writable, self.socket))
        net = ",".join([f"unix:{self.socket}", *self.net_allowed])
        flags = [f"--allow-read={read}", f"--allow-write={write}"]
        if self.hidden:
            flags.append(f"--deny-read={','.join(str(p) for p in self.hidden)}")
        if self.write_denied:
            flags.append(f"--deny-write={','.join(str(p) for p in self.write_denied)}")
        flags += [f"--allow-net={net}", f"--deny-net={','.join(self.net_denied)}"]
        if self.deno_checks_off:
            flags = ["--allow-all"]
        mb = self.memory_limit_mb
        v8 = [f"--wasm-max-mem-pages={mb * 16}", f"--max-old-space-size={mb}", *V8_MEMORY_FLAGS, *V8_TIERING_FLAGS]
        v8 += self.v8_flags
        tls = [f"--cert={self.ca_file}"] if self.ca_file else []
        # --no-code-cache: Deno would write V8's code cache (3.7 MB) into this sandbox's fresh DENO_DIR, a tmpfs that
        # no later start reads (bench/NOTES.md, issue 28).
        return [
            paths.deno_executable(), "run", "--no-prompt", "--cached-only", "--no-code-cache",
            f"--config={self.host / 'deno.json'}", "--unstable-worker-options", *flags, *tls,
            "--v8-flags=" + ",".join(v8), str(self.host / "main.ts"),
        ]  # fmt: skip

    def worker_permissions(self) -> dict[str, Any]:
        """The init message's part that sets the worker's Deno permissions (it reads what Deno may, writes nothing)."""
        return {
            "workerNet": self.net_allowed,
            "workerInherits": self.deno_checks_off,
        }

    def init_message(self, token: str, partial_tag: str = "0") -> dict[str, Any]:
        """The supervisor's init message (main.ts reads it on its stdin): its keys are protocol.json's initKeys."""
        return {
            "socket": str(self.socket),
            "token": token,
            "partialTag": partial_tag,
            **self.worker_permissions(),
            "mounts": supervisor_config(self.mounts),
            "guestSite": str(self.guest_site),
            "snapshot": str(self.snapshot) if self.snapshot else None,
            "packagesSite": str(self.packages_site) if self.packages_site else None,
            "pyodideLock": self.pyodide_lock,
            "pyodidePackages": str(self.pyodide_packages) if self.pyodide_packages else None,
            "guestDir": str(self.host / "guest"),
            "ringBytes": self.ring_bytes,
            "replyBytes": self.reply_bytes,
            "maxFrameBytes": self.max_frame_bytes,
            "maxEventBytes": self.max_event_bytes,
            "memoryLimitMb": self.memory_limit_mb,
        }

    def env(self) -> dict[str, str]:
        store = {"DENO_TLS_CA_STORE": self.ca_store} if self.ca_store and self.net_allowed else {}
        return {
            "DENO_DIR": str(self.scratch_deno_dir),
            "NO_COLOR": "1",
            "DENO_NO_UPDATE_CHECK": "1",
            **MALLOC_ENV,
            **store,
        }

    def prepare_scratch(self) -> None:
        """Deno's DENO_DIR for this sandbox: the shared npm cache seen through a link, nothing else.

        Whatever Deno writes on its own (the Web Cache's location_data, its SQLite caches) lands
        here and is removed with the sandbox; under Landlock it may not be written at all, and in the
        namespaces layer's private root it is a size-capped tmpfs that the host never sees.
        """
        self.view_root.mkdir()
        self.scratch_deno_dir.mkdir()
        (self.scratch_deno_dir / "npm").symlink_to(self.shared_deno_dir / "npm")
        if self.ca_file and self.ca_pem:
            with os.fdopen(private_files.create(self.ca_file), "wb") as f:  # 0600: Deno runs as this user
                f.write(self.ca_pem)

    def launch_spec(self) -> LaunchSpec:
        """What the launcher applies before it becomes Deno (whose command line it carries)."""
        argv = self.deno_argv()
        deno = os.path.realpath(argv[0])
        allowed = self.net_allowed
        ports = [netpolicy.split_entry(e)[1] for e in allowed]
        system = [*SYSTEM_READ, *(NETWORK_READ if allowed else ())]
        return LaunchSpec(
            argv=argv,
            env=self.env(),
            mode=self.os_sandbox,
            layers=list(self.os_layers),
            parent=os.getpid(),
            data_limit=self.data_limit,
            read=[
                *system,
                *(str(p) for p in (*self.worker_read, self.shared_deno_dir / "npm", self.private)),
                *(str(p) for m in self.mounts for p in guarded_paths.protected_existing(m)),  # read-only in the view
            ],
            write=[str(p) for p in self.writable],
            hide=[str(p) for p in self.hidden],
            execute=[deno, *elf_interpreter(deno)],
            network=bool(allowed),
            tcp_ports=None if None in ports else sorted({p for p in ports if p is not None}),
            view_root=str(self.view_root),
            scratch=str(self.scratch_deno_dir),
            cwd=str(self.private),
        )

    def launcher_argv(self, spec: LaunchSpec) -> list[str]:
        return [sys.executable, "-I", "-S", str(LAUNCHER), spec.to_json()]


def elf_interpreter(binary: str) -> list[str]:
    """The dynamic loader an ELF executable names (PT_INTERP), resolved; [] for static or non-ELF."""
    try:
        with open(binary, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
                return []
            end = "<" if head[5] == 1 else ">"
            (phoff,) = struct.unpack_from(end + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                kind, _, offset, _, _, size = struct.unpack_from(end + "IIQQQQ", table, i * phentsize)
                if kind == 3:  # PT_INTERP
                    f.seek(offset)
                    name = f.read(size).rstrip(b"\0").decode()
                    return [os.path.realpath(name)]
    except (OSError, struct.error, UnicodeDecodeError):
        pass
    return []
