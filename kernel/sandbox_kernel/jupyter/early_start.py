"""The kernel's first sandbox, spawned before the kernel process imports ipykernel, so that the two start together.

A kernel process spends ~0.25 s importing ipykernel and its own modules and setting up ZeroMQ before its event loop
runs, and a sandbox takes ~0.35 s to start. `begin()`, which the `sandbox-kernel` command calls before it imports
the kernel, reads the kernel's settings as the kernel will (the `--SandboxKernel.*` options of its command line and
the `sandbox_kernel_config` files), and when they are valid and everything a sandbox needs is already on this machine
(nothing to download, no index to ask), spawns the sandbox at once. The kernel's launcher takes it for its first
sandbox only if the options it arrives at itself, from its own settings, are exactly the same; otherwise (or when the
kernel finds its settings wrong) it is killed, having run no guest code. The config files are read twice, here and
by the kernel's app (as `--SandboxKernel.*` words are parsed twice). `SandboxKernel.early_start = False` turns this
off.
"""

from __future__ import annotations

import atexit
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_kernel.jupyter.settings_check import CONFIG_FILE, SECTION
from sandbox_kernel.sandbox.spawn import Spawned

if TYPE_CHECKING:
    from traitlets.config import Config

    from sandbox_kernel.jupyter.settings import SandboxSettings

_spawned: list[Spawned] = []  # at most one: spawned, not yet taken


def begin(argv: list[str]) -> None:
    """Spawn the kernel's first sandbox now, if its settings allow it; never fails (the kernel starts one later)."""
    try:
        spawned = _spawn(argv)
    except Exception:  # a problem the kernel will report in its own words: it starts its sandbox as before
        return
    if spawned is not None:
        _spawned.append(spawned)
        atexit.register(discard)


def take() -> Spawned | None:
    """The early sandbox, once (the kernel's launcher checks that its options are the kernel's)."""
    return _spawned.pop() if _spawned else None


def discard() -> None:
    """Kill the early sandbox if nobody took it."""
    while _spawned:
        _spawned.pop().discard()


def _spawn(argv: list[str]) -> Spawned | None:
    from sandbox_kernel.jupyter import settings, settings_check
    from sandbox_kernel.sandbox.launcher import SandboxLauncher
    from sandbox_kernel.sandbox.spawn import spawn

    config, files = read_config(argv)
    kernel_settings = settings_class()
    messages, _ = settings_check.problems(config, kernel_settings, lambda name: "")
    if messages:
        return None
    values = kernel_settings(config=config)
    if not values.early_start:
        return None
    resolved = settings.resolve(values, Path.cwd(), files, with_skills=False)
    if resolved.problems:
        return None
    quiet = logging.getLogger("sandbox_kernel.early_start")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    launching = settings.launch_settings(values, resolved, lambda: "")
    launcher = SandboxLauncher(launching, _no_configure, quiet, lambda message: None)
    options = launcher.cached_options()
    return spawn(options) if options is not None else None


async def _no_configure(sandbox: object) -> None:
    raise AssertionError("the early start launches nothing")  # pragma: no cover


@functools.cache
def settings_class() -> type[SandboxSettings]:
    """The kernel's settings under the kernel's config section name, `SandboxKernel`, without ipykernel's Kernel."""
    from sandbox_kernel.jupyter.settings import SandboxSettings

    return type(SECTION, (SandboxSettings,), {"__module__": SandboxSettings.__module__})


def read_config(argv: list[str]) -> tuple[Config, list[str]]:
    """The `SandboxKernel` settings of the kernel's command line and config files (the app's own sources, in its
    order: files from the system's to the user's, then the command line), and the files read."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Application, Config
    from traitlets.config.loader import KVArgParseConfigLoader

    config = Config()
    files: list[str] = []
    for path in reversed(jupyter_config_path()):
        for found, name in Application._load_config_files(CONFIG_FILE, path=path, raise_config_file_errors=True):
            config.merge(found)
            if name not in files:
                files.append(name)
    # Parsed with the settings' types, as the kernel's app parses them (a list value is a list).
    config.merge(KVArgParseConfigLoader(setting_words(argv), classes=[settings_class()]).load_config())
    return config, files


def setting_words(argv: list[str]) -> list[str]:
    """The `--SandboxKernel.name=value` (or `--SandboxKernel.name value`) words of a command line."""
    words = []
    for i, word in enumerate(argv):
        if word.startswith(f"--{SECTION}."):
            words.append(word)
            if "=" not in word and i + 1 < len(argv):
                words.append(argv[i + 1])
    return words
