"""What the host accepts from a package index or a lock file before it uses it: package names (PEP 503),
versions (PEP 440), plain wheel file names, sha256 digests, and requirements pip gets (never options, paths or
URLs). Values from outside are shown escaped (`printable`): an index's text cannot reach the terminal raw.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # packaging is imported where it is used: only kernels with packages need it
    from packaging.requirements import Requirement


class PackageError(RuntimeError):
    """A package that cannot be provided; the message says what to do."""


def is_guest_wheel(name: str) -> bool:
    """Pure-Python (`none-any`) or Pyodide-platform (`pyemscripten`/`emscripten`) wheels only."""
    tags = name[:-4].split("-")[-3:] if name.endswith(".whl") else []
    return len(tags) == 3 and (tags[1:] == ["none", "any"] or "emscripten" in tags[2])


_PROJECT_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE | re.ASCII)  # PEP 503 / 508
NAME_RULE = "PEP 503: ASCII letters, digits, '.', '_' and '-', a letter or digit first and last"
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*", re.ASCII)
LOCK_FILE_SUFFIXES = (".whl", ".zip")  # what Pyodide's locks name: wheels, and zips of shared libraries and tests
FILE_NAME_RULE = "letters, digits and '._+-' ending in .whl or .zip, without folders, '..' or a URL"
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
# Requirement text pip would take for a local archive (pip's own list): never handed to pip as a name.
_PIP_ARCHIVES = (
    ".zip", ".whl", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma",
)  # fmt: skip
REQUIREMENT_RULE = "a package name with optional [extras] and version specifiers, such as 'attrs==23.2' or 'six>=1.16'"
MAX_SHOWN = 120  # characters of an outside value quoted in a message
MAX_PROBLEM_LINES = 20  # refused lock entries listed one per line; the rest are counted


def printable(text: str) -> str:
    """`text` with every unprintable character (controls, terminal escapes, bidi marks) escaped; lines kept."""
    return "\n".join(
        "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in line)
        for line in text.split("\n")
    )


def shown(value: object) -> str:
    """An outside value for a one-line message: repr (so escaped and quoted), cut to MAX_SHOWN characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def is_project_name(value: object) -> bool:
    return isinstance(value, str) and _PROJECT_NAME.fullmatch(value) is not None


def version_problem(value: object) -> str | None:
    """Why `value` is not a PEP 440 version as a lock file gives one (None when it is)."""
    from packaging.version import InvalidVersion, Version

    if value is None:
        return "version is missing"
    try:
        if isinstance(value, str) and value == value.strip():
            Version(value)
            return None
    except InvalidVersion:
        pass
    return f"version {shown(value)} is not a PEP 440 version (such as 1.0, 2.3.post1 or 4.0rc2)"


def file_name_problem(value: object) -> str | None:
    """Why `value` is not a plain file name a lock may name, fetched from the index's base URL (None when it is)."""
    if value is None:
        return "file_name is missing"
    if isinstance(value, str) and _FILE_NAME.fullmatch(value) and value.endswith(LOCK_FILE_SUFFIXES):
        return None
    return f"file_name {shown(value)} is not a plain file name ({FILE_NAME_RULE})"


def sha256_problem(value: object) -> str | None:
    if value is None:
        return "sha256 is missing (every file needs one: 64 lowercase hex digits)"
    if isinstance(value, str) and _SHA256.fullmatch(value):
        return None
    return f"sha256 {shown(value)} is not 64 hex digits (lowercase)"


def lock_entry_problems(key: object, pkg: object) -> list[str]:
    """What makes one lock entry unsafe to use ([] when nothing): its name, version, file name and sha256."""
    problems = [] if is_project_name(key) else [f"the name is not a package name ({NAME_RULE})"]
    if not isinstance(pkg, dict):
        return [*problems, f"the entry is a {type(pkg).__name__}, not an object"]
    if "name" in pkg and pkg["name"] != key and not is_project_name(pkg["name"]):
        problems.append(f"name {shown(pkg['name'])} is not a package name ({NAME_RULE})")
    checks = (version_problem(pkg.get("version")), file_name_problem(pkg.get("file_name")))
    problems += [p for p in (*checks, sha256_problem(pkg.get("sha256"))) if p]
    depends = pkg.get("depends", [])
    if not isinstance(depends, list) or not all(map(is_project_name, depends)):
        problems.append(f"depends {shown(depends)} is not a list of package names")
    imports = pkg.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        problems.append(f"imports {shown(imports)} is not a list of module names")
    return problems


def check_lock_entries(entries: dict[Any, Any], where: str) -> None:
    """Refuse (PackageError) a lock whose entries are not all safe: one line per bad entry, naming what and why."""
    bad = [
        f"  package {shown(key)}: {'; '.join(p)}"
        for key, pkg in entries.items()
        if (p := lock_entry_problems(key, pkg))
    ]
    if not bad:
        return
    more = [f"  ... and {len(bad) - MAX_PROBLEM_LINES} more"] if len(bad) > MAX_PROBLEM_LINES else []
    raise PackageError(
        f"{where} is refused: {len(bad)} of its entries are not safe to use (nothing was fetched from it):\n"
        + "\n".join(bad[:MAX_PROBLEM_LINES] + more)
    )


def pip_requirement(text: object, where: str) -> str:
    """`text` as pip gets it: a normalised name, [extras] and version specifiers; anything else is a PackageError.

    Never a URL, a path, a file pip would read as an archive, a marker or an option: pip must only ever
    choose among wheels from its index, never build anything on the host.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        req = Requirement(text if isinstance(text, str) else "")
    except InvalidRequirement as exc:
        why = str(exc).splitlines()[0]
        raise PackageError(f"{where}: {shown(text)} is not {REQUIREMENT_RULE} ({why})") from None
    extras = f"[{','.join(sorted(canonicalize_name(e) for e in req.extras))}]" if req.extras else ""
    spec = f"{canonicalize_name(req.name)}{extras}{','.join(sorted(str(s) for s in req.specifier))}"
    refused = _requirement_refusal(req, spec)
    if refused:
        raise PackageError(f"{where}: {shown(text)}: {refused}")
    return spec


def _requirement_refusal(req: Requirement, spec: str) -> str:
    """Why a parsed requirement cannot go to pip ('' when it can)."""
    if req.url:
        return "a direct reference (name @ URL) is not accepted: name a version; for local wheels use a wheelhouse"
    if req.marker:
        return "environment markers (; ...) are not supported: every package is for the sandbox's Python"
    if any(s.operator == "===" for s in req.specifier):
        return "arbitrary equality (===) is not supported: use =="
    if spec.endswith(_PIP_ARCHIVES):
        return "a version ending like a file name (.zip, .whl, .tar...) is read by pip as a file: leave it out"
    return ""


def check_guest_wheels(folder: Path, where: str) -> None:
    """PackageError, naming `where` (the setting or command), unless every file pip downloaded into `folder` is a
    guest wheel (pure Python or Pyodide) with a valid name."""
    problems = [p for p in map(_wheel_problem, folder.iterdir()) if p]
    if problems:
        raise PackageError(f"{where}: {', '.join(problems)}; the sandbox needs pure-Python or Pyodide wheels")


def _wheel_problem(path: Path) -> str | None:
    """Why a file pip downloaded cannot go to the guest (None when it is a guest wheel with a valid name)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return f"{shown(path.name)} is not a wheel file name"
    return None if is_guest_wheel(path.name) else f"{shown(path.name)} is a native CPython wheel"
