"""Start one kernel's container for Enterprise Gateway's DockerProcessProxy (Docker, or podman's Docker API).

EG runs this as its kernelspec's argv, with EG's own Python (which has the `docker` package): it must not import
sandbox_kernel. It replaces EG's launch_docker.py, which hands the container all of EG's environment, runs it as the
client's KERNEL_UID and from the client's KERNEL_IMAGE. Here the image (already on the engine: never pulled), the
user (the image's uid 1000), the container's command and its confinement are the kernelspec's; a client's KERNEL_*
values reach the container only as data in its environment, and a client's KERNEL_IMAGE other than the
kernelspec's is refused.

    python -I launch_container.py --kernel-id=ID --image=IMAGE [--ulimit=NAME=N ...] [--memory-mb=N] [--cpus=N]
        [--home-mb=N] [--tmp-mb=N] [--tmpfs-options=OPTIONS] [--security-opt=apparmor=NAME]
        [--checkpoint-key=FILE] -- COMMAND...

COMMAND is the container's command (its entry point is `sandbox-kernel`): kernelspecs.py writes the launcher's
words there, with EG's values. The container joins EG_DOCKER_NETWORK (set by EG; not the host's network), carries
EG's `kernel_id` label (how EG finds it) and is removed when it ends, or at once if it cannot start. Exit status 0
once the engine has started it; 1 with one line on standard error (in EG's log) when it cannot be started; 2 for
arguments this script does not take.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # as the launcher's own check (arguments.KERNEL_ID)
ULIMIT = re.compile(r"(nofile|nproc)=([1-9][0-9]{0,6})")
TMPFS_OPTION = re.compile(r"rw|U|noexec|nosuid|nodev|mode=[0-7]{3,4}")  # what the home and /tmp may be mounted with
SECURITY_OPT = re.compile(r"apparmor=[A-Za-z0-9_.-]{1,100}")  # Docker's AppArmor profile (docs/container.md)
USER = "1000:1000"  # the image's user `sandbox` (kernelspecs.IMAGE_UID), whatever the image's USER says
HOME = "/home/sandbox"  # its home (kernelspecs.IMAGE_HOME)
KEY_IN_CONTAINER = "/etc/sandbox-kernel/checkpoint-key/checkpoint.key"  # kernelspecs.KEY_FOLDER / KEY_FILE
PASSED = re.compile(r"KERNEL_[A-Z0-9_]{1,64}")  # a client's variables, passed as data (as ssh_gate.PASSED_ENV)
NOT_PASSED = frozenset({"KERNEL_UID", "KERNEL_GID", "KERNEL_IMAGE", "KERNEL_EXECUTOR_IMAGE", "KERNEL_WORKING_DIR"})
REFUSED_NETWORKS = re.compile(r"host|none|(container|ns|slirp4netns|pasta):?.*")  # not a network of its own


class Refused(Exception):
    """What this launcher will not start, and why."""


def parse(argv: list[str]) -> argparse.Namespace:
    """The kernelspec's options (each at most once) and the container's command after `--`."""
    parser = argparse.ArgumentParser(
        prog="launch_container.py", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--kernel-id", required=True)
    parser.add_argument("--image", required=True, help="the kernel's image (the kernelspec's; never the client's)")
    parser.add_argument("--ulimit", action="append", default=[], help="nofile=N or nproc=N (soft and hard)")
    parser.add_argument("--memory-mb", type=int, default=1536, help="the container's memory limit, MiB, no swap")
    parser.add_argument("--cpus", type=float, default=1.0, help="the CPUs the container may use")
    parser.add_argument("--home-mb", type=int, default=2304, help="the size of the home's tmpfs, MiB")
    parser.add_argument("--tmp-mb", type=int, default=512, help="the size of /tmp's tmpfs, MiB")
    parser.add_argument("--tmpfs-options", default="rw", help="for the home and /tmp (podman: rw,U)")
    parser.add_argument("--security-opt", action="append", default=[], help="apparmor=NAME")
    parser.add_argument("--checkpoint-key", help="an absolute path on this host, mounted read-only as the key")
    parser.add_argument("command", nargs="+", help="after --: the container's command")
    singles = ("--kernel-id", "--image", "--memory-mb", "--cpus", "--home-mb", "--tmp-mb", "--tmpfs-options",
               "--checkpoint-key")  # fmt: skip
    before = argv[: argv.index("--")] if "--" in argv else argv
    for name in singles:
        if sum(word == name or word.startswith(name + "=") for word in before) > 1:
            parser.error(f"{name} is given more than once")
    return parser.parse_args(argv)


def checked_options(args: argparse.Namespace) -> list[str]:
    """What is wrong with the kernelspec's own options (kernelspecs.py checks them when it writes them, too)."""
    found = []
    found += [f"--ulimit {u!r:.100}: nofile=N or nproc=N" for u in args.ulimit if not ULIMIT.fullmatch(u)]
    if not all(TMPFS_OPTION.fullmatch(o) for o in args.tmpfs_options.split(",")):
        found.append(f"--tmpfs-options {args.tmpfs_options!r:.100}: among rw, U, noexec, nosuid, nodev, mode=NNNN")
    found += [f"--security-opt {o!r:.100}: apparmor=NAME" for o in args.security_opt if not SECURITY_OPT.fullmatch(o)]
    for name, value, lowest in (("memory-mb", args.memory_mb, 256), ("home-mb", args.home_mb, 16),
                                ("tmp-mb", args.tmp_mb, 16)):  # fmt: skip
        if not lowest <= value <= 1 << 20:
            found.append(f"--{name} {value}: {lowest} to {1 << 20}")
    if not 0.1 <= args.cpus <= 1024:
        found.append(f"--cpus {args.cpus:g}: 0.1 to 1024")
    key = args.checkpoint_key
    if key is not None and (not key.startswith("/") or not re.fullmatch(r"[A-Za-z0-9_./-]{2,4096}", key)):
        found.append(f"--checkpoint-key {key!r:.100}: an absolute path of letters, digits and _ . / -")
    return found


