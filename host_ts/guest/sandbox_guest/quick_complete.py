"""Quick completion of a module's attributes before the cell that imports it has run (`import os` / `os.pa`).

Jedi infers such a module from its source and stubs, parsing them first: 2.6 s in wasm for `os` the first
time, past JupyterLab's 1 s limit. A module the sandbox has loaded already (os, re, json, ... IPython imports
them) is completed from the module itself instead, as IPython completes a name the namespace holds.
"""

from __future__ import annotations

import re
import sys
from types import ModuleType

# `import a.b as c, d` as a statement of its own: at a line's start or after a `;`, ended by `;`, `#` or the line's
# end.
IMPORT = re.compile(r"(?:^|;)[ \t]*import[ \t]+([\w. \t,]+)(?=;|#|$)", re.M)
IMPORTED = re.compile(r"^([\w.]+)(?:[ \t]+as[ \t]+(\w+))?$")
DOTTED_TAIL = re.compile(r"([A-Za-z_]\w*)(?:\.\w*)*\.\w*$")


def loaded_imports(code: str, namespace: dict[str, object], cursor_pos: int) -> dict[str, ModuleType]:
    """Names the cell binds with `import x` / `import x as y` (`import os; os.pa` too) to a module already loaded,
    when the name before the cursor's dot is one of them and the namespace does not hold it yet; else {} (Jedi
    answers)."""
    head = DOTTED_TAIL.search(code[:cursor_pos].rsplit("\n", 1)[-1])
    if head is None or head.group(1) in namespace:
        return {}
    bound: dict[str, ModuleType] = {}
    for statement in IMPORT.finditer(code):
        for part in statement.group(1).split(","):
            if match := IMPORTED.match(part.strip()):
                bind(bound, head.group(1), match.group(1), match.group(2))
    return bound


def bind(bound: dict[str, ModuleType], wanted: str, dotted: str, alias: str | None) -> None:
    """Binds the name `import dotted [as alias]` would bind, when it is `wanted` and its module is loaded."""
    top = dotted.split(".")[0]
    name = alias or top
    module = sys.modules.get(dotted if alias else top)
    if name == wanted and isinstance(module, ModuleType):
        bound[name] = module
