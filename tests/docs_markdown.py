"""README.md and docs/*.md as the doc tests read them: their Python blocks (with what the note before each says),
their links and their headings' anchors, parsed with markdown-it (as GitHub renders CommonMark with tables).

A ```python block runs as host Python unless an HTML comment on the line before it says otherwise:

    <!-- not run: REASON -->                          skipped, e.g. it needs a config file or an MCP client
    <!-- run as a cell, settings: {"skills": [...]} -->   guest code: a cell in a Sandbox(**settings)
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->", re.S)
AS_A_CELL = re.compile(r"<!--\s*run as a cell(?:, settings:\s*(?P<settings>\{.*\}))?\s*-->", re.S)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


class NoteError(ValueError):
    """The comment before a Python block is not one the doc tests understand."""


@dataclass(frozen=True)
class Block:
    """One ```python block of a page."""

    page: Path
    line: int  # 1-based, of the opening fence
    code: str
    note: str = ""  # the HTML comment just before the block ('' if none)
    settings: dict[str, Any] = field(default_factory=dict)  # for guest code: the Sandbox's settings

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        """Why the block is not run (from `<!-- not run: ... -->`), or None."""
        match = NOT_RUN.fullmatch(self.note)
        return match["reason"] if match else None

    @property
    def is_cell(self) -> bool:
        """Guest code, run as a cell in a sandbox (`<!-- run as a cell ... -->`)."""
        return AS_A_CELL.fullmatch(self.note) is not None


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _tokens(page: Path) -> list[Token]:
    return _parse(page.read_text(encoding="utf-8"))


@cache
def _parse(text: str) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(text)


def python_blocks(page: Path) -> list[Block]:
    """The page's ```python blocks, each with the note before it (NoteError for a note that is neither form)."""
    found = []
    tokens = _tokens(page)
    for i, token in enumerate(tokens):
        if token.type != "fence" or token.info.strip() != "python":
            continue
        before = tokens[i - 1] if i else None
        note = before.content.strip() if before is not None and before.type == "html_block" else ""
        line = (token.map or [0])[0] + 1
        found.append(Block(page, line, token.content, note, _settings(note, f"{page.name}:{line}")))
    return found


def _settings(note: str, where: str) -> dict[str, Any]:
    if not note or NOT_RUN.fullmatch(note):
        return {}
    cell = AS_A_CELL.fullmatch(note)
    if cell is None:
        raise NoteError(
            f"{where}: the comment before this Python block is {note!r}; the doc tests understand "
            "'<!-- not run: REASON -->' and '<!-- run as a cell, settings: {JSON} -->'"
        )
    try:
        settings = json.loads(cell["settings"] or "{}")
    except json.JSONDecodeError as exc:
        raise NoteError(f"{where}: the settings are not JSON: {exc}") from None
    if not isinstance(settings, dict):
        raise NoteError(f"{where}: the settings must be a JSON object of Sandbox arguments")
    return settings


def links(page: Path) -> list[str]:
    """Every link and image target of the page, in order."""
    found = []
    for token in _tokens(page):
        for child in token.children or []:
            target = child.attrs.get("href") if child.type == "link_open" else child.attrs.get("src")
            if child.type in ("link_open", "image") and isinstance(target, str):
                found.append(target)
    return found


def relative_links(page: Path) -> list[str]:
    """The page's links that point into the repository (no scheme), anchors on the page itself included."""
    return [link for link in links(page) if not EXTERNAL.match(link)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (not '-' or '_'), spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of the page's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    tokens = _tokens(page)
    for opening, inline in itertools.pairwise(tokens):
        if opening.type != "heading_open":
            continue
        text = "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        if count:
            seen[f"{base}-{count}"] = 1
    return set(seen)
