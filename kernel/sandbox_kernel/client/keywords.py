"""The kernel's settings as keyword arguments of the agent API (`Sandbox(pyodide_index=..., packages=[...])`).

The keywords are the kernel class's settings (settings_check.setting_traits of SandboxKernel), found when first
needed, so a new trait is a keyword by itself. Each value is checked by its trait before any kernel starts, and
goes to the kernel on its command line in a form traitlets reads back to the same value (checked here too). The
types for type checkers are in kernel_settings.py, made from the same traits (keywords_doc.py).
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterable
from functools import cache
from typing import Any

from traitlets import TraitError, TraitType, Unicode
from traitlets.config import Config, Configurable
from traitlets.config.loader import KVArgParseConfigLoader

from sandbox_kernel.jupyter import setting_sources

SECTION = "SandboxKernel"
WHERE_LISTED = "docs/agents.md, 'Settings as keywords', or sandbox_kernel.client.keywords.setting_traits()"


class SandboxSettingsError(ValueError):
    """The kernel was given settings it cannot use; the message lists each problem and where it was set."""

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems  # one line each


@cache
def kernel_class() -> type[Configurable]:
    """SandboxKernel (imported on first use: `import sandbox_kernel` stays light)."""
    from sandbox_kernel.jupyter.kernel import SandboxKernel

    return SandboxKernel


def setting_traits() -> dict[str, TraitType[Any, Any]]:
    """Every kernel setting the agent API takes as a keyword, by name, with its trait."""
    from sandbox_kernel.jupyter.settings_check import setting_traits as traits_of

    return traits_of(kernel_class())


def unknown_keyword(caller: str, name: str, others: Iterable[str]) -> TypeError:
    """The error for a keyword that is neither a kernel setting nor one of the API's own (`others`)."""
    close = difflib.get_close_matches(name, [*setting_traits(), *others], n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return TypeError(
        f"{caller}() got an unexpected keyword argument {name!r}: {hint}it takes every kernel setting as a "
        f"keyword: see {WHERE_LISTED}"
    )


def command_line(caller: str, settings: dict[str, Any]) -> list[str]:
    """`--SandboxKernel.name=value` arguments for `settings`; SandboxSettingsError naming every bad one."""
    traits = setting_traits()
    arguments, problems = [], []
    for name, given in settings.items():
        trait = traits[name]
        try:
            value = checked(name, trait, given)
            arguments.append(argument(name, value))
        except (TraitError, ValueError) as exc:
            problems.append(f"{name}={given!r}: {exc} (allowed: {allowed(trait)})")
    if problems:
        listed = "\n".join(f"- {problem}" for problem in problems)
        raise SandboxSettingsError(f"{caller}() was given settings the kernel cannot use; nothing started:\n{listed}",
                                   problems)  # fmt: skip
    return arguments


def sources_argument(caller: str, settings: dict[str, Any]) -> str:
    """The argument telling the kernel that `settings` were given as keywords of `caller` (and that `caller`
    reports what is wrong with them: setting_sources.py)."""
    given = {name: f"the keyword {name}= of {caller}()" for name in settings}
    return setting_sources.argument(setting_sources.Sources(given, reported=True))


def checked(name: str, trait: TraitType[Any, Any], value: Any) -> Any:
    """`value` as the kernel's trait takes it (a path object for a str setting becomes its str); TraitError or
    ValueError saying why not."""
    if isinstance(trait, Unicode) and isinstance(value, os.PathLike):
        value = os.fspath(value)
    probe = kernel_class().__new__(kernel_class())  # a bare instance: traits and validators, no sockets
    Configurable.__init__(probe, config=Config({SECTION: {name: value}}))
    return getattr(probe, name)


def argument(name: str, value: Any) -> str:
    """The command-line argument that the kernel reads back as exactly `value` (already checked by its trait):
    a string as it is or quoted (traitlets strips one pair of quotes and expands a leading '~'), anything else
    as its Python literal (containers included)."""
    texts = [value, f"'{value}'"] if isinstance(value, str) else [repr(value)]
    for text in texts:
        candidate = f"--{SECTION}.{name}={text}"
        if "\0" not in candidate and repr(read_back(name, candidate)) == repr(value):
            return candidate
    raise ValueError("this value cannot be passed to the kernel's command line unchanged")


def read_back(name: str, arg: str) -> Any:
    """What the kernel makes of `arg`: parsed as its application parses it, then set on its trait."""
    try:
        with warnings.catch_warnings():  # traitlets' DeprecationWarning for container literals: they are exact
            warnings.simplefilter("ignore", DeprecationWarning)
            config = KVArgParseConfigLoader([arg], classes=[kernel_class()]).load_config()
        return checked(name, setting_traits()[name], config[SECTION][name])
    except (TraitError, ValueError, SyntaxError, KeyError):
        return ValueError  # never equal to a checked value


def allowed(trait: TraitType[Any, Any]) -> str:
    """What a setting takes, in the words of docs/configuration.md."""
    from sandbox_kernel.jupyter.config_doc import type_text

    text = type_text(trait).replace("`", "")
    return f"{text}, or a path" if isinstance(trait, Unicode) else text
