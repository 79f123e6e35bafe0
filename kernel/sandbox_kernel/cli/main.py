"""The `sandbox-kernel` command: install, uninstall, fetch, run, compare, mirror, doctor, mcp, launch-eg, eg-ssh,
eg-hosts, seccomp-profile; otherwise the kernel itself."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sandbox_kernel import __version__

# What `compare` does besides the sandbox, in its help and in the warning it prints before it runs.
COMPARE_UNSANDBOXED = "runs each notebook a second time under plain ipykernel, on this machine, with no sandbox"
COMPARE_TRUSTED_ONLY = "only for notebooks you trust"


def _install(args: argparse.Namespace) -> int:
    from sandbox_kernel.jupyter.kernelspec import DISPLAY_NAME, KERNEL_NAME, install

    prefix = sys.prefix if args.sys_prefix else args.prefix
    where = install(user=args.user, prefix=prefix)
    print(f"Installed kernelspec {KERNEL_NAME} ({DISPLAY_NAME}) in {where}")
    if args.page_policy:
        from sandbox_kernel.jupyter import page_policy

        written = page_policy.install(user=args.user, prefix=prefix)
        print(
            "Installed the page policy (a Content-Security-Policy on every page of the Jupyter servers that read "
            f"{page_policy.config_base(args.user, prefix)}: no output of any kernel can run a script or load from "
            f"another host) in {', '.join(map(str, written))}; restart Jupyter for it to apply"
        )
    if not args.no_fetch:
        return _fetch(args)
    return 0


def _uninstall(args: argparse.Namespace) -> int:
    from sandbox_kernel.cli.uninstall import kernelspec_folders, uninstall
    from sandbox_kernel.jupyter.page_policy import installed_files as page_policy_files
    from sandbox_kernel.skills.audit import default_path

    audit_log = Path(args.audit_log) if args.audit_log else (default_path() if args.all else None)
    folders = kernelspec_folders(args.user, args.sys_prefix, args.prefix)
    policies = page_policy_files(args.user, args.sys_prefix, args.prefix)
    done = uninstall(folders, args.cache or args.all, args.key or args.all, audit_log, page_policies=policies)
    for line in done.removed:
        print(line)
    for line in done.absent:
        print(f"sandbox-kernel uninstall: {line}", file=sys.stderr)
    for line in done.failed:
        print(f"sandbox-kernel uninstall: {line}", file=sys.stderr)
    return 1 if done.failed or not done.removed else 0


def _fetch(args: argparse.Namespace) -> int:
    from sandbox_kernel.cli.fetch import fetch

    return fetch(getattr(args, "to", None), getattr(args, "settings", []), getattr(args, "imports", None) or [])


def _run(args: argparse.Namespace) -> int:
    """Run a script or `-c` code in a fresh sandbox, as `python` would (cli/run.py)."""
    from sandbox_kernel.cli.run import run

    return run(args)


def _compare(args: argparse.Namespace) -> int:
    """Run each notebook under this kernel and under ipykernel; print the cells whose outputs differ."""
    from sandbox_kernel.cli.compare import compare, report

    missing = [name for name in args.notebooks if not Path(name).is_file()]
    if missing:
        print(f"sandbox-kernel compare: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    print(
        f"sandbox-kernel compare: warning: {COMPARE_UNSANDBOXED}: {COMPARE_TRUSTED_ONLY}", file=sys.stderr, flush=True
    )
    settings = [f"--SandboxKernel.working_folder={args.working_folder}"] if args.working_folder else []
    settings += [f"--SandboxKernel.{setting}" for setting in args.setting or []]
    results = [compare(Path(name), settings) for name in args.notebooks]
    text = report(results)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    print(text, end="")
    return 1 if any(r.failure for r in results) else 0


def _mirror(args: argparse.Namespace) -> int:
    """Build a local Pyodide index folder; say where each package came from and what could not be had."""
    from sandbox_kernel.packages.checks import PackageError
    from sandbox_kernel.packages.index import default_pyodide_index
    from sandbox_kernel.packages.mirror import build

    folder = Path(args.folder).resolve()
    try:
        report = build(folder, list(args.names), args.index or default_pyodide_index())
    except PackageError as exc:
        print(f"sandbox-kernel mirror: {exc}", file=sys.stderr)
        return 2
    if report.from_index:
        print(f"from the Pyodide index: {', '.join(report.from_index)}")
    if report.from_pypi:
        why = f" (the Pyodide index could not give them: {report.index_error})" if report.index_error else ""
        print(f"from PyPI: {', '.join(report.from_pypi)}{why}")
    for name, why in report.failed.items():
        print(f"sandbox-kernel mirror: could not get {name}: {why}", file=sys.stderr)
    print(f"Use it with: --SandboxKernel.pyodide_index={folder}  (or c.SandboxKernel.pyodide_index = {str(folder)!r})")
    return 1 if report.failed else 0


def _mcp(args: argparse.Namespace) -> int:
    """An MCP server over one sandbox; the kernel settings given here pass on to its kernel."""
    from sandbox_kernel.client.mcp import main as serve

    return serve(
        args.settings,
        args.port if args.http else None,
        args.token_file,
        args.gateway_url,
        args.gateway_token_env,
        args.kernel_name,
        args.gateway_env,
    )


def _eg_ssh(args: argparse.Namespace) -> int:
    from sandbox_kernel.enterprise_gateway import ssh_gate

    return ssh_gate.main(args.log_folder)


def _eg_hosts(args: argparse.Namespace) -> int:
    from sandbox_kernel.enterprise_gateway import host_check

    return host_check.main(args.hosts, args.user, host_check.ssh_options(args.identity, args.known_hosts))


def _approvals(args: argparse.Namespace) -> int:
    from sandbox_kernel.cli import approvals

    if args.action == "list":
        return approvals.listing(args.folder)
    if (args.grant_id is None) == (not args.all):
        print("sandbox-kernel approvals revoke: give an approval's id (from `list`), or --all", file=sys.stderr)
        return 2
    return approvals.revoke(args.folder, args.grant_id)


def _seccomp_profile(args: argparse.Namespace) -> int:
    """A container seccomp profile: the base one given, plus the calls the OS layers need."""
    from sandbox_kernel.sandbox.oslayers.seccomp_profile import main as make

    try:
        text = make(args.base)
    except (OSError, ValueError) as exc:
        print(f"sandbox-kernel seccomp-profile: {args.base}: {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text)
    else:
        print(text, end="")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from sandbox_kernel.cli.doctor import main as doctor

    return doctor()


SETTING = "--SandboxKernel."  # a kernel setting on the command line of run and mcp: --SandboxKernel.name=value
# The options of run and mcp that take a value (the next word, unless given as --option=value); `-c CODE` ends
# run's own options, as a script's name does: what follows belongs to the code.
OPTION_VALUES = frozenset(
    {"-c", "--timeout", "--mount", "--allow-net", "--working-folder", "--port", "--token-file", "--gateway-url",
     "--gateway-token-env", "--kernel-name", "--gateway-env", "--to", "--import"}
)  # fmt: skip


def split_command_line(words: list[str]) -> tuple[list[str], list[str], list[str]]:
    """A command's words as (kernel settings, its own options, what follows them). The settings
    (`--SandboxKernel.name=value`) are taken from among its own options, which end, as python's do, at the first
    word that is not an option (a script: it and the rest are the code's), after `-c CODE` (the rest are the
    code's arguments) or at `--`: a word after that is the code's, even one that looks like a setting."""
    settings: list[str] = []
    own: list[str] = []
    value_of = ""  # the option whose value is the next word
    for i, word in enumerate(words):
        if value_of:
            own.append(word)
            if value_of == "-c":
                return settings, own, words[i + 1 :]
            value_of = ""
        elif word.startswith(SETTING):
            settings.append(word)
        elif word == "--":
            return settings, own, words[i + 1 :]
        elif not word.startswith("-"):
            return settings, own, words[i:]
        else:
            own.append(word)
            if word in OPTION_VALUES:
                value_of = word
            elif word.startswith("-c") and not word.startswith("--"):  # -cCODE
                return settings, own, words[i + 1 :]
    return settings, own, []


COMMANDS = frozenset({
    "install", "uninstall", "fetch", "run", "compare", "mirror", "doctor", "mcp", "launch-eg", "eg-ssh",
    "eg-hosts", "seccomp-profile", "approvals", "--version", "-h", "--help",
})  # fmt: skip


def _default_audit_log() -> Path:
    from sandbox_kernel.skills.audit import default_path

    return default_path()


def _parser() -> argparse.ArgumentParser:
    """The command line of every command but the kernel launch (a flat list of argparse calls: long, not deep)."""
    parser = argparse.ArgumentParser(
        prog="sandbox-kernel", description="A Jupyter kernel running Python in a Deno + Pyodide sandbox."
    )
    parser.add_argument("--version", action="version", version=f"sandbox-kernel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="register the pyodide-sandbox kernelspec and fetch Pyodide")
    where = inst.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument("--sys-prefix", action="store_true", help="install into sys.prefix (e.g. a venv)")
    where.add_argument("--prefix", help="install into this prefix")
    inst.add_argument("--no-fetch", action="store_true", help="do not prefetch Pyodide and the guest wheels")
    inst.add_argument(
        "--page-policy",
        action="store_true",
        help="also install a Content-Security-Policy for the Jupyter server's pages (a second wall behind the "
        "kernel's output cleaning): it applies to EVERY notebook that server opens, ipykernel's too, and stops "
        "outputs that run scripts or load from other hosts (Plotly, Bokeh, IPython.display.Javascript, ...)",
    )
    inst.set_defaults(func=_install)
    uninst = sub.add_parser(
        "uninstall",
        help="remove the pyodide-sandbox kernelspec and the page policy; with flags also the cache, the checkpoint "
        "key, the audit log",
    )
    where = uninst.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="only the kernelspec installed with --user")
    where.add_argument("--sys-prefix", action="store_true", help="only the kernelspec in sys.prefix (e.g. a venv)")
    where.add_argument("--prefix", help="only the kernelspec in this prefix (default: wherever Jupyter finds it)")
    uninst.add_argument("--cache", action="store_true", help="also remove the cache (Pyodide, wheels, snapshots)")
    uninst.add_argument(
        "--key", action="store_true", help="also remove the checkpoint key (saved checkpoints become unusable)"
    )
    uninst.add_argument(
        "--audit-log",
        nargs="?",
        const=str(_default_audit_log()),
        metavar="PATH",
        help=f"also remove the audit log and its rotated files (default {_default_audit_log()}; give PATH for "
        "another SandboxKernel.audit_log)",
    )
    uninst.add_argument("--all", action="store_true", help="--cache, --key and --audit-log (the default log)")
    uninst.set_defaults(func=_uninstall)
    fetch = sub.add_parser("fetch", help="download and cache Pyodide, the guest wheels and the start-up snapshot now")
    fetch.add_argument(
        "--to",
        metavar="DIR",
        help="fill DIR as a complete cache instead of the user's (e.g. to bake into a container image), with what "
        "the kernel's settings need (packages, wheelhouse, pyodide_index: from sandbox_kernel_config.py, or given "
        "here as --SandboxKernel.name=value); kernels use it with SANDBOX_KERNEL_CACHE=DIR, and may only read it",
    )
    fetch.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="NAME",
        help="with --to: also the Pyodide packages (and their dependencies) that `import NAME` loads, from "
        "pyodide_index (e.g. --import numpy --import pandas); a kernel reading DIR then imports them offline",
    )
    fetch.set_defaults(func=_fetch)
    run = sub.add_parser(
        "run",
        help="run a script (or -c code) in a fresh sandbox and exit, as python would",
        epilog="Kernel settings may come among the options, before the script or -c, as --SandboxKernel.name=value "
        "(e.g. --SandboxKernel.memory_limit_mb=512), over those of sandbox_kernel_config.py. Exit status: 0, 1 for "
        "an uncaught error, sys.exit's status, 124 after --timeout, 130 for an interrupt, 2 when it cannot start.",
    )
    run.add_argument("script", nargs="?", help="a Python file to run in the sandbox")
    run.add_argument("arguments", nargs=argparse.REMAINDER, help="the script's arguments (its sys.argv[1:])")
    run.add_argument("-c", dest="code", help="code to run instead of a file")
    run.add_argument("--timeout", type=float, help="seconds before the code is stopped (cell_timeout; status 124)")
    run.add_argument("--mount", action="append", help="host_folder:/guest/path[:ro|rw] (repeatable)")
    run.add_argument("--allow-net", action="append", help="host or host:port the code may reach (repeatable)")
    run.add_argument(
        "--working-folder",
        choices=["ro", "rw"],
        help="mount the current folder at /work (read-only or read-write) and run there (working_folder)",
    )
    run.set_defaults(func=_run)
    cmp = sub.add_parser(
        "compare",
        help="run notebooks in the sandbox and again under plain ipykernel with NO sandbox (trusted notebooks "
        "only); show the cells whose outputs differ",
        description=f"Runs each notebook in the sandbox; then {COMPARE_UNSANDBOXED} (its code can read and change "
        f"your files, use the network and run programs): {COMPARE_TRUSTED_ONLY}. Lists the code cells whose outputs "
        "differ.",
    )
    cmp.add_argument("notebooks", nargs="+", help=".ipynb files (each runs in a temporary copy of its folder)")
    cmp.add_argument("--working-folder", choices=["ro", "rw"], help="as for run: the notebook's folder at /work")
    cmp.add_argument("--setting", action="append", help="a kernel setting for this run, e.g. cell_timeout=30")
    cmp.add_argument("--output", help="also write the report (markdown) to this file")
    cmp.set_defaults(func=_compare)
    mirror = sub.add_parser("mirror", help="build a local Pyodide index folder (pyodide_index) for offline machines")
    mirror.add_argument("folder", help="the folder to fill (created; what is already there is kept)")
    mirror.add_argument("names", nargs="*", help="packages, with their dependencies (default: all the index has)")
    mirror.add_argument("--index", help="the Pyodide index to copy from (default: Pyodide's CDN); PyPI fills gaps")
    mirror.set_defaults(func=_mirror)
    mcp = sub.add_parser(
        "mcp",
        help="serve one persistent sandbox as MCP tools (stdio; --http for streamable HTTP on 127.0.0.1)",
        epilog="Kernel settings follow as --SandboxKernel.name=value (e.g. --SandboxKernel.cell_timeout=30), "
        "over those of sandbox_kernel_config.py (not with --gateway-url).",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at http://127.0.0.1:PORT/mcp")
    mcp.add_argument("--port", type=int, default=8000, help="the --http port (default 8000; 0: any free port)")
    mcp.add_argument(
        "--token-file",
        metavar="PATH",
        help="the bearer token --http requires, from a file only you may read (chmod 600); without it, "
        "SANDBOX_KERNEL_MCP_TOKEN, else a random token printed at start",
    )
    mcp.add_argument(
        "--gateway-url",
        metavar="URL",
        help="run the sandbox on a Jupyter Kernel Gateway or Enterprise Gateway at URL (its kernels take their "
        "settings from the gateway machine)",
    )
    mcp.add_argument(
        "--gateway-token-env",
        metavar="NAME",
        help="the environment variable holding the gateway's token (default SANDBOX_KERNEL_GATEWAY_TOKEN); "
        "never give the token itself on the command line",
    )
    mcp.add_argument(
        "--kernel-name",
        metavar="NAME",
        help="the gateway's kernelspec to start (default pyodide-sandbox; Enterprise Gateway's are named by its "
        "operator, e.g. pyodide-sandbox_kubernetes)",
    )
    mcp.add_argument(
        "--gateway-env",
        metavar="NAME=VALUE",
        action="append",
        help="a variable for the gateway's start request (repeatable), e.g. KERNEL_USERNAME=alice for Enterprise "
        "Gateway",
    )
    mcp.set_defaults(func=_mcp)
    doctor = sub.add_parser("doctor", help="check Deno, the cache, the kernelspec and the OS layers in force")
    doctor.set_defaults(func=_doctor)
    # Listed here for --help; its words are parsed by its own parser (main() hands them over before this one runs).
    sub.add_parser(
        "launch-eg",
        help="the kernel launcher for Jupyter Enterprise Gateway (run by EG from a kernelspec; see its --help)",
        add_help=False,
    )
    gate = sub.add_parser(
        "eg-ssh",
        help="the forced command of EG's SSH key on a kernel host: runs only EG's launch of launch-eg and its signals",
        description="Reads SSH_ORIGINAL_COMMAND (set by sshd) and carries it out without a shell if it is EG's "
        "launch of this host's launcher or a signal to one of its launchers; refuses anything else. In "
        'authorized_keys: command="/full/path/sandbox-kernel eg-ssh",restrict ssh-ed25519 ... (docs/enterprise-gateway.md).',
    )
    gate.add_argument(
        "--log-folder",
        type=Path,
        help="where each launcher's output goes, as kernel-<kernel id>.log (default: "
        "$XDG_STATE_HOME/sandbox-kernel/eg-kernel-logs, else ~/.local/state/...; made 0700)",
    )
    gate.set_defaults(func=_eg_ssh)
    hosts = sub.add_parser(
        "eg-hosts",
        help="check, over SSH as Enterprise Gateway connects, which hosts can run this kernel, and why not",
        description="For each HOST: whether EG's key reaches it, whether its forced command is sandbox-kernel eg-ssh "
        "(a plain shell would run a client's KERNEL_* values), and that host's `sandbox-kernel doctor`. Run it on "
        "EG's host as EG's user. Exit status 1 if any host is not ready.",
    )
    hosts.add_argument("hosts", nargs="+", metavar="HOST", help="a host of the kernelspec's remote_hosts")
    hosts.add_argument("--user", help="the user EG logs in as (EG_REMOTE_USER; default: ssh's)")
    hosts.add_argument("--identity", help="EG's private key file, if not one ssh finds itself")
    hosts.add_argument("--known-hosts", help="the known_hosts file with the hosts' keys, if not ssh's own")
    hosts.set_defaults(func=_eg_hosts)
    profile = sub.add_parser(
        "seccomp-profile",
        help="a container seccomp profile under which the OS layers work: BASE plus the calls they need",
        description="Prints BASE (a Docker/OCI seccomp profile, e.g. your runtime's default) with one rule that "
        "allows the calls the launcher makes (unshare, mount, umount2, pivot_root, the Landlock calls, prctl, "
        "seccomp); without CAP_SYS_ADMIN they act only inside user namespaces a process makes itself.",
    )
    profile.add_argument("base", help="the seccomp profile (JSON) to start from")
    profile.add_argument("-o", "--output", help="write the profile to this file instead of standard output")
    profile.set_defaults(func=_seccomp_profile)
    grants = sub.add_parser(
        "approvals",
        help="list or revoke the lasting approvals ([d]ay, [a]lways) given at skill prompts",
        description="Each lasting approval is bound to one Skill.method and the SHA-256 of the skill's code; a "
        "revoked one stops at the next call, which asks again.",
    )
    grants.add_argument("action", choices=("list", "revoke"))
    grants.add_argument("grant_id", nargs="?", metavar="ID", help="revoke: the approval's id, as `list` shows it")
    grants.add_argument("--all", action="store_true", help="revoke: every lasting approval in the folder")
    grants.add_argument("--folder", type=Path, help="SandboxKernel.approvals_folder, if set (default: the kernel's "
                        "folder in the Jupyter data dir)")  # fmt: skip
    grants.set_defaults(func=_approvals)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        # Kernel launch: `sandbox-kernel -f {connection_file} [--SandboxKernel.x=...]`.
        if argv and argv[0] == "kernel":
            argv = argv[1:]
        import signal

        from sandbox_kernel.jupyter import early_start
        from sandbox_kernel.malloc_arena import one_malloc_arena
        from sandbox_kernel.provisioner import handover

        one_malloc_arena()  # before the early start's thread and the kernel's (each would make an arena of its own)

        # As ipykernel's app does once it is up (init_signal): jupyter_client interrupts a kernel it shuts down, and a
        # SIGINT while the kernel still imports would end it with a KeyboardInterrupt traceback on its stderr (a
        # pool closed while it starts a sandbox does that). The kernel handles interrupts itself once it runs.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        early_start.begin(argv)  # the first sandbox starts while the kernel imports ipykernel
        from sandbox_kernel.jupyter.app import launch

        if handover.is_waiting(argv):  # a pooled kernel: spawned and imported, it waits to be given a launch
            argv = handover.receive(argv)
        launch(argv)
        return
    if argv[0] == "launch-eg":  # EG's launcher options and kernel settings: its own parser checks them
        from sandbox_kernel.enterprise_gateway.launcher import main as launch_eg

        sys.exit(launch_eg(argv[1:]))
    parser = _parser()
    settings, own, rest = split_command_line(argv[1:]) if argv[0] in ("run", "mcp", "fetch") else ([], argv[1:], [])
    if argv[0] == "run":  # the script, or -c's arguments, and what follows: the code's, untouched by argparse
        args = parser.parse_args([argv[0], *own])
        args.script, args.arguments = (None, rest) if args.code is not None else (rest[0] if rest else None, rest[1:])
    else:
        args = parser.parse_args([argv[0], *own, *rest])
    args.settings = settings
    sys.exit(args.func(args))
