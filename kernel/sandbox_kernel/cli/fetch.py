"""`sandbox-kernel fetch [--to DIR [--import NAME ...]]`: what a kernel start needs, in the user's cache or in DIR; DIR
also gets what the kernel's settings add (`packages`, the folders of `wheelhouse` and `pyodide_index`), resolved as a
kernel start does, and the Pyodide packages `import NAME` loads; it is left readable by all and writable by its owner
only: a cache that kernels only read (an image bakes it)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from traitlets import TraitError
from traitlets.config import Config

from sandbox_kernel.jupyter.settings import SandboxSettings

if TYPE_CHECKING:
    from sandbox_kernel.packages.index import PyodideIndex

NAME = "sandbox-kernel fetch"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def configured(settings: list[str]) -> SandboxSettings:
    """The kernel's settings as a kernel started now would have them: sandbox_kernel_config.py/.json in Jupyter's
    configuration folders, under `settings` (`--SandboxKernel.name=value` words)."""
    from sandbox_kernel.jupyter.app import SandboxKernelApp

    app = SandboxKernelApp()  # type: ignore[no-untyped-call]  # ipykernel's base class is untyped
    app.parse_command_line(settings)
    app.load_config_file()
    return SandboxSettings(config=Config({"SandboxSettings": app.config.get("SandboxKernel", {})}))


async def _bake(kernel: SandboxSettings, imports: list[str]) -> list[str]:
    """Provision what a sandbox of a kernel with these settings needs, as its launcher does before a start, and the
    Pyodide packages of `imports`; what was added, in words."""
    from sandbox_kernel.sandbox.launcher import LaunchSettings, SandboxLauncher
    from sandbox_kernel.sandbox.startup import SandboxOptions
    from sandbox_kernel.sandbox.tls_trust import resolve

    ca_pem = resolve(kernel.ca_bundle, os.environ)[0].pem if kernel.ca_bundle else None
    settings = LaunchSettings(
        SandboxOptions(Path(), Path(), ca_pem=ca_pem), kernel.pyodide_index, list(kernel.packages), kernel.wheelhouse
    )

    async def no_sandbox(_: object) -> None:  # what a started sandbox is told first: none is started here
        return None

    launcher = SandboxLauncher(settings, no_sandbox, logging.getLogger(NAME), say)
    options = await launcher.provision()
    added = [f"the folder of SandboxKernel.pyodide_index {kernel.pyodide_index}"]
    if imports:
        index = launcher.pyodide_index
        assert index is not None  # provision() reads it
        names = index_packages(index, imports)
        await asyncio.to_thread(index.fetch, names)
        added.append(f"the Pyodide packages of --import {' '.join(imports)}: {', '.join(index.closure(names))}")
    if kernel.packages:
        added.append(f"SandboxKernel.packages {list(kernel.packages)}, unpacked in {options.packages_site}")
    if kernel.wheelhouse:
        added.append("the folder %pip install copies SandboxKernel.wheelhouse's wheels into")
    return added


def index_packages(index: PyodideIndex, imports: list[str]) -> list[str]:
    """The packages of `index` that provide `imports` (import names, or the packages' own names); PackageError
    naming those it has not."""
    from sandbox_kernel.packages.checks import PackageError

    found = {name: index.by_import.get(name) or index.canonical(name) for name in imports}
    unknown = [name for name, package in found.items() if package not in index.packages]
    if unknown:
        raise PackageError(
            f"--import {' '.join(unknown)}: no package of the Pyodide index {index.source} provides "
            f"{'it' if len(unknown) == 1 else 'them'} (SandboxKernel.pyodide_index; its {len(index.packages)} "
            "packages are listed in its pyodide-lock.json)"
        )
    return sorted(set(found.values()))


def fetch(to: str | None, settings: list[str], imports: list[str] | None = None) -> int:
    """Fetch; the exit status (1: a download or the settings' packages failed, 2: the settings are not valid)."""
    if to:  # every part below finds the cache through SANDBOX_KERNEL_CACHE (paths.cache_dir)
        os.environ["SANDBOX_KERNEL_CACHE"] = str(Path(to).resolve())
    elif settings or imports:
        say(
            f"{NAME}: kernel settings and --import apply with --to only (the user's cache gets them at a kernel's "
            "first start, or first import)"
        )
        return 2
    from sandbox_kernel.packages.checks import PackageError
    from sandbox_kernel.sandbox.provision import (
        ProvisionError,
        build_snapshot,
        ensure_all,
        guest_wheels,
        share_read_only,
        snapshot_if_ready,
    )

    try:
        kernel = configured(settings) if to else None
    except (TraitError, ValueError) as exc:
        say(f"{NAME}: a kernel setting is not valid: {exc}")
        return 2
    try:
        pyodide, _ = asyncio.run(ensure_all(say, thorough=True))
        snapshot = snapshot_if_ready() or asyncio.run(build_snapshot(say))
        added = asyncio.run(_bake(kernel, imports or [])) if kernel is not None else []
    except (ProvisionError, PackageError) as exc:
        say(f"sandbox-kernel: {exc}")
        return 1
    print(f"Pyodide cached in {pyodide}; {len(guest_wheels())} guest wheels cached; start-up snapshot {snapshot}.")
    if to:
        cache = os.environ["SANDBOX_KERNEL_CACHE"]
        share_read_only(Path(cache))
        print(f"For the kernel's settings: {'; '.join(added)}.")
        print(f"A complete cache: use it with SANDBOX_KERNEL_CACHE={cache}")
    return 0
