"""README.md stays short and opens with the two commands; every docs page is linked from it; every relative link
resolves; docs/configuration.md's table is the one the traits make; every Python block either runs in
tests/test_docs_code.py or says why not."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from traitlets import Bool, Dict, Enum, Float, HasTraits, Int, List, Unicode

from docs_markdown import DOCS, README, REPO, NoteError, anchors, pages, python_blocks, relative_links
from sandbox_kernel.jupyter import config_doc

MAX_README_BYTES = 10 * 1024
INSTALL_AND_QUICKSTART = (
    "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/sandbox-kernel install --sys-prefix && "
    ".venv/bin/jupyter nbconvert --to markdown --execute --stdout notebooks/quickstart.ipynb"
)
TEST_SUITE = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info, body) of each top-level fenced block, as .ci/run counts fences (lines starting with ```)."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```$", text, re.S | re.M)


def test_readme_is_at_most_10_kib() -> None:
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes; move detail into docs/ (at most {MAX_README_BYTES})"


def test_readme_opens_with_the_install_command_then_the_test_command() -> None:
    first, second = fenced_blocks(README.read_text())[:2]
    assert first == ("bash", INSTALL_AND_QUICKSTART + "\n")
    assert second == ("bash", TEST_SUITE + "\n")


def test_ci_runs_the_test_command_that_readme_gives() -> None:
    """.ci/run takes its command from README with an awk program: run that very program on README."""
    (program,) = re.findall(r"awk '([^']*)' README\.md", (REPO / ".ci" / "run").read_text())
    done = subprocess.run(["awk", program, str(README)], capture_output=True, text=True, timeout=10, check=True)
    assert done.stdout == TEST_SUITE + "\n"


def test_readme_links_every_docs_page() -> None:
    linked = {(README.parent / urlsplit(link).path).resolve() for link in relative_links(README)}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert unlinked == [], f"README.md does not link these pages of docs/: {unlinked}"


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The page's relative links whose file or folder does not exist under `root`, or whose #anchor is no heading."""
    broken = []
    for link in relative_links(page):
        parts = urlsplit(link)
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.is_relative_to(root):
            broken.append(f"{link} (outside the repository)")
        elif not target.exists():
            broken.append(f"{link} (no {target.relative_to(root)})")
        elif parts.fragment and target.suffix == ".md" and unquote(parts.fragment) not in anchors(target):
            broken.append(f"{link} (no heading with that anchor in {target.relative_to(root)})")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    """The link check itself: a missing file, a missing anchor, a way out, and good links."""
    (tmp_path / "other.md").write_text("# What `rw` means\n")
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "# Top\n\n[a](../other.md#what-rw-means) [b](nothere.md) [c](../other.md#nothere) [d](#top) [e](#gone) "
        "[f](../../outside.md) [g](https://example.org/x.md)\n"
    )
    found = broken_links(page, root=tmp_path)
    assert [b.split(" ")[0] for b in found] == ["nothere.md", "../other.md#nothere", "#gone", "../../outside.md"]


def test_configuration_page_is_generated_from_the_traits() -> None:
    current = config_doc.PAGE.read_text()
    assert config_doc.render(current) == current, (
        f"docs/configuration.md differs from the settings' traits (jupyter/settings.py): run `{config_doc.COMMAND}`"
    )


def test_the_table_has_a_row_for_every_setting_of_the_kernel() -> None:
    from ipykernel.kernelbase import Kernel

    from sandbox_kernel.jupyter.kernel import SandboxKernel

    page = config_doc.PAGE.read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    ours = set(SandboxKernel.class_traits(config=True)) - set(Kernel.class_traits(config=True))
    assert len(ours) > 20 and rows == ours


def test_a_changed_help_text_changes_the_page() -> None:
    page = config_doc.PAGE.read_text()
    settings = config_doc.kernel_settings()
    changed = [config_doc.Setting(s.name, s.type, s.default, s.help + " Changed.") for s in settings[:1]]
    assert config_doc.render(page, changed + settings[1:]) != page
    assert config_doc.main(["--check", "--page", str(config_doc.PAGE)]) == 0


def test_the_check_names_the_command_that_regenerates_the_page(tmp_path: Path, capsys) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(f"# Configuration\n\n{config_doc.BEGIN}\n| old |\n{config_doc.END}\n")
    assert config_doc.main(["--check", "--page", str(stale)]) == 1
    assert config_doc.COMMAND in capsys.readouterr().err
    assert config_doc.main(["--page", str(stale)]) == 0
    assert config_doc.main(["--check", "--page", str(stale)]) == 0
    assert "| `cell_timeout` |" in stale.read_text()


