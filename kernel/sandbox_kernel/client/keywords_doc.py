"""The agent API's keywords for readers and type checkers, made from the kernel's traits so that they cannot drift.

Two outputs, both from keywords.setting_traits(): the table between the markers of docs/agents.md ('Settings as
keywords'), and client/kernel_settings.py, the `KernelSettings` TypedDict that types `Sandbox(**settings)`.

    python -m sandbox_kernel.client.keywords_doc          # rewrite both
    python -m sandbox_kernel.client.keywords_doc --check  # exit 1 if either differs from the traits

tests/unit/test_keywords.py runs the check. (The keywords themselves need neither: they come from the traits
at run time.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitType, Unicode

from sandbox_kernel.jupyter import config_doc

COMMAND = "python -m sandbox_kernel.client.keywords_doc"
PAGE = config_doc.REPO / "docs" / "agents.md"
MODULE = Path(__file__).with_name("kernel_settings.py")
BEGIN = f"<!-- The table below is generated from the kernel's traits by `{COMMAND}`. -->"
END = "<!-- End of the generated keywords. -->"


def python_type(trait: TraitType[Any, Any]) -> str:
    """The trait's values as a type annotation (a str setting also takes a path: it becomes its str)."""
    text = _annotation(trait)
    if isinstance(trait, Unicode):
        text = f"{text} | PathLike[str]"
    return f"{text} | None" if trait.allow_none else text


def _annotation(trait: TraitType[Any, Any] | None) -> str:
    if isinstance(trait, Enum):
        return "Literal[" + ", ".join(_literal(value) for value in trait.values or ()) + "]"
    if isinstance(trait, List):
        return f"list[{_annotation(getattr(trait, '_trait', None))}]"
    if isinstance(trait, Dict):
        return f"dict[str, {_annotation(getattr(trait, '_value_trait', None))}]"
    names = {Bool: "bool", Int: "int", Float: "float", Unicode: "str"}
    return next((word for kind, word in names.items() if isinstance(trait, kind)), "Any")


def _literal(value: Any) -> str:
    """A value as ruff formats it in source (strings in double quotes)."""
    return json.dumps(value) if isinstance(value, str) and value.isascii() else repr(value)


def module_text() -> str:
    """The source of kernel_settings.py."""
    fields = []
    for setting, trait in _settings():
        fields.append(f"    {setting.name}: {python_type(trait)}")
        fields.append(f'    """{_docstring(setting.help)}"""')
    body = "\n".join(fields)
    typing = ", ".join(name for name in ("Any", "Literal") if f"{name}[" in body or f"{name}]" in body)
    return "\n".join(
        [
            '"""The kernel\'s settings as the agent API\'s keywords, typed: `Sandbox(**settings: Unpack[KernelSettings])`.',
            "",
            f"Generated from the kernel's traits by `{COMMAND}`: do not edit (tests/unit/test_keywords.py checks it).",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            *(["from os import PathLike"] if "PathLike[" in body else []),
            f"from typing import {typing + ', ' if typing else ''}TypedDict",
            "",
            "",
            "class KernelSettings(TypedDict, total=False):",
            '    """Every kernel setting (docs/configuration.md); one left out keeps what the kernel\'s configuration says."""',
            "",
            body,
            "",
        ]
    )


def _docstring(text: str) -> str:
    """A setting's help as a one-line docstring."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def table() -> str:
    """The Markdown table of keywords for docs/agents.md."""
    rows = ["| Keyword | Type | Default |", "| --- | --- | --- |"]
    rows += [f"| `{s.name}` | {config_doc._cell(s.type)} | {config_doc._cell(s.default)} |" for s, _ in _settings()]
    return "\n".join(rows)


def _settings() -> list[tuple[config_doc.Setting, TraitType[Any, Any]]]:
    from sandbox_kernel.client.keywords import setting_traits

    traits = setting_traits()
    return [(setting, traits[setting.name]) for setting in config_doc.kernel_settings()]


def render(page: str) -> str:
    """`page` with the part between BEGIN and END made anew."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has lost its markers; put these two lines where the table goes:\n{BEGIN}\n{END}")
    return f"{page[: start + len(BEGIN)]}\n\n{table()}\n\n{page[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when either is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, made in ((PAGE, render(PAGE.read_text(encoding="utf-8"))), (MODULE, module_text())):
        if path.exists() and path.read_text(encoding="utf-8") == made:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(made, encoding="utf-8")
            print(f"rewrote {path}")
    if stale and args.check:
        print(f"{', '.join(map(str, stale))} differ from the kernel's traits: run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
