"""Which names the quick completion binds (sandbox_guest/quick_complete.py); the kernel test times it."""

from __future__ import annotations

import json
import os

from sandbox_guest.quick_complete import loaded_imports


def bound(code: str, namespace: dict[str, object] | None = None) -> dict[str, object]:
    return loaded_imports(code, namespace or {}, len(code))


def test_a_loaded_module_the_cell_imports_is_bound_by_its_name_or_alias():
    assert bound("import os\nos.pa") == {"os": os}
    assert bound("import json as j  # short\nj.lo") == {"j": json}
    assert bound("import os.path\nx = 1\nos.path.jo") == {"os": os}


def test_an_import_among_statements_on_one_line_or_in_a_list_is_bound_too():
    """Before: `import collections; collections.Ord` went to Jedi, which parsed the module first (0.5-1 s)."""
    assert bound("import os; os.pa") == {"os": os}
    assert bound("x = 1; import json as j ; j.lo") == {"j": json}
    assert bound("import sys, os.path as p, json\njson.lo") == {"json": json}
    assert bound("import sys, os.path as p, json\np.jo") == {"p": os.path}


def test_nothing_when_jedi_should_answer():
    assert bound("import os\nos.pa", {"os": os}) == {}  # in the namespace: Jedi uses the object itself
    assert bound("import sbk_never_loaded\nsbk_never_loaded.x") == {}  # not loaded: importing it would run it
    assert bound("import os\nprint(o") == {}  # not an attribute
    assert bound("from os import path\npath.jo") == {}  # only plain imports
    assert bound("print('import os'); os.pa") == {}  # not an import statement
    assert bound("import os.path as\nos.pa") == {}  # not one either