def container_options(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, object]:
    """The engine's create() options for this kernel; Refused if anything given cannot be used."""
    if not KERNEL_ID.fullmatch(args.kernel_id):
        raise Refused(f"kernel id {args.kernel_id!r:.100}: letters, digits and . _ - (at most 128)")
    if found := checked_options(args):
        raise Refused("; ".join(found))
    asked = environ.get("KERNEL_IMAGE", "")
    if asked and asked != args.image:
        raise Refused(f"KERNEL_IMAGE {asked!r:.200} was refused: this kernelspec runs {args.image} only")
    network = environ.get("EG_DOCKER_NETWORK", "bridge")
    if REFUSED_NETWORKS.fullmatch(network):
        raise Refused(f"EG_DOCKER_NETWORK {network!r:.100}: a network of the engine's own, for kernels only")
    env = {k: v for k, v in environ.items() if PASSED.fullmatch(k) and k not in NOT_PASSED}
    env["KERNEL_ID"] = args.kernel_id
    memory = args.memory_mb + args.home_mb + args.tmp_mb  # a tmpfs's pages count against the limit
    options: dict[str, object] = {
        "command": args.command,
        "name": f"sandbox-kernel-{args.kernel_id}",
        "user": USER,
        "labels": {"kernel_id": args.kernel_id, "component": "kernel", "app": "enterprise-gateway"},
        "environment": env,
        "network": network,
        "auto_remove": True,
        "read_only": True,
        "tmpfs": {
            HOME: f"{args.tmpfs_options},size={args.home_mb}m",
            "/tmp": f"{args.tmpfs_options},size={args.tmp_mb}m",
        },
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges", *args.security_opt],
        "ulimits": [
            {"Name": m[1], "Soft": int(m[2]), "Hard": int(m[2])} for m in map(ULIMIT.fullmatch, args.ulimit) if m
        ],
        "mem_limit": f"{memory}m",
        "memswap_limit": f"{memory}m",
        "nano_cpus": int(args.cpus * 1e9),
        "pids_limit": 4096,
    }
    if args.checkpoint_key:
        options["volumes"] = {args.checkpoint_key: {"bind": KEY_IN_CONTAINER, "mode": "ro"}}
        env["SANDBOX_KERNEL_CHECKPOINT_KEY"] = KEY_IN_CONTAINER
    return options


def start(image: str, options: dict[str, object]) -> str:
    """Create and start the container (never pulling the image); one that cannot start is removed. Its short id."""
    from docker import DockerClient
    from docker.errors import DockerException
    from docker.types import Ulimit

    limits: list[dict[str, object]] = options["ulimits"]  # type: ignore[assignment]
    options = {**options, "ulimits": [Ulimit(name=u["Name"], soft=u["Soft"], hard=u["Hard"]) for u in limits]}
    container = None
    try:
        container = DockerClient.from_env().containers.create(image, **options)
        container.start()
    except (DockerException, OSError) as exc:
        if container is not None:
            try:
                container.remove(force=True)
            except (DockerException, OSError):
                pass
        raise Refused(f"the engine did not start {image}: {str(exc)!r:.500}") from exc
    return str(container.short_id)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        short_id = start(args.image, container_options(args, dict(os.environ)))
    except Refused as exc:
        shown = args.kernel_id if KERNEL_ID.fullmatch(args.kernel_id) else f"{args.kernel_id!r:.140}"
        print(f"launch_container.py: kernel {shown}: {exc}", file=sys.stderr)
        return 1
    print(f"launch_container.py: kernel {args.kernel_id}: container {short_id} started", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
