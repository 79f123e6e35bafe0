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
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import packages, paths, provision
from .packages import LOCK_NAME, IndexFetchError, PackageError, PyodideIndex


@dataclass
class MirrorReport:
    """Where each requested package came from, and which could not be had."""

    from_index: list[str] = field(default_factory=list)
    from_pypi: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    index_error: str = ""  # why the Pyodide index could not give what then came from PyPI (the first reason)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_entry(wheel: Path) -> dict[str, Any]:
    """A lock-file entry for a wheel from PyPI: imports are its top-level names, depends its requirements."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode(errors="replace")
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    requires = [v for k, v in fields if k == "Requires-Dist" and "extra ==" not in v]
    tops = {n.split("/")[0] for n in names if "/" in n or n.endswith(".py")}
    return {
        "name": canonical(dict(fields)["Name"]),
        "version": dict(fields)["Version"],
        "file_name": wheel.name,
        "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "package_type": "package",
        "imports": sorted(t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", ".data"))),
        "depends": [canonical(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]) for r in requires],
        "unvendored_tests": False,
    }


def _existing_lock(folder: Path) -> dict[str, dict[str, Any]]:
    lock = folder / LOCK_NAME
    if not lock.is_file():
        return {}
    try:
        entries = json.loads(lock.read_text()).get("packages", {})
    except (json.JSONDecodeError, AttributeError):
        return {}
    return {name: pkg for name, pkg in entries.items() if (folder / str(pkg.get("file_name", ""))).is_file()}


def _pip_said(out: str) -> str:
    errors = [line for line in out.splitlines() if line.startswith("ERROR:")]
    return " ".join(errors) if errors else out.strip()[-300:]


def _pypi_specs(name: str, index: PyodideIndex) -> list[list[str]]:
    """What to ask pip for: the index's own version of `name` first, then any version."""
    if name in index.packages:
        return [[f"{name}=={index.packages[name]['version']}"], [name]]
    return [[name]]


def _from_pypi(attempts: list[list[str]], folder: Path, abi_version: str) -> dict[str, dict[str, Any]]:
    """Entries for the wheels (with dependencies) pip finds for the first of `attempts` it can satisfy."""
    said = ""
    for specs in attempts:
        with tempfile.TemporaryDirectory(prefix=".pypi-", dir=folder) as staging:
            code, out = asyncio.run(packages.pip_download(specs, None, Path(staging), abi_version))
            if code != 0:
                said = said or _pip_said(out)
                continue
            entries = {}
            for wheel in sorted(Path(staging).glob("*.whl")):
                if packages.is_guest_wheel(wheel.name):
                    wheel.replace(folder / wheel.name)
                    entry = lock_entry(folder / wheel.name)
                    entries[entry["name"]] = entry
            return entries
    raise PackageError(f"PyPI has no pure or {packages.guest_platform(abi_version)} wheels for it ({said})")


def build(folder: Path, names: list[str], source: str) -> MirrorReport:
    """Fill `folder` with `names` (all of the index's packages if none) and write its lock file."""
    folder.mkdir(parents=True, exist_ok=True)
    bundled_path = paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json"
    index = PyodideIndex(source, folder, bundled_path)
    report = MirrorReport()
    entries = _existing_lock(folder)
    wanted = [index.canonical(n) for n in names] or sorted(index.packages)
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
