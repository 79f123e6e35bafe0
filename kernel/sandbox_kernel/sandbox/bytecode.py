"""Bytecode for SandboxKernel.packages: their unpacked folder compiled once with the guest's own Python, a Deno run of
host_ts/compile_site.ts that may write only that folder (sandboxes mount it read-only, where Python cannot keep the
bytecode it compiles: without this, every sandbox would compile every module it imports again)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision

COMPILE_TIMEOUT = 600.0  # seconds for one folder (sympy's ~1,400 modules: ~25 s on a loaded 2-core machine)


class CompileError(RuntimeError):
    """The folder could not be compiled; the message says why (its modules still import, compiled as they load)."""


def compile_argv(folder: Path) -> list[str]:
    """The Deno command line: reads the host code, Pyodide and the folder; writes only the folder."""
    host = paths.host_dir()
    pyodide = paths.pyodide_dir(provision.deno_dir())
    return [
        paths.deno_executable(), "run", "--no-prompt", "--cached-only", f"--config={host / 'deno.json'}",
        f"--allow-read={host},{pyodide},{folder}", f"--allow-write={folder}",
        str(host / "compile_site.ts"), str(folder),
    ]  # fmt: skip


def compile_folder(folder: Path) -> bool:
    """Compile every module of `folder` (the guest's Python, unchecked hash-based .pyc); True when all compiled
    (a module Python cannot compile, e.g. Python 2 code, is left as it is). Blocking: run it in a thread."""
    env = {"DENO_DIR": str(provision.deno_dir()), "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"}
    try:
        done = subprocess.run(
            compile_argv(folder), env=env, cwd=folder, stdin=subprocess.DEVNULL, capture_output=True,
            timeout=COMPILE_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CompileError(f"compiling took more than {COMPILE_TIMEOUT:.0f} s") from None
    except OSError as exc:
        raise CompileError(f"Deno could not be started: {exc}") from None
    if done.returncode == 0:
        try:
            return bool(json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])["compiled"])
        except (IndexError, ValueError, KeyError, TypeError):
            pass
    tail = (done.stderr or done.stdout).decode(errors="replace").strip()[-500:]
    raise CompileError(f"Deno exited with code {done.returncode}: {tail}")
