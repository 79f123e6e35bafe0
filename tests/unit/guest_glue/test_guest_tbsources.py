"""stack_data's and executing's caches stay bounded (sandbox_guest.tbsources): a cell's parse goes once its
traceback is shown, a library file's stays."""

from __future__ import annotations

import linecache
import sys

import executing.executing as executing
import stack_data
from sandbox_guest.tbsources import forget_cell_sources
from stack_data.core import Source


def traceback_of(filename: str, code: str) -> object:
    """A traceback of `code` raising in a file named `filename`, its lines in linecache (as IPython's cells are)."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    try:
        exec(compile(code, filename, "exec"), {})
    except ZeroDivisionError:
        return sys.exc_info()[2]
    raise AssertionError("the code did not raise")


def formatted(tb: object) -> None:
    """What IPython's Context mode does with each frame: stack_data parses its file and finds the raising node."""
    for frame in stack_data.FrameInfo.stack_data(tb):  # type: ignore[arg-type]
        assert isinstance(frame, stack_data.FrameInfo)
        list(frame.lines)
        frame.executing.node  # noqa: B018 (finds the node: fills executing's caches)


def cached_files() -> set[str]:
    return {key[0] for key in vars(Source).get("__source_cache_with_lines", {})}


def test_a_cells_parse_is_dropped_and_a_library_files_kept() -> None:
    cell, library = "<ipython-input-7-0123abcd>", "/lib/python3/some_module.py"
    formatted(traceback_of(cell, "x = 1\ny = x / 0\n"))
    formatted(traceback_of(library, "def f():\n    return 1 / 0\nf()\n"))
    assert {cell, library} <= cached_files()  # the control: stack_data kept both
    assert executing.statement_containing_node.cache_info().currsize > 0

    assert forget_cell_sources() > 0
    assert cell not in cached_files() and library in cached_files()
    executing_files = {key[0].co_filename for key in vars(Source).get("__executing_cache", {})}
    assert cell not in executing_files
    assert executing.statement_containing_node.cache_info().currsize == 0
    assert executing.Source.statements_at_line.cache_info().currsize == 0
    formatted(traceback_of(cell, "x = 1\ny = x / 0\n"))  # a later traceback of that cell parses it again
    assert cell in cached_files()
    linecache.cache.pop(cell, None)
    linecache.cache.pop(library, None)


def test_nothing_to_forget_is_not_an_error() -> None:
    forget_cell_sources()
    assert forget_cell_sources() == 0
