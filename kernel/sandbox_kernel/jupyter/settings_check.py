"""Find what is wrong with the `SandboxKernel.*` settings before the kernel is made, and where each was set.

A kernel with bad settings still starts (JupyterLab shows nothing from a kernel that exits): it runs no
sandbox and answers every cell with the messages made here.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from traitlets import TraitType
from traitlets.config import Config, Configurable

SECTION = "SandboxKernel"  # the settings' section in config files and on the command line
CONFIG_FILE = "sandbox_kernel_config"  # the kernel's own config files (.py or .json), in Jupyter's config folders


def setting_traits(kernel_class: type[Configurable]) -> dict[str, TraitType[Any, Any]]:
    """Every setting of the kernel, by name: the configurable traits its own classes declare (SandboxSettings'),
    not those of ipykernel's Kernel. The agent API's keywords come from here."""
    traits = kernel_class.class_traits(config=True)
    return {name: traits[name] for name in sorted(own_settings(kernel_class))}


def unknown_settings(config: Config, kernel_class: type[Configurable]) -> list[str]:
    """Names of `SandboxKernel.*` settings that the kernel does not have."""
    known = set(kernel_class.class_trait_names(config=True))
    return sorted(key for key in config.get(SECTION, {}) if key not in known)


def own_settings(kernel_class: type[Configurable]) -> set[str]:
    """The settings the kernel declares itself (not those of ipykernel's Kernel it inherits)."""
    return {
        name
        for cls in kernel_class.__mro__
        if cls.__module__.startswith("sandbox_kernel.") and issubclass(cls, Configurable)
        for name in cls.class_own_traits(config=True)
    }


def describe_unknown(name: str, kernel_class: type[Configurable]) -> str:
    own = sorted(own_settings(kernel_class))
    close = difflib.get_close_matches(name, own, n=1)
    hint = f"did you mean {SECTION}.{close[0]}? " if close else ""
    return f"{SECTION}.{name} is not a setting of this kernel: {hint}its settings are {', '.join(own)}"


def value_problem(kernel_class: type[Configurable], name: str, value: Any) -> str | None:
    """Why `value` is not allowed for setting `name` (None if it is), as the kernel's own validators say.

    The value goes through traitlets' config loading on a bare instance of the kernel class (no
    sockets, no sandbox), so string parsing, types, enums and `@validate` methods all apply.
    """
    probe = kernel_class.__new__(kernel_class)
    try:
        Configurable.__init__(probe, config=Config({SECTION: {name: value}}))
    except Exception as exc:  # TraitError, or the ValueError of a value that does not parse
        return str(exc)
    return None


def problems(
    config: Config, kernel_class: type[Configurable], origin: Callable[[str], str]
) -> tuple[list[str], list[str]]:
    """(messages, the names of the settings to drop); `origin(name)` says where a setting was made ("set in
    PATH")."""
    section = config.get(SECTION, {})
    messages, bad = [], []
    for name in unknown_settings(config, kernel_class):
        messages.append(f"{describe_unknown(name, kernel_class)} ({origin(name)})")
        bad.append(name)
    for name in sorted(set(section) - set(bad)):
        why = value_problem(kernel_class, name, section[name])
        if why:
            messages.append(f"{SECTION}.{name}: {why} ({origin(name)})")
            bad.append(name)
    return messages, bad
