"""`sandbox-kernel mirror DIR [NAME...]`: a local Pyodide index folder for machines without the network.

Packages come from the Pyodide index (`--index`, default Pyodide's CDN) with their dependencies, as its lock
file names them; what the index cannot give (unreachable, or not in its lock) comes from PyPI when PyPI has
pure wheels or wheels for the guest's Pyodide ABI (PEP 783). The folder gets its own `pyodide-lock.json`
naming exactly the files in it, so `SandboxKernel.pyodide_index = DIR` then works offline.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from sandbox_kernel import paths
from sandbox_kernel.packages import checks
from sandbox_kernel.packages import index as packages
from sandbox_kernel.packages.checks import PackageError, is_project_name, printable, shown
from sandbox_kernel.packages.index import LOCK_NAME, IndexFetchError, PyodideIndex
from sandbox_kernel.sandbox import provision


@dataclass
class MirrorReport:
    """Where each requested package came from, and which could not be had."""

    from_index: list[str] = field(default_factory=list)
    from_pypi: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    index_error: str = ""  # why the Pyodide index could not give what then came from PyPI (the first reason)


def lock_entry(wheel: Path) -> dict[str, Any]:
    """A lock-file entry for a wheel from PyPI: imports are its top-level names, depends its requirements.

    Its name, version and requirements are checked as those of any index are (PackageError if not valid).
    """
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode(errors="replace")
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    requires = [_requirement(v, wheel) for k, v in fields if k == "Requires-Dist"]
    tops = {n.split("/")[0] for n in names if "/" in n or n.endswith(".py")}
    name = dict(fields).get("Name", "")
    entry = {
        "name": canonicalize_name(name) if is_project_name(name) else name,
        "version": dict(fields).get("Version"),
        "file_name": wheel.name,
        "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "package_type": "package",
        "imports": sorted(t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", ".data"))),
        "depends": sorted({canonicalize_name(r.name) for r in requires if not (r.marker and "extra" in str(r.marker))}),
        "unvendored_tests": False,
    }
    problems = checks.lock_entry_problems(entry["name"], entry)
    if problems:
        raise PackageError(f"the wheel {shown(wheel.name)} is refused: {'; '.join(problems)}")
    return entry


def _requirement(text: str, wheel: Path) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement:
        raise PackageError(
            f"the wheel {shown(wheel.name)} has a Requires-Dist that is not a requirement: {shown(text)}"
        ) from None


def _existing_lock(folder: Path) -> dict[str, dict[str, Any]]:
    """The entries of the folder's own lock (from an earlier run) whose files are there, unchanged."""
    lock = folder / LOCK_NAME
    if not lock.is_file():
        return {}
    try:
        entries = json.loads(lock.read_text()).get("packages", {})
    except (json.JSONDecodeError, AttributeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    checks.check_lock_entries(entries, f"the {LOCK_NAME} already in {folder}")
    return {
        name: pkg
        for name, pkg in entries.items()
        if (folder / pkg["file_name"]).is_file() and packages.file_sha256(folder / pkg["file_name"]) == pkg["sha256"]
    }


def _pip_said(out: str) -> str:
    errors = [line for line in out.splitlines() if line.startswith("ERROR:")]
    return printable(" ".join(errors) if errors else out.strip()[-300:])


def _pypi_specs(name: str, index: PyodideIndex) -> list[list[str]]:
    """What to ask pip for: the index's own version of `name` first, then any version.

    `name` is a checked package name and the index's version a checked PEP 440 version (public: a local
    version label would never be on PyPI), so each spec is a plain requirement.
    """
    pkg = index.packages.get(name)
    version = Version(pkg["version"]) if pkg is not None else None
    if version is not None and version.local is None:
        return [[f"{canonicalize_name(name)}=={version}"], [canonicalize_name(name)]]
    return [[canonicalize_name(name)]]


def _from_pypi(attempts: list[list[str]], folder: Path, abi_version: str) -> dict[str, dict[str, Any]]:
    """Entries for the wheels (with dependencies) pip finds for the first of `attempts` it can satisfy."""
    said = ""
    for specs in attempts:
        with tempfile.TemporaryDirectory(prefix=".pypi-", dir=folder) as staging:
            code, out = asyncio.run(packages.pip_download(specs, None, Path(staging), abi_version))
            if code != 0:
                said = said or _pip_said(out)
                continue
            wheels = [w for w in sorted(Path(staging).glob("*.whl")) if checks.is_guest_wheel(w.name)]
            entries = {entry["name"]: entry for entry in map(lock_entry, wheels)}  # all checked before any is kept
            for wheel in wheels:
                wheel.replace(folder / wheel.name)
            return entries
    raise PackageError(f"PyPI has no pure or {packages.guest_platform(abi_version)} wheels for it ({said})")


def _checked_names(names: list[str]) -> list[str]:
    """The requested names, PEP 503 normalised; any that is not a package name is a PackageError."""
    bad = [f"  {shown(name)} is not a package name ({checks.NAME_RULE})" for name in names if not is_project_name(name)]
    if bad:
        raise PackageError("each NAME must be a package name, without a version or options:\n" + "\n".join(bad))
    return [canonicalize_name(name) for name in names]


def build(folder: Path, names: list[str], source: str) -> MirrorReport:
    """Fill `folder` with `names` (all of the index's packages if none) and write its lock file.

    Every name and file from the index is checked first (a lock with one bad entry is refused whole, before
    anything is fetched); messages and the report hold no unprintable characters (they go to a terminal).
    """
    try:
        report = _build(folder, _checked_names(names), source)
    except PackageError as exc:
        raise PackageError(printable(str(exc))) from None
    report.failed = {name: printable(why) for name, why in report.failed.items()}
    report.index_error = printable(report.index_error)
    return report


def _build(folder: Path, names: list[str], source: str) -> MirrorReport:
    bundled_path = paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json"
    index = PyodideIndex(source, folder, bundled_path, setting="--index")
    folder.mkdir(parents=True, exist_ok=True)
    report = MirrorReport()
    entries = _existing_lock(folder)
    wanted = names or sorted(index.packages)
    for name in wanted:
        if name in index.packages:
            try:
                index.fetch([name])
            except IndexFetchError as exc:
                report.index_error = report.index_error or exc.reason
            except PackageError as exc:  # the file is there, but not the one the lock names
                report.index_error = report.index_error or str(exc)
            else:
                for dep in index.closure([name]):
                    entries[dep] = index.packages[dep]
                report.from_index.append(name)
                continue
        try:
            found = _from_pypi(_pypi_specs(name, index), folder, index.abi_version)
        except PackageError as exc:
            report.failed[name] = str(exc)
            continue
        entries.update({k: v for k, v in found.items() if k not in entries})
        report.from_pypi.append(name)
    for entry in entries.values():
        entry["depends"] = [d for d in entry.get("depends", []) if d in entries]
    bundled = json.loads(bundled_path.read_text())
    lock = {"info": bundled["info"], "packages": dict(sorted(entries.items()))}
    (folder / LOCK_NAME).write_text(json.dumps(lock, indent=1) + "\n")
    return report
