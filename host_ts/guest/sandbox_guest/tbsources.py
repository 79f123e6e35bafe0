"""stack_data's caches of parsed sources, kept bounded: a cell's entries go once its traceback has been shown.

IPython formats a traceback with stack_data, which parses each frame's file (its AST, tokens and line map) and keeps
the result for the life of the process, keyed by file name and lines (and, for each raising position, by code
object); executing also memoises, without bound, the statements at each line of each source and the statement
around each node it was asked about. Every cell is a file of its own (`<ipython-input-N-hash>`), so every cell that
raised kept its parse for good: ~40 objects per error, and wasm memory, which never shrinks, grew ~35 MiB per 1,000
errors (bench/soak.py). ipykernel's cells do not take that path (their files are not found on disk: IPython then
formats the frame without stack_data). A cell's source is parsed again if a later traceback (`%tb`, `%debug`)
needs it; library files stay cached (their memoised statements are found again from the kept parse).
"""

from __future__ import annotations

import re
import sys
from typing import Any

CELL_FILE = re.compile(r"<ipython-input-\d+-[0-9a-f]+>\Z")
SOURCE_CACHE = "__source_cache_with_lines"  # (filename, lines) -> Source
EXECUTING_CACHE = "__executing_cache"  # (code, id(code), instruction offset) -> what executes there
UNBOUNDED = ("statement_containing_node", "Source.statements_at_line")  # executing's lru_cache(maxsize=None)s


def forget_cell_sources() -> int:
    """Drop the cells' entries from stack_data's (and executing's) caches and empty executing's unbounded memos;
    the number of entries dropped."""
    dropped = 0
    for module, name in (("stack_data.core", "Source"), ("executing.executing", "Source")):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is None:
            continue
        own = vars(cls)  # the caches are set on each class itself (executing's `_class_local`)
        dropped += _drop(own.get(SOURCE_CACHE), lambda key: key[0])
        dropped += _drop(own.get(EXECUTING_CACHE), lambda key: key[0].co_filename)
    executing = sys.modules.get("executing.executing")
    for path in UNBOUNDED if executing is not None else ():
        memo: Any = executing
        for part in path.split("."):
            memo = getattr(memo, part, None)
        info = getattr(memo, "cache_info", None)
        if info is not None:
            dropped += info().currsize
            memo.cache_clear()
    return dropped


def _drop(cache: Any, filename_of: Any) -> int:
    if not isinstance(cache, dict):
        return 0
    cells = [key for key in list(cache) if _is_cell(key, filename_of)]
    for key in cells:
        cache.pop(key, None)
    return len(cells)


def _is_cell(key: Any, filename_of: Any) -> bool:
    try:
        return bool(CELL_FILE.match(str(filename_of(key))))
    except (AttributeError, IndexError, TypeError):
        return False
