"""The `sandbox-kernel` command: install, fetch, run, compare, mirror, doctor, mcp; otherwise the kernel itself."""

from __future__ import annotations

import argparse
import asyncio
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
    if not args.no_fetch:
        return _fetch(args)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from sandbox_kernel.sandbox.provision import (
        ProvisionError,
        build_snapshot,
        ensure_all,
        guest_wheels,
        snapshot_if_ready,
    )

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        pyodide, _ = asyncio.run(ensure_all(say, thorough=True))
        snapshot = snapshot_if_ready() or asyncio.run(build_snapshot(say))
    except ProvisionError as exc:
        print(f"sandbox-kernel: {exc}", file=sys.stderr)
        return 1
    print(f"Pyodide cached in {pyodide}; {len(guest_wheels())} guest wheels cached; start-up snapshot {snapshot}.")
    return 0


def _run(args: argparse.Namespace) -> int:
    """Run a script or `-c` code in a fresh sandbox, as `python` would: its arguments in sys.argv, this
    command's stdin for input()/sys.stdin, output streamed, exit code 0, 1 on an error, or sys.exit's."""
    from sandbox_kernel.client.agent import KernelDied, SandboxOptions, SandboxSettingsError
    from sandbox_kernel.client.sync_sandbox import Sandbox

    if args.code is not None:  # as with python -c, what follows are the code's arguments
        code, argv = args.code, ["-c", *([args.script] if args.script else []), *args.arguments]
    elif args.script is not None:
        try:
            code = Path(args.script).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"sandbox-kernel run: can't open file {args.script!r}: {exc}", file=sys.stderr)
            return 2
        argv = [args.script, *args.arguments]
    else:
        print("sandbox-kernel run: give a script file or -c CODE", file=sys.stderr)
        return 2
    given = {"cell_timeout": args.timeout, "mounts": args.mount, "allow_net": args.allow_net,
             "working_folder": args.working_folder}  # fmt: skip
    options: SandboxOptions = {  # a setting not given keeps what the kernel's configuration says
        **{name: value for name, value in given.items() if value is not None},  # type: ignore[typeddict-item]
        "input": _read_line,
        "extra_arguments": ["--log-level=CRITICAL"],  # the script's output only, not the kernel's notes
        "on_stdout": lambda text: print(text, end="", flush=True),
        "on_stderr": lambda text: print(text, end="", file=sys.stderr, flush=True),
    }
    try:
        with Sandbox(**options) as sandbox:
            sandbox.run(f"import sys as _sys\n_sys.argv = {argv!r}\ndel _sys")
            result = sandbox.run(code)
    except SandboxSettingsError as exc:
        for problem in exc.problems:
            print(f"sandbox-kernel run: bad setting: {problem}", file=sys.stderr)
        return 2
    except KernelDied as exc:
        code = f" (exit code {exc.exit_code})" if exc.exit_code is not None else ""
        print(f"sandbox-kernel run: the kernel process exited{code} before the code finished", file=sys.stderr)
        return 1
    if result.text is not None:
        print(result.text)
    if result.error is None:
        return 0
    if result.error.ename == "SystemExit":
        return _exit_code(result.error.evalue)
    print(result.error.traceback or f"{result.error.ename}: {result.error.evalue}", file=sys.stderr)
    return 130 if result.error.ename == "KeyboardInterrupt" else 1


def _read_line(prompt: str) -> str | None:
    """One line of this command's stdin for the guest (None at its end); the prompt goes where python puts it."""
    if prompt:
        print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    return line.removesuffix("\n") if line else None


def _exit_code(evalue: str) -> int:
    """The status of `sys.exit(evalue)`, as python gives it (a message is printed, and means 1)."""
    if evalue in ("", "None"):
        return 0
    try:
        return int(evalue) & 0xFF
    except ValueError:
        print(evalue, file=sys.stderr)
        return 1


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

    return serve(args.settings, args.port if args.http else None, args.token_file)


def _doctor(args: argparse.Namespace) -> int:
    from sandbox_kernel.cli.doctor import main as doctor

    return doctor()


COMMANDS = frozenset({"install", "fetch", "run", "compare", "mirror", "doctor", "mcp", "--version", "-h", "--help"})


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
    inst.set_defaults(func=_install)
    fetch = sub.add_parser("fetch", help="download and cache Pyodide and the guest wheels now")
    fetch.set_defaults(func=_fetch)
    run = sub.add_parser("run", help="run a script (or -c code) in a fresh sandbox and exit")
    run.add_argument("script", nargs="?", help="a Python file to run in the sandbox")
    run.add_argument("arguments", nargs=argparse.REMAINDER, help="the script's arguments (its sys.argv[1:])")
    run.add_argument("-c", dest="code", help="code to run instead of a file")
    run.add_argument("--timeout", type=float, help="seconds before the code is stopped (cell_timeout)")
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
        "over those of sandbox_kernel_config.py.",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP at http://127.0.0.1:PORT/mcp")
    mcp.add_argument("--port", type=int, default=8000, help="the --http port (default 8000; 0: any free port)")
    mcp.add_argument(
        "--token-file",
        metavar="PATH",
        help="the bearer token --http requires, from a file only you may read (chmod 600); without it, "
        "SANDBOX_KERNEL_MCP_TOKEN, else a random token printed at start",
    )
    mcp.set_defaults(func=_mcp, settings=[])
    doctor = sub.add_parser("doctor", help="check Deno, the cache, the kernelspec and the OS layers in force")
    doctor.set_defaults(func=_doctor)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        # Kernel launch: `sandbox-kernel -f {connection_file} [--SandboxKernel.x=...]`.
        if argv and argv[0] == "kernel":
            argv = argv[1:]
        from sandbox_kernel.jupyter.app import launch

        launch(argv)
        return
    parser = _parser()
    settings = [arg for arg in argv[1:] if arg.startswith("--SandboxKernel.")] if argv[0] == "mcp" else []
    args = parser.parse_args([arg for arg in argv if arg not in settings])
    if settings:
        args.settings = settings
    sys.exit(args.func(args))
