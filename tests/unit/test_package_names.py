"""Names, versions, file names and hashes from settings, indexes and lock files: data for pip, never options."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox_kernel.packages import mirror
from sandbox_kernel.packages.checks import (
    MAX_PROBLEM_LINES,
    PackageError,
    check_lock_entries,
    file_name_problem,
    is_project_name,
    lock_entry_problems,
    pip_requirement,
    printable,
    sha256_problem,
    version_problem,
)
from sandbox_kernel.packages.index import pip_download_argv

GOOD = {"name": "six", "version": "1.16.0", "file_name": "six-1.16.0-py2.py3-none-any.whl", "sha256": "a" * 64}


@pytest.mark.parametrize("name", ["six", "python-dateutil", "Jinja2", "ruamel.yaml", "pydantic_core", "a", "A1"])
def test_package_names(name):
    assert is_project_name(name)


@pytest.mark.parametrize(
    "name",
    ["--requirement=x", "-r", "x-", ".x", "", "a b", "a/b", "..", "six\n", "six==1.0", "six @ http://e.example/",
     "\u212aelvin", "\u017fix", "sïx", None, 3],
    ids=repr,
)  # fmt: skip
def test_not_package_names(name):
    assert not is_project_name(name)  # the Kelvin sign and the long s fold to ASCII letters: still refused


@pytest.mark.parametrize("version", ["1.0", "2.3.post1", "4.0rc2", "1!2.0", "1.0+local.7", "2024.1.1"])
def test_pep440_versions(version):
    assert version_problem(version) is None


@pytest.mark.parametrize("version", ["1.0 --index-url x", " 1.0", "1.0\n", "", "latest", "1.0;rm", 1.0, ["1.0"]])
def test_not_pep440_versions(version):
    assert (
        version_problem(version) == f"version {version!r} is not a PEP 440 version (such as 1.0, 2.3.post1 or 4.0rc2)"
    )


def test_a_missing_version_is_named_as_missing():
    assert version_problem(None) == "version is missing"


@pytest.mark.parametrize("file_name", ["six-1.16.0-py2.py3-none-any.whl", "libopenblas-0.3.31.zip", "x-1.0+cpu.whl"])
def test_plain_file_names(file_name):
    assert file_name_problem(file_name) is None


@pytest.mark.parametrize(
    "file_name",
    ["../../x.whl", "/etc/x.whl", "http://elsewhere.example/x.whl", "//elsewhere.example/x.whl", "a\\b.whl",
     "..\\x.whl", "x.tar.gz", "x.py", ".hidden.whl", "x.whl/", "x.whl\n", "%2e%2e%2fx.whl", "x.whl?y", "x.whl#y",
     "file:x.whl", "x whl.whl", "", 7],
    ids=repr,
)  # fmt: skip
def test_file_names_that_are_not_plain(file_name):
    assert file_name_problem(file_name).startswith(f"file_name {file_name!r} is not a plain file name (")


def test_sha256_must_be_64_lowercase_hex_digits():
    assert sha256_problem("0123456789abcdef" * 4) is None
    assert sha256_problem(None) == "sha256 is missing (every file needs one: 64 lowercase hex digits)"
    for bad in ["0" * 63, "0" * 65, "g" * 64, "A" * 64, " " + "0" * 63, 0]:
        assert sha256_problem(bad) == f"sha256 {bad!r} is not 64 hex digits (lowercase)"


def test_a_good_entry_has_no_problems_and_a_bad_one_names_each():
    assert lock_entry_problems("six", {**GOOD, "depends": [], "imports": ["six"]}) == []
    bad = {"name": "-x", "version": "1 x", "file_name": "../x.whl", "depends": ["--r"], "imports": [1]}
    assert lock_entry_problems("--requirement=x", bad) == [
        "the name is not a package name (PEP 503: ASCII letters, digits, '.', '_' and '-', a letter or digit first "
        "and last)",
        "name '-x' is not a package name (PEP 503: ASCII letters, digits, '.', '_' and '-', a letter or digit first "
        "and last)",
        "version '1 x' is not a PEP 440 version (such as 1.0, 2.3.post1 or 4.0rc2)",
        "file_name '../x.whl' is not a plain file name (letters, digits and '._+-' ending in .whl or .zip, without "
        "folders, '..' or a URL)",
        "sha256 is missing (every file needs one: 64 lowercase hex digits)",
        "depends ['--r'] is not a list of package names",
        "imports [1] is not a list of module names",
    ]
    assert lock_entry_problems("x", "not an entry") == ["the entry is a str, not an object"]


def test_a_lock_is_refused_with_one_line_per_bad_entry_escaped_and_counted_past_the_cap():
    entries: dict[str, Any] = {"six": GOOD, "\x1b[2J": GOOD}
    entries.update({f"--opt{i}": GOOD for i in range(MAX_PROBLEM_LINES + 5)})
    with pytest.raises(PackageError) as caught:
        check_lock_entries(entries, "the lock of here")
    lines = str(caught.value).splitlines()
    count = MAX_PROBLEM_LINES + 6
    assert (
        lines[0]
        == f"the lock of here is refused: {count} of its entries are not safe to use (nothing was fetched from it):"
    )
    assert lines[1].startswith("  package '\\x1b[2J': the name is not a package name")
    assert lines[2].startswith("  package '--opt0': the name is not a package name")
    assert lines[-1] == "  ... and 6 more" and len(lines) == 1 + MAX_PROBLEM_LINES + 1
    assert "'six'" not in str(caught.value) and "\x1b" not in str(caught.value)
    check_lock_entries({"six": GOOD}, "the lock of here")  # nothing to refuse: no error


@pytest.mark.parametrize(
    ("text", "pip_gets"),
    [("six", "six"), ("Six>=1.16", "six>=1.16"), ("attrs[Tests]==23.2", "attrs[tests]==23.2"),
     ("Ruamel.YAML<0.19,>=0.17", "ruamel-yaml<0.19,>=0.17"), ("x==1.0.*", "x==1.0.*"), ("x~=2.1", "x~=2.1")],
)  # fmt: skip
def test_requirements_reach_pip_normalised(text, pip_gets):
    assert pip_requirement(text, "SandboxKernel.packages") == pip_gets


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("--requirement=http://e.example/r.txt", "is not a package name with optional [extras] and version specifiers"),
        ("-rreq.txt", "is not a package name with optional"),
        ("six==1.0 --index-url x", "is not a package name with optional"),
        ("six\n--no-binary=:all:", "is not a package name with optional"),
        ("http://e.example/evil-1.0.tar.gz", "is not a package name with optional"),
        ("./evil", "is not a package name with optional"),
        ("/tmp/evil", "is not a package name with optional"),
        (42, "is not a package name with optional"),
        ("evil @ http://e.example/evil-1.0.tar.gz", "a direct reference (name @ URL) is not accepted"),
        ("evil @ file:///tmp/evil", "a direct reference (name @ URL) is not accepted"),
        ("six; python_version > '3'", "environment markers (; ...) are not supported"),
        ("six===1.0", "arbitrary equality (===) is not supported"),
        ("six==1.0+evil.zip", "is read by pip as a file"),
        ("six==1.0+evil.tar", "is read by pip as a file"),
    ],
)
def test_requirements_pip_would_read_as_options_paths_or_urls_are_refused(text, why):
    with pytest.raises(PackageError) as caught:
        pip_requirement(text, "SandboxKernel.packages")
    assert str(caught.value).startswith(f"SandboxKernel.packages: {text!r}") and why in str(caught.value)


def test_pip_gets_wheels_only_and_every_spec_after_double_dash(tmp_path):
    argv = pip_download_argv(["Six>=1", "attrs"], tmp_path / "house", tmp_path / "dest", "2026_0")
    assert argv[argv.index("--") + 1 :] == ["six>=1", "attrs"]
    options = argv[: argv.index("--")]
    assert "--only-binary=:all:" in options and f"--find-links={tmp_path / 'house'}" in options
    assert not any(a.startswith(("-r", "--requirement", "-c", "--constraint", "--no-binary")) for a in options)
    with pytest.raises(PackageError, match="pip download: '--requirement=x' is not"):
        pip_download_argv(["six", "--requirement=x"], None, tmp_path, "2026_0")  # checked again at the sink


def test_this_pip_reads_what_follows_double_dash_as_requirements_not_options(tmp_path):
    """The promise `--` rests on, checked against the pip that is installed (no index is contacted)."""
    requirements = tmp_path / "req.txt"
    requirements.write_text("this-file-was-read-by-pip\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-index", f"--dest={tmp_path}", "--", f"--requirement={requirements}"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"Invalid requirement: '--requirement={requirements}'" in done.stderr
    assert "this-file-was-read-by-pip" not in done.stdout + done.stderr


def test_printable_escapes_terminal_controls_and_keeps_lines():
    assert (
        printable("a\x1b]0;title\x07b\x1b[2J\rc\u202ed\nnext é ü")
        == "a\\x1b]0;title\\x07b\\x1b[2J\\rc\\u202ed\nnext é ü"
    )


# ---- sandbox-kernel mirror --------------------------------------------------------------------------


def test_mirror_names_must_be_package_names():
    assert mirror._checked_names(["Six", "python_dateutil"]) == ["six", "python-dateutil"]
    with pytest.raises(PackageError) as caught:
        mirror._checked_names(["six", "--requirement=x", "attrs>=23"])
    assert str(caught.value).splitlines() == [
        "each NAME must be a package name, without a version or options:",
        "  '--requirement=x' is not a package name (PEP 503: ASCII letters, digits, '.', '_' and '-', a letter or "
        "digit first and last)",
        "  'attrs>=23' is not a package name (PEP 503: ASCII letters, digits, '.', '_' and '-', a letter or digit "
        "first and last)",
    ]


def test_pypi_is_asked_for_the_index_version_only_when_pypi_could_have_it():
    index = SimpleNamespace(packages={"six": {"version": "1.16.0"}, "loc": {"version": "1.0+evil.zip"}})
    assert mirror._pypi_specs("six", index) == [["six==1.16.0"], ["six"]]  # type: ignore[arg-type]
    assert mirror._pypi_specs("loc", index) == [["loc"]]  # type: ignore[arg-type]
    assert mirror._pypi_specs("Other_Name", index) == [["other-name"]]  # type: ignore[arg-type]


def wheel_with_metadata(folder: Path, metadata: str, file_name: str = "x-1.0-py3-none-any.whl") -> Path:
    wheel = folder / file_name
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("x/__init__.py", "")
        zf.writestr("x-1.0.dist-info/METADATA", metadata)
    return wheel


def test_a_wheel_from_pypi_gets_a_checked_lock_entry(tmp_path):
    meta = "Name: X_Y\nVersion: 1.0\nRequires-Dist: Six>=1\nRequires-Dist: pytest; extra == 'test'\n"
    entry = mirror.lock_entry(wheel_with_metadata(tmp_path, meta))
    assert (entry["name"], entry["version"], entry["depends"], entry["imports"]) == ("x-y", "1.0", ["six"], ["x"])


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ("Name: --requirement=x\nVersion: 1.0\n", "is refused: the name is not a package name"),
        ("Name: x\nVersion: 1.0 --index-url y\n", "version '1.0 --index-url y' is not a PEP 440 version"),
        ("Name: x\nVersion: 1.0\nRequires-Dist: --requirement=y\n", "has a Requires-Dist that is not a requirement"),
    ],
)
def test_a_wheel_with_hostile_metadata_is_refused(tmp_path, metadata, why):
    with pytest.raises(PackageError, match=r"^the wheel 'x-1\.0-py3-none-any\.whl' ") as caught:
        mirror.lock_entry(wheel_with_metadata(tmp_path, metadata))
    assert why in str(caught.value)


def test_the_folders_own_lock_is_checked_and_files_that_changed_are_dropped(tmp_path):
    kept, changed = tmp_path / "a-1.0-py3-none-any.whl", tmp_path / "b-1.0-py3-none-any.whl"
    kept.write_bytes(b"a")
    changed.write_bytes(b"b changed")
    digest = {p: hashlib.sha256(p.name[0].encode()).hexdigest() for p in (kept, changed)}
    entries = {p.name[0]: {**GOOD, "file_name": p.name, "sha256": digest[p]} for p in (kept, changed)}
    (tmp_path / "pyodide-lock.json").write_text(json.dumps({"packages": entries}))
    assert list(mirror._existing_lock(tmp_path)) == ["a"]
    entries["c"] = {**GOOD, "file_name": "/etc/passwd.whl"}
    (tmp_path / "pyodide-lock.json").write_text(json.dumps({"packages": entries}))
    with pytest.raises(PackageError, match=r"already in .* is refused: 1 of its entries .*\n  package 'c': file_name"):
        mirror._existing_lock(tmp_path)
