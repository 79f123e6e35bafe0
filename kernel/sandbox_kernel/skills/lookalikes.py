"""Text as a person sees it: for judging whether guest text reads like the kernel's own (Unicode UTS #39).

`key(text)` folds what looks alike to one form: compatibility forms (NFKC: fullwidth letters), invisible code points
(default-ignorable ones such as zero-width joiners, bidi controls, variation selectors, tags, and combining marks),
case, and the confusables of Unicode's UTS #39 table (Cyrillic dze and a, Greek omicron, Cherokee A, '1' and 'I'
for 'l', '0' for 'O', 'm' for 'rn', ...) towards their ASCII prototype. Two strings that a person cannot tell apart
get the same key; the kernel compares keys with its own ASCII phrases.

The table comes from `confusable_homoglyphs`, which ships Unicode's confusables.txt as pairs in both directions.
The direction (source -> prototype) is taken only where it is certain, which is every pair whose prototype is
ASCII: all the kernel's phrases need (a character's prototype is the one entry of a character that is a source).
"""

from __future__ import annotations

import unicodedata
from functools import cache

# Default-ignorable code points that are letters (Lo) and so not caught by their category: Hangul fillers.
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")
# Categories a person does not see as a character of its own: controls, format characters (zero-width, bidi,
# tags), surrogates, private use, unassigned, and combining marks (variation selectors, the grapheme joiner).
_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Mn", "Me"})
_MARKS = "\u200e\u200f"  # the library wraps right-to-left homoglyphs in these for display


@cache
def ascii_prototypes() -> dict[str, str]:
    """{character: its ASCII prototype} for every character that UTS #39 maps to ASCII."""
    from confusable_homoglyphs.confusables import confusables_data

    table: dict[str, str] = {}
    for char, entries in confusables_data.items():
        if len(char) != 1 or len(entries) != 1:
            continue  # a sequence, or a prototype (it lists its several sources)
        prototype = entries[0]["c"].strip(_MARKS)
        if not prototype.isascii():
            continue
        if char.isascii() and len(confusables_data.get(prototype, ())) < 2:
            continue  # two ASCII strings that name only each other: which one is the prototype is not known
        table[char] = prototype
    return table


def visible(text: str) -> str:
    """`text` decomposed (NFD) without what a person cannot see; whitespace of any kind becomes one space."""
    shown = []
    for char in unicodedata.normalize("NFD", text):
        if char.isspace():
            shown.append(" ")
        elif char not in _FILLERS and unicodedata.category(char) not in _UNSEEN:
            shown.append(char)
    return "".join(shown)


def key(text: str) -> str:
    """What `text` looks like: equal for strings a person cannot tell apart (see the module's doc)."""
    table = ascii_prototypes()
    folded = unicodedata.normalize("NFKC", text)
    for _ in range(2):  # again after case folding: a capital's confusable is often listed for its small letter
        folded = "".join(table.get(c, c) for c in visible(folded)).casefold()
    return folded
