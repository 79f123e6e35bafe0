"""%pip list / show / uninstall (sandbox_guest.pipcmds) under CPython, over this Python's own distributions."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import sys
import types

import pytest
from sandbox_guest import pipcmds


def test_list_is_pips_two_column_table():
    lines = pipcmds.pip_list([]).splitlines()
    assert lines[0].split() == ["Package", "Version"]
    width = len(lines[1].split(" ")[0])
    assert set(lines[1]) == {"-", " "} and lines[0].index("Version") == width + 1  # one space between columns
    rows = {line[:width].strip(): line[width + 1 :] for line in lines[2:]}
    assert rows["pytest"] == metadata.version("pytest")
    assert list(rows) == sorted(rows, key=pipcmds.canonical)  # by canonical name, as pip sorts
    assert f"pytest=={metadata.version('pytest')}\n" in pipcmds.pip_list(["--format=freeze"])
    assert {"name": "pytest", "version": metadata.version("pytest")} in json.loads(
        pipcmds.pip_list(["--format", "json"])
    )
    with pytest.raises(pipcmds.PipUsageError, match="option '-o' is not supported here"):
        pipcmds.pip_list(["-o"])


def test_show_gives_pips_fields_in_pips_order():
    warned: list[str] = []
    text = pipcmds.pip_show(["pytest", "sbk-not-installed", "Pluggy"], warned.append)
    first, second = text.split("---\n")
    keys = [line.split(": ", 1)[0] for line in first.splitlines() if ": " in line or line.endswith(":")]
    assert keys[:3] == ["Name", "Version", "Summary"] and keys[-3:] == ["Location", "Requires", "Required-by"]
    fields = dict(line.split(": ", 1) for line in first.splitlines() if ": " in line)
    assert fields["Name"] == "pytest" and fields["Version"] == metadata.version("pytest")
    assert "pluggy" in fields["Requires"].split(", ") and "colorama" not in fields["Requires"]  # a marker: Windows
    assert "pytest-cov" in fields["Required-by"].split(", ")
    assert second.startswith("Name: pluggy\n")
    assert warned == ["WARNING: Package(s) not found: sbk-not-installed"]


def test_uninstall_asks_unless_told_yes_and_names_what_it_removed(monkeypatch):
    removed: list[str] = []
    monkeypatch.setitem(sys.modules, "micropip", types.SimpleNamespace(uninstall=removed.append))
    said: list[str] = []
    warned: list[str] = []
    assert pipcmds.pip_uninstall(["pluggy", "sbk-absent"], lambda q: "n", said.append, warned.append) == []
    assert (
        removed == []
        and "  Would remove:\n" in said[1]
        and warned == ["WARNING: Skipping sbk-absent as it is not installed."]
    )
    said.clear()
    assert pipcmds.pip_uninstall(["-y", "Pluggy"], lambda q: pytest.fail("asked"), said.append, warned.append) == [
        "pluggy"
    ]
    version = metadata.version("pluggy")
    assert "".join(said) == (
        f"Found existing installation: pluggy {version}\nUninstalling pluggy-{version}:\n"
        f"  Successfully uninstalled pluggy-{version}\n"
    )
    assert removed == ["pluggy"]
    monkeypatch.setattr(pipcmds, "KERNEL_SITE", str(metadata.distribution("pluggy").locate_file("")))
    with pytest.raises(pipcmds.PipUsageError, match="part of the sandbox's own kernel"):
        pipcmds.pip_uninstall(["-y", "pluggy"], input, said.append, warned.append)
