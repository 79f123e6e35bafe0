"""Third-party modules adapted as they are imported (sandbox_guest.adapt), with a stand-in tqdm package."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest
from sandbox_guest import adapt


@pytest.fixture
def standin_tqdm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    package = tmp_path / "tqdm"
    package.mkdir()
    (package / "__init__.py").write_text("from .std import tqdm\n")
    (package / "std.py").write_text("class tqdm:\n    monitor_interval = 10\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in ("tqdm", "tqdm.std"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ("tqdm", "tqdm.std"):
        sys.modules.pop(name, None)


def test_tqdm_gets_no_monitor_thread(standin_tqdm):
    adapt.install()
    adapt.install()  # once only
    assert sum(isinstance(f, adapt.AdaptingFinder) for f in sys.meta_path) == 1
    tqdm = importlib.import_module("tqdm")
    assert tqdm.tqdm.monitor_interval == 0
    std = sys.modules["tqdm.std"]
    assert "monitor_interval = 10" in inspect.getsource(std)  # the loader's other methods are the module's own


def test_without_the_finder_the_module_is_untouched(standin_tqdm):
    assert importlib.import_module("tqdm").tqdm.monitor_interval == 10