def test_a_page_without_its_markers_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="lost its markers"):
        config_doc.render("# Configuration\n\nno table here\n")
    page = tmp_path / "configuration.md"
    page.write_text("# Configuration\n\nno table here\n")
    assert config_doc.main(["--page", str(page)]) == 2
    assert config_doc.BEGIN in capsys.readouterr().err
    assert page.read_text() == "# Configuration\n\nno table here\n"


class Example(HasTraits):
    seconds = Float(None, allow_none=True, help="Seconds.")
    limit_bytes = Int(64 << 20)
    layers = List(Enum(["a", "b"]), ["a"])
    policy = Dict(value_trait=Unicode())
    names = List(Unicode())
    flag = Bool(False)


def test_types_and_defaults_in_words() -> None:
    traits = Example.class_traits()
    words = {name: config_doc.type_text(trait) for name, trait in traits.items()}
    assert words == {
        "seconds": "float or `None`",
        "limit_bytes": "int",
        "layers": "list, each one of `'a'`, `'b'`",
        "policy": "dict with str values",
        "names": "list of str",
        "flag": "bool",
    }
    assert config_doc.default_text("limit_bytes", traits["limit_bytes"], 64 << 20) == "`67108864` (64 MiB)"
    assert config_doc.default_text("seconds", traits["seconds"], None) == "`None`"


def test_this_machines_jupyter_folder_is_a_placeholder() -> None:
    from jupyter_core.paths import jupyter_data_dir

    text = config_doc.default_text("audit_log", Unicode(), f"{jupyter_data_dir()}/sandbox-kernel/audit.jsonl")
    assert text == "`'<jupyter data dir>/sandbox-kernel/audit.jsonl'`"


def test_table_cells_keep_pipes_stars_and_tags_literal() -> None:
    cell = config_doc._cell("'a:/b[:ro|rw]', every *.py, <b>, `x|*y`")
    assert cell == "'a:/b[:ro\\|rw]', every \\*.py, &lt;b>, `x\\|*y`"


def test_every_python_block_runs_or_says_why_not() -> None:
    """The notes before Python blocks are ones tests/test_docs_code.py understands (a typo would skip nothing)."""
    blocks = [block for page in pages() for block in python_blocks(page)]
    assert blocks, "no Python block in README.md or docs/"
    for block in blocks:
        assert not block.note or block.skip_reason or block.is_cell, block.name


def test_an_unknown_note_before_a_block_is_an_error(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- not ran: typo -->\n```python\nx = 1\n```\n")
    with pytest.raises(NoteError, match="not ran: typo"):
        python_blocks(page)
    page.write_text('<!-- run as a cell, settings: {"skills": [} -->\n```python\nx = 1\n```\n')
    with pytest.raises(NoteError, match="not JSON"):
        python_blocks(page)


def test_notes_say_how_a_block_runs(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not run: needs an MCP client -->\n```python\na\n```\n\n"
        '<!-- run as a cell, settings: {"skills": ["TimeSkill"]} -->\n```python\nb\n```\n\n```python\nc\n```\n'
    )
    a, b, c = python_blocks(page)
    assert (a.skip_reason, a.is_cell) == ("needs an MCP client", False)
    assert (b.skip_reason, b.is_cell, b.settings) == (None, True, {"skills": ["TimeSkill"]})
    assert (c.skip_reason, c.is_cell, c.code) == (None, False, "c\n")


VERSIONED = re.compile(r"(?:sandbox-kernel(?:-eg-kernelspecs)?:|sandbox_kernel-)(\d+\.\d+\.\d+\w*)")


def test_every_version_of_ours_in_the_docs_and_deploy_files_is_this_one() -> None:
    """Image tags and wheel names in README.md, docs/ and deploy/ name __version__ (or a $VERSION the reader sets)."""
    from sandbox_kernel import __version__

    files = [README, *DOCS.glob("*.md"), *(p for p in (REPO / "deploy").rglob("*") if p.is_file())]
    found = {(str(p.relative_to(REPO)), v) for p in files for v in VERSIONED.findall(p.read_text(errors="replace"))}
    assert found, "the deploy files name this version somewhere"
    assert {v for _, v in found} == {__version__}, sorted(f for f in found if f[1] != __version__)
