"""The table of settings in docs/configuration.md, made from the settings' traits so that it cannot drift.

Each configurable trait of `SandboxSettings` (jupyter/settings.py; `SandboxKernel` inherits them, config section
`SandboxKernel`) becomes a row: its name, its type, its default and its `help`. The page's prose is written by
hand; only the part between BEGIN and END is made here.

    python -m sandbox_kernel.jupyter.config_doc          # rewrite docs/configuration.md's table
    python -m sandbox_kernel.jupyter.config_doc --check  # exit 1 if it differs from the traits

tests/unit/test_docs.py runs the check. This lives in the package, next to the traits it reads, so that it is
importable by the tests, type-checked with the kernel and moves with the settings; importing it costs nothing
(the settings are imported when a table is made).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitType, Unicode

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "configuration.md"
COMMAND = "python -m sandbox_kernel.jupyter.config_doc"
BEGIN = (
    "<!-- The table below is generated from the traits of SandboxSettings (kernel/sandbox_kernel/jupyter/settings.py)"
    f" by `{COMMAND}`: edit their help there. -->"
)
END = "<!-- End of the generated table. -->"
MIB = 1 << 20


@dataclass(frozen=True)
class Setting:
    """One configurable trait, as the table shows it."""

    name: str
    type: str
    default: str
    help: str


def kernel_settings() -> list[Setting]:
    """Every setting of the kernel (the configurable traits of SandboxSettings), by name."""
    from sandbox_kernel.jupyter.settings import SandboxSettings

    defaults = SandboxSettings()  # no config: every trait at its default, computed ones included
    traits = SandboxSettings.class_traits(config=True)
    return [
        Setting(name, type_text(trait), default_text(name, trait, getattr(defaults, name)), trait.help)
        for name, trait in sorted(traits.items())
    ]


def type_text(trait: TraitType[Any, Any]) -> str:
    """What a value must be, in words (`or None` when None is allowed)."""
    text = _type_word(trait)
    return f"{text} or `None`" if trait.allow_none else text


def _type_word(trait: TraitType[Any, Any]) -> str:
    if isinstance(trait, Enum):
        return "one of " + ", ".join(f"`{value!r}`" for value in trait.values or ())
    if isinstance(trait, List):
        item = getattr(trait, "_trait", None)
        if isinstance(item, Enum):
            return "list, each " + _type_word(item)
        return f"list of {_type_word(item)}" if item is not None else "list"
    if isinstance(trait, Dict):
        value = getattr(trait, "_value_trait", None)
        return f"dict with {_type_word(value)} values" if value is not None else "dict"
    names = {Bool: "bool", Int: "int", Float: "float", Unicode: "str"}
    return next((word for kind, word in names.items() if isinstance(trait, kind)), type(trait).__name__)


def default_text(name: str, trait: TraitType[Any, Any], value: Any) -> str:
    """The default as a Python literal; byte sizes also in MiB; this machine's folders as placeholders."""
    if isinstance(value, str):
        value = _placeholders(value)
    text = f"`{value!r}`"
    if isinstance(trait, Int) and name.endswith("_bytes") and value and value % MIB == 0:
        text += f" ({value // MIB} MiB)"
    return text


def _placeholders(value: str) -> str:
    """A computed default with this machine's Jupyter data folder written as `<jupyter data dir>`."""
    from jupyter_core.paths import jupyter_data_dir

    return value.replace(jupyter_data_dir(), "<jupyter data dir>")


def _cell(text: str) -> str:
    """Text for a Markdown table cell: pipes escaped everywhere; outside code spans also backslashes, "*" and "<"."""
    pieces = text.split("`")
    for i in range(0, len(pieces), 2):  # the even pieces are outside code spans
        pieces[i] = pieces[i].replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
    return "`".join(pieces).replace("|", "\\|")


def table(settings: list[Setting]) -> str:
    """The Markdown table of `settings`."""
    rows = ["| Setting | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    rows += [f"| `{s.name}` | {_cell(s.type)} | {_cell(s.default)} | {_cell(s.help)} |" for s in settings]
    return "\n".join(rows)


def render(page: str, settings: list[Setting] | None = None) -> str:
    """`page` with the part between BEGIN and END made anew from `settings` (the kernel's, by default)."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has lost its markers; put these two lines where the table goes:\n{BEGIN}\n{END}")
    made = table(kernel_settings() if settings is None else settings)
    return f"{page[: start + len(BEGIN)]}\n\n{made}\n\n{page[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the page is out of date")
    parser.add_argument("--page", type=Path, default=PAGE, help=f"the page (default: {PAGE})")
    args = parser.parse_args(argv)
    current = args.page.read_text(encoding="utf-8")
    try:
        made = render(current)
    except ValueError as exc:
        print(f"{args.page}: {exc}", file=sys.stderr)
        return 2
    if made == current:
        return 0
    if args.check:
        print(f"{args.page} is out of date with SandboxKernel's traits: run `{COMMAND}`", file=sys.stderr)
        return 1
    args.page.write_text(made, encoding="utf-8")
    print(f"rewrote the table of settings in {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
