"""Leaks the soak run (bench/soak.py) found, each checked through a real kernel."""

from __future__ import annotations

import ast
import re

from jupyter_client.blocking.client import BlockingKernelClient

from conftest import execute, value

CACHES = """
import stack_data.core, executing.executing as _e
_own = vars(stack_data.core.Source)
(len(_own.get('__source_cache_with_lines', {})), len(_own.get('__executing_cache', {})),
 _e.statement_containing_node.cache_info().currsize, _e.Source.statements_at_line.cache_info().currsize)
"""


def test_cells_that_raise_leave_no_parse_of_themselves_behind(kc: BlockingKernelClient) -> None:
    """stack_data (IPython's traceback formatter) kept every raising cell's parsed source, for good: wasm memory
    grew ~35 MiB per 1,000 errors. Each cell's parse is now dropped once its traceback is shown."""
    execute(kc, "raise ValueError('first')")  # the first traceback parses what every later one reuses
    before = ast.literal_eval(value(execute(kc, CACHES)))
    for n in range(40):
        run = execute(kc, f"def _f{n}():\n    return {n} / 0\n_f{n}()")
        assert run.content["ename"] == "ZeroDivisionError"  # shown as ever: the traceback still has its source
        assert f"return {n} / 0" in re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(run.content["traceback"]))
    after = ast.literal_eval(value(execute(kc, CACHES)))
    assert after[0] <= before[0] and after[1] <= before[1], (before, after)  # was +40 and +80
    assert after[2:] == (0, 0), after  # executing's unbounded memos: were +40 and more
