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
    monkeypatch.setattr(pipcmds, "_left_behind", lambda project, files: "")  # (the fake removes nothing)
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


def _dist(site, name: str, files: dict[str, str], requires: tuple[str, ...] = (), record: bool = True) -> None:
    """A distribution `name` 1.0 installed in `site`: its files, and its metadata (with a RECORD unless not)."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    needs = "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{needs}")
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    if record:
        listed = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
        (info / "RECORD").write_text("".join(f"{path},,\n" for path in listed))


def test_not_importable_checks_each_module_and_each_requirement(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _dist(tmp_path, "sbk_good", {"sbk_good/__init__.py": "", "sbk_good_single.py": ""}, requires=("pytest",))
    _dist(tmp_path, "sbk_hollow", {})  # metadata only: nothing to import, nothing missing
    _dist(tmp_path, "sbk_needy", {"sbk_needy.py": ""}, requires=("sbk-absent>=1", "colorama; sys_platform == 'win32'"))
    info = tmp_path / "sbk_lost-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sbk_lost\nVersion: 1.0\n")
    (info / "RECORD").write_text("sbk_lost/__init__.py,,\n")  # named by its RECORD, not on disk
    assert pipcmds.top_level_modules(metadata.distribution("sbk_good")) == ["sbk_good", "sbk_good_single"]
    assert pipcmds.not_importable(["sbk-good", "SBK_Hollow==1.0"]) == {}
    assert pipcmds.not_importable(["sbk-lost", "sbk-needy", "sbk-nowhere"]) == {
        "sbk-lost": "its metadata is there but Python cannot find sbk_lost",
        "sbk-nowhere": "it is not installed",
        "sbk-absent": "it is not installed (needed by sbk_needy)",  # colorama: only on Windows
    }


def test_a_wheels_url_or_path_names_the_project_in_its_file_name(tmp_path, monkeypatch):
    """micropip installs a wheel given by URL or emfs: path: the check after it looks for the wheel's project (the
    file name's part before the first '-'), not for the URL as if it were a name (a false "did not install")."""
    monkeypatch.syspath_prepend(str(tmp_path))
    _dist(tmp_path, "sbk_wheeled", {"sbk_wheeled.py": ""})
    specs = [
        "https://files.example/pkgs/sbk_wheeled-1.0-py3-none-any.whl",
        "https://files.example/sbk.Wheeled-1.0-py3-none-any.whl?token=a=b#sha256=00",
        "emfs:/tmp/wheels/sbk_wheeled-1.0-py3-none-any.whl",
        "/tmp/wheels/SBK_wheeled-1.0-py3-none-any.whl",
        "sbk-wheeled @ https://files.example/whatever.whl",
        "Sbk_Wheeled[extra]>=1.0; python_version > '3'",
    ]
    assert [pipcmds.project_name(spec) for spec in specs] == ["sbk-wheeled"] * len(specs)
    assert pipcmds.not_importable(specs) == {}
    assert pipcmds.not_importable(["https://files.example/sbk_unwheeled-1.0-py3-none-any.whl"]) == {
        "sbk-unwheeled": "it is not installed"
    }


def test_uninstall_says_success_only_once_the_files_are_gone(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _dist(tmp_path, "sbk_stays", {"sbk_stays.py": ""})
    _dist(tmp_path, "sbk_unrecorded", {"sbk_unrecorded.py": ""}, record=False)
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "micropip", types.SimpleNamespace(uninstall=calls.append))  # removes nothing
    said: list[str] = []
    with pytest.raises(pipcmds.PipUsageError) as caught:
        pipcmds.pip_uninstall(["-y", "sbk-stays"], input, said.append, said.append)
    assert str(caught.value) == "%pip uninstall: sbk_stays-1.0 was not removed: Python still finds its metadata"
    assert "Successfully" not in "".join(said) and calls == ["sbk_stays"]
    with pytest.raises(pipcmds.PipUsageError) as caught:
        pipcmds.pip_uninstall(["-y", "sbk-unrecorded"], input, said.append, said.append)
    assert str(caught.value) == (
        f"%pip uninstall: cannot uninstall sbk_unrecorded 1.0: no RECORD file was found for it in {tmp_path}, so what "
        "it installed is unknown (pip refuses it too): remove its modules and its .dist-info folder yourself"
    )
    assert calls == ["sbk_stays"]  # micropip was not asked (it would remove the metadata and leave the module)
