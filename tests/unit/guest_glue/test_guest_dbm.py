"""The sandbox's dbm (host_ts/guest/stdlib/dbm) under CPython: its files are CPython's dbm.dumb files, both ways."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from guest_glue.fake_host import GUEST_DIR

import dbm.dumb as cpython_dumb  # isort: skip  # CPython's own, to compare with


def _load_guest_dbm() -> ModuleType:
    """The guest's dbm package under another name (CPython's `dbm` stays as it is in this process)."""
    folder = GUEST_DIR / "stdlib" / "dbm"
    spec = importlib.util.spec_from_file_location(
        "guest_dbm", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["guest_dbm"] = module
    spec.loader.exec_module(module)
    return module


guest_dbm = _load_guest_dbm()


def test_the_guests_files_open_in_cpython_and_back(tmp_path: Path) -> None:
    made_here = str(tmp_path / "guest")
    with guest_dbm.open(made_here, "c") as db:
        db["a"] = "1"
        db[b"k\xe9"] = b"v" * 600
        db["a"] = "z" * 1000  # larger than its blocks: moved to the end
        db["b"] = "short"
        del db[b"k\xe9"]
    assert guest_dbm.whichdb(made_here) == "dbm.dumb"
    with cpython_dumb.open(made_here, "r") as db:
        assert dict(db) == {b"a": b"z" * 1000, b"b": b"short"}
    made_there = str(tmp_path / "cpython")
    with cpython_dumb.open(made_there, "c") as db:
        db["é"] = "v"
    assert guest_dbm.whichdb(made_there) == "dbm.dumb"
    with guest_dbm.open(made_there) as db:
        assert dict(db) == {"é".encode(): b"v"} and "é" in db and 5 not in db


def test_flags_are_cpythons(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    with pytest.raises(guest_dbm.error, match="'c' or 'n'"):
        guest_dbm.open(path)  # 'r': the database must exist
    with pytest.raises(ValueError, match="Flag must be one of"):
        guest_dbm.dumb.open(path, "x")
    with guest_dbm.open(path, "c") as db:
        db["k"] = "v"
    with guest_dbm.open(path, "r") as db, pytest.raises(OSError, match="reading only"):
        db["k"] = "w"
    with guest_dbm.open(path, "n") as db:  # always a new one
        assert len(db) == 0
    db = guest_dbm.open(path, "w")
    db.close()
    with pytest.raises(OSError, match="already been closed"):
        db.keys()


def test_reorganize_gives_back_the_space_of_old_values(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with guest_dbm.open(str(path), "c") as db:
        for n in range(5):
            db[f"k{n}"] = "x" * 2000
        for n in range(4):
            del db[f"k{n}"]
        before = (tmp_path / "db.dat").stat().st_size
        db.reorganize()
        assert (tmp_path / "db.dat").stat().st_size < before / 4
        assert db["k4"] == b"x" * 2000
    with cpython_dumb.open(str(path), "r") as db:
        assert dict(db) == {b"k4": b"x" * 2000}


@pytest.mark.parametrize(
    ("head", "kind"),
    [(b"SQLite format 3\0" + b"\0" * 8, "dbm.sqlite3"), (b"\xce\x9a\x57\x13" + b"\0" * 12, "dbm.gnu"), (b"abc", "")],
)
def test_whichdb_names_other_kinds_which_open_refuses(tmp_path: Path, head: bytes, kind: str) -> None:
    (tmp_path / "other").write_bytes(head)
    assert guest_dbm.whichdb(str(tmp_path / "other")) == kind
    with pytest.raises(guest_dbm.error, match="dbm.dumb only" if kind else "could not be determined"):
        guest_dbm.open(str(tmp_path / "other"), "c")
