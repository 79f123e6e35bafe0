"""Third-party modules adapted to the sandbox as they are imported (a finder at the front of sys.meta_path).

Each adapter runs once, right after its module's own code: the module is otherwise the package's own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def _quiet_tqdm(std: ModuleType) -> None:
    """tqdm starts a monitor thread with its first bar; the sandbox has no threads, so every tqdm class warned
    `TqdmMonitorWarning: ... can't start new thread` once. Without the monitor (monitor_interval = 0, tqdm's own
    switch) bars work as they do."""
    std.tqdm.monitor_interval = 0


ADAPTERS: dict[str, Callable[[ModuleType], None]] = {"tqdm.std": _quiet_tqdm}


class _AdaptingLoader:
    """The module's own loader; `adapt` runs after the module's code."""

    def __init__(self, loader: Any, adapt: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._adapt = adapt

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._adapt(module)

    def __getattr__(self, name: str) -> Any:  # get_data, get_resource_reader, ...: the module's own loader's
        return getattr(self._loader, name)


class AdaptingFinder:
    """Finds the modules of ADAPTERS with the other finders, and wraps their loaders."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        adapt = ADAPTERS.get(fullname)
        if adapt is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _AdaptingLoader(spec.loader, adapt)  # type: ignore[assignment]
                return spec
        return None


def install() -> None:
    if not any(isinstance(finder, AdaptingFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AdaptingFinder())
