"""The "exact command line" of Deno in docs/security.md is the one `LaunchPlan.deno_argv` makes, placeholders aside.

The plan is built with placeholder paths and the default settings, rendered the way the page shows it, and
compared with the page's block; on a difference the test prints the block the page should have.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sandbox_kernel import paths
from sandbox_kernel.jupyter.kernel import SandboxKernel
from sandbox_kernel.sandbox.launch_plan import LaunchPlan
from sandbox_kernel.sandbox.mounts import Mount

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
WIDTH = 112


def default(setting: str) -> Any:
    return SandboxKernel.class_traits()[setting].default()


def placeholder_plan() -> LaunchPlan:
    """The plan with placeholder paths and every setting at the kernel's default."""
    return LaunchPlan(
        host=Path("<host_ts>"),
        pyodide=Path(f"<cached pyodide {paths.pyodide_version()}>"),
        wheels=Path("<cached guest wheels>"),
        snapshots=Path("<snapshot folder>"),
        extra_read=[Path("<Pyodide package cache>")],
        mounts=[Mount(Path("<ro mount folders...>"), "/ro", False), Mount(Path("<rw mount folders...>"), "/rw", True)],
        allow_net=list(default("allow_net")),
        private=Path("<private folder>"),
        shared_deno_dir=Path("<deno cache>"),
        memory_limit_mb=default("memory_limit_mb"),
        deno_checks_off=False,
    )


DENIED_NAMES = "<rw mount folders...>/<each protected name of host_ts/guarded_paths.json>"


def shorten(arg: str) -> str:
    """--deny-write names every protected file at the top of each rw mount: the page shows where they come from."""
    name, _, value = arg.partition("=")
    if name == "--deny-write" and all(v.startswith("<rw mount folders...>/") for v in value.split(",")):
        return f"{name}={DENIED_NAMES}"
    return arg


def render(argv: list[str]) -> str:
    """One flag per line; comma lists wrapped with their continuation lines aligned after the '='."""
    head = argv.index("--unstable-worker-options") + 1
    lines = [" ".join(["deno", *argv[1:head]])]
    for arg in map(shorten, argv[head:]):
        name, eq, value = arg.partition("=")
        if not eq or "," not in value:
            lines.append(f"  {arg}")
            continue
        prefix = f"  {name}="
        line = prefix
        for item in value.split(","):
            piece = item if line == prefix or line.endswith(" ") else f",{item}"
            if len(line) + len(piece) + 1 > WIDTH and line.strip():
                lines.append(line + ",")
                line = " " * len(prefix) + item
            else:
                line += piece
        lines.append(line)
    return "\n".join(lines)


def page_block() -> str:
    text = PAGE.read_text()
    match = re.search(r"This is the exact command line.*?```text\n(.*?)\n```", text, re.S)
    assert match, "docs/security.md lost its 'This is the exact command line' block"
    return match.group(1)


def test_the_security_page_shows_the_command_line_the_code_makes() -> None:
    expected = render(placeholder_plan().deno_argv())
    assert page_block() == expected, f"docs/security.md's block should read:\n{expected}"


def test_the_rendering_keeps_every_argument() -> None:
    argv = placeholder_plan().deno_argv()
    first, *rest = re.sub(r",\n +", ",", render(argv)).split("\n")
    assert [*first.split(" "), *(line.strip() for line in rest)] == ["deno", *map(shorten, argv[1:])]


def test_deno_is_denied_writing_every_protected_name_at_a_mounts_top() -> None:
    from sandbox_kernel.sandbox import guarded_paths

    (denied,) = [a for a in placeholder_plan().deno_argv() if a.startswith("--deny-write=")]
    names = {p.rsplit("/", 1)[1] for p in denied.split("=", 1)[1].split(",")}
    literal = {n for rule in guarded_paths.rules()["protected"] for n in rule["names"] if "*" not in n}
    assert literal <= names and {".git", "Makefile", "makefile", "conftest.py", ".vscode"} <= names
