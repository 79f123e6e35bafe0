"""Completions the kernel gives while its sandbox is still starting: a fresh sandbox's namespace holds nothing but
Python's keywords and builtins and the names IPython and the kernel put there, so the host can name them itself.

JupyterLab drops a completion reply that takes longer than a second, and a sandbox may take longer than that to
start on a loaded machine; without this, the first Tab in a new kernel would show nothing."""

from __future__ import annotations

import builtins
import inspect
import io
import keyword
import re
import tokenize
from typing import Any

# The names a fresh guest's namespace holds besides builtins (IPython's and the kernel's own), with their kinds.
FRESH_NAMESPACE = {
    "In": "instance",
    "Out": "instance",
    "device": "instance",
    "exit": "instance",
    "get_ipython": "function",
    "open": "function",
    "quit": "instance",
}
_NAME_BEFORE_CURSOR = re.compile(r"(?<!\w)[A-Za-z][A-Za-z0-9_]*\Z")
_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT}


def _kind(name: str) -> str:
    """The completion type JupyterLab shows beside a name, in IPython's words."""
    if name in FRESH_NAMESPACE:
        return FRESH_NAMESPACE[name]
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "keyword"
    value = getattr(builtins, name)
    return "class" if inspect.isclass(value) else "function" if callable(value) else "instance"


# Keywords that cannot begin a statement: the sandbox's completer (jedi) leaves them out at the start of one.
CONTINUING_KEYWORDS = {"and", "as", "elif", "else", "except", "finally", "in", "is", "or"}


def _known_names() -> list[str]:
    """Keywords, public builtins (the host's Python's: the guest's newer Python may have a few more) and the fresh
    namespace's names, in the sandbox completer's order (case-insensitive)."""
    public = [n for n in dir(builtins) if not n.startswith("_")]
    names = {*keyword.kwlist, *public, *FRESH_NAMESPACE} - CONTINUING_KEYWORDS
    return sorted(names, key=lambda n: (n.lower(), n))


def early_completions(code: str, cursor_pos: int) -> dict[str, Any]:
    """A complete_reply for a bare name before the cursor, from the names every fresh sandbox has; no matches for
    anything else (attributes, paths, magics, keys: only the sandbox knows those)."""
    none = {"status": "ok", "matches": [], "cursor_start": cursor_pos, "cursor_end": cursor_pos, "metadata": {}}
    found = _NAME_BEFORE_CURSOR.search(code[:cursor_pos])
    if found is None or not _bare_name_ends(code[:cursor_pos].rsplit("\n", 1)[-1]):
        return none
    prefix, start = found.group(), found.start()
    matches = [n for n in _known_names() if n.startswith(prefix)]
    if not matches:
        return none
    types = [{"start": start, "end": cursor_pos, "text": n, "type": _kind(n), "signature": ""} for n in matches]
    return {
        "status": "ok",
        "matches": matches,
        "cursor_start": start,
        "cursor_end": cursor_pos,
        "metadata": {"_jupyter_types_experimental": types},
    }


def _bare_name_ends(line: str) -> bool:
    """Whether `line` ends in a bare name: not an attribute, magic, shell word, or a word in a string or comment."""
    tokens: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            tokens.append(token)
    except tokenize.TokenError:  # an open bracket at the end: the tokens so far tell
        pass
    except SyntaxError:  # e.g. inside an unterminated string (Python 3.12+)
        return False
    if any(t.type == tokenize.ERRORTOKEN for t in tokens):  # a stray quote (Python 3.10, 3.11)
        return False
    significant = [t for t in tokens if t.type not in _LAYOUT]
    if not significant or significant[-1].type != tokenize.NAME:
        return False
    return len(significant) == 1 or significant[-2].string not in NOT_AN_EXPRESSION_AFTER


# After these, the word at the cursor names a module, an attribute, a new name, a magic or a shell word: no builtin.
NOT_AN_EXPRESSION_AFTER = {".", "%", "!", "?", "import", "from", "def", "class", "as", "global", "nonlocal"}
