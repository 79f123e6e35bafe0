"""Python packages for the sandbox, resolved on the host (the guest needs no network for them).

Two sources: pure-Python and Pyodide (PEP 783) wheels from the package index or a local wheelhouse
(`SandboxKernel.packages`), and Pyodide's own builds (numpy, ...) from `SandboxKernel.pyodide_index`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sandbox_kernel import paths

GUEST_PYTHON = "3.14"
ABI_TAG = "cp314"
FETCH_TIMEOUT = 15.0  # seconds per Pyodide package download


class PackageError(RuntimeError):
    """A package that cannot be provided; the message says what to do."""


class IndexFetchError(PackageError):
    """A file the Pyodide index could not give; `reason` is the short why (for reports that list many)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def default_pyodide_index() -> str:
    return f"https://cdn.jsdelivr.net/pyodide/v{paths.pyodide_version()}/full/"


def is_guest_wheel(name: str) -> bool:
    """Pure-Python (`none-any`) or Pyodide-platform (`pyemscripten`/`emscripten`) wheels only."""
    tags = name[:-4].split("-")[-3:] if name.endswith(".whl") else []
    return len(tags) == 3 and (tags[1:] == ["none", "any"] or "emscripten" in tags[2])


def guest_platform(abi_version: str) -> str:
    """The PEP 783 platform tag of wheels built for the guest's Pyodide ABI (from its lock file's info)."""
    return f"pyemscripten_{abi_version}_wasm32"


# ---- names, versions and files from settings, indexes and lock files: checked before pip or a path sees them ----

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


def _wheel_problem(path: Path) -> str | None:
    """Why a file pip downloaded cannot go to the guest (None when it is a guest wheel with a valid name)."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return f"{shown(path.name)} is not a wheel file name"
    return None if is_guest_wheel(path.name) else f"{shown(path.name)} is a native CPython wheel"


def pip_download_argv(specs: list[str], wheelhouse: Path | None, target: Path, abi_version: str) -> list[str]:
    """The pip command for `pip_download`: wheels only, every spec checked again and given after `--`."""
    checked = [pip_requirement(spec, "pip download") for spec in specs]
    find = ["--no-index", f"--find-links={os.path.abspath(wheelhouse)}"] if wheelhouse is not None else []
    return [
        sys.executable, "-m", "pip", "download", *find, "--quiet", "--only-binary=:all:",
        "--python-version", GUEST_PYTHON, "--implementation", "cp", "--abi", "none", "--abi", ABI_TAG,
        "--abi", "abi3", "--platform", "any", "--platform", guest_platform(abi_version),
        f"--dest={os.path.abspath(target)}", "--", *checked,
    ]  # fmt: skip


async def pip_download(specs: list[str], wheelhouse: Path | None, target: Path, abi_version: str) -> tuple[int, str]:
    """pip download of pure wheels and of wheels for the guest's Pyodide ABI (PEP 783), for CPython 3.14.

    Wheels only, and no spec can be an option (`pip_download_argv`); pip runs in `target`, a new and
    empty folder, so no spec can name a file or folder pip would build from either.
    """
    argv = pip_download_argv(specs, wheelhouse, target, abi_version)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=target,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def _finish(staging: Path, folder: Path) -> list[Path]:
    """Check the download holds only guest wheels, then move it into place in one rename."""
    problems = [p for p in map(_wheel_problem, staging.iterdir()) if p]
    if problems:
        shutil.rmtree(staging, ignore_errors=True)
        raise PackageError(
            f"SandboxKernel.packages: {', '.join(problems)}; the sandbox needs pure-Python or Pyodide wheels"
        )
    (staging / ".complete").write_text("ok\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return sorted(folder.glob("*.whl"))


async def preinstall_wheels(
    specs: list[str], wheelhouse: Path | None, say: Callable[[str], None], abi_version: str
) -> tuple[Path, list[Path]]:
    """Wheels (with dependencies) for `SandboxKernel.packages`, cached by the request's digest."""
    specs = [pip_requirement(spec, "SandboxKernel.packages") for spec in specs]
    request = {"specs": specs, "wheelhouse": str(wheelhouse) if wheelhouse else None, "abi": abi_version}
    key = json.dumps(request, sort_keys=True)
    folder = paths.cache_dir() / "packages" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if (folder / ".complete").is_file():
        return folder, sorted(folder.glob("*.whl"))
    say(f"sandbox-kernel: resolving SandboxKernel.packages {specs} on the host into {folder}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=folder.parent))
    code, out = await pip_download(specs, wheelhouse, staging, abi_version)
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        where = f"the wheelhouse {wheelhouse}" if wheelhouse else "the package index"
        raise PackageError(
            f"SandboxKernel.packages {specs}: no pure-Python (py3-none-any) or Pyodide ({guest_platform(abi_version)}) "
            f"wheels found in {where} for all of them and their dependencies. Other compiled packages need Pyodide "
            f"builds: import them and they load from SandboxKernel.pyodide_index.\npip said: {out.strip()[-1500:]}"
        )
    return folder, await asyncio.to_thread(_finish, staging, folder)


LOCK_NAME = "pyodide-lock.json"
LOCK_TIMEOUT = 10.0  # seconds to read a mirror's lock file at sandbox start


def _index_location(value: str, setting: str) -> tuple[str, Path | None]:
    """(source as shown, local folder or None) for `setting` (a Pyodide index); a bad value is a PackageError."""
    if value.startswith(("http://", "https://")):
        return (value if value.endswith("/") else value + "/"), None
    if value.startswith("file:"):
        parts = urllib.parse.urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise PackageError(f"{setting} {value!r}: a file:// URL must name a folder on this machine")
        folder = Path(urllib.request.url2pathname(parts.path))
    elif "://" in value:
        raise PackageError(f"{setting} {value!r}: use an http:// or https:// URL, a file:// URL or a folder")
    else:
        folder = Path(value).expanduser()
    if not folder.is_dir():
        raise PackageError(
            f"{setting}: {str(folder)!r} is not a folder. It should hold Pyodide packages and "
            f"their {LOCK_NAME}; set it to such a folder or URL, or remove the setting to use Pyodide's CDN."
        )
    return str(folder), folder


def _checked_lock(text: str, where: str, bundled: dict[str, Any]) -> dict[str, Any]:
    """The parsed lock file, refused (PackageError) unless every entry has a package name, a PEP 440 version,
    a plain file name and a sha256 (`check_lock_entries`)."""
    try:
        lock: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PackageError(f"{where} is not valid JSON ({exc})") from None
    entries = lock.get("packages") if isinstance(lock, dict) else None
    if not isinstance(entries, dict):
        raise PackageError(f"{where} has no 'packages' object: it is not a Pyodide lock file")
    check_lock_entries(entries, where)
    want = (bundled.get("info") or {}).get("abi_version")
    info = lock.get("info")
    have = info.get("abi_version") if isinstance(info, dict) else None
    if want and have and have != want:
        raise PackageError(
            f"{where} is for Pyodide ABI {shown(have)}; this kernel's Pyodide {paths.pyodide_version()} needs ABI {want}"
        )
    return lock


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class PyodideIndex:
    """Pyodide's compiled packages: the lock file says what exists, files are fetched on the host.

    `source` is an http(s) URL, a `file://` URL or a folder. The index's own `pyodide-lock.json` is used
    when it has one (Pyodide's bundled lock otherwise, noted in `notes`); every file is checked against
    the lock's sha256 each time it is used, so a changed or damaged cached file is fetched again.
    """

    def __init__(
        self, source: str, cache: Path, bundled_lock: Path, setting: str = "SandboxKernel.pyodide_index"
    ) -> None:
        self.source, self.local = _index_location(source, setting)
        self.cache = cache
        self.notes: list[str] = []
        bundled_text = bundled_lock.read_text()
        bundled = json.loads(bundled_text)
        self.abi_version: str = (bundled.get("info") or {}).get("abi_version", "")  # the runtime's ABI
        own = self._own_lock(source, bundled_text)
        self.lock_text = own if own is not None else bundled_text  # handed to every sandbox start as it is
        where = f"the {LOCK_NAME} of {setting} {self.source}"
        self.lock: dict[str, Any] = _checked_lock(self.lock_text, where, bundled)
        self.packages: dict[str, dict[str, Any]] = self.lock["packages"]
        self.by_import = {imp: name for name, pkg in self.packages.items() for imp in pkg.get("imports", [])}

    def _own_lock(self, value: str, bundled_text: str) -> str | None:
        """The index's pyodide-lock.json, or None (with a note) where it has none."""
        if self.local is not None:
            own = self.local / LOCK_NAME
            if own.is_file():
                return own.read_text()
        elif value.rstrip("/") == default_pyodide_index().rstrip("/"):
            return bundled_text  # the CDN of the pinned version: its lock is the one Pyodide ships
        else:
            try:
                with urllib.request.urlopen(self.source + LOCK_NAME, timeout=LOCK_TIMEOUT) as resp:
                    return str(resp.read().decode())
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    self.notes.append(f"could not read {self.source}{LOCK_NAME} (HTTP {exc.code})")
                    return None
            except (OSError, UnicodeDecodeError) as exc:
                self.notes.append(printable(f"could not read {self.source}{LOCK_NAME} ({type(exc).__name__}: {exc})"))
                return None
        self.notes.append(f"{self.source} has no {LOCK_NAME}")
        return None

    def describe_lock(self) -> str:
        why = "; ".join(self.notes)
        return f" ({why}: its packages were looked up in Pyodide's own lock file)" if why else ""

    def canonical(self, spec: str) -> str:
        """The lock file's name for a requirement like 'Attrs>=23' (PEP 503 normalised)."""
        name = re.split(r"[<>=!~\[; ]", spec.strip(), maxsplit=1)[0]
        return re.sub(r"[-_.]+", "-", name).lower()

    def closure(self, names: Iterable[str]) -> list[str]:
        """`names` with every dependency, per the lock file."""
        todo, seen = list(names), []
        while todo:
            name = todo.pop()
            if name in seen or name not in self.packages:
                continue
            seen.append(name)
            todo.extend(self.packages[name].get("depends", []))
        return seen

    def fetch(self, names: list[str]) -> None:
        """Have the files of `names` (and their dependencies) in the cache, each matching the lock's sha256.

        A cached file is hashed at every use: one that changed (a damaged cache, or an index whose file
        changed under the same name) is fetched again rather than loaded.
        """
        self.cache.mkdir(parents=True, exist_ok=True)
        for name in self.closure(names):
            pkg = self.packages[name]
            cached = self.cache / pkg["file_name"]
            if cached.is_file():
                if file_sha256(cached) == pkg["sha256"]:
                    continue
                cached.unlink()
            data = self._download(pkg)
            digest = hashlib.sha256(data).hexdigest()
            if digest != pkg["sha256"]:
                raise PackageError(
                    f"{pkg['file_name']} from {self.source} has sha256 {digest}, but the lock file says "
                    f"{pkg['sha256']}{self.describe_lock()}"
                )
            partial = self.cache / f".{pkg['file_name']}.part"
            partial.write_bytes(data)
            partial.rename(cached)

    def _download(self, pkg: dict[str, Any]) -> bytes:
        try:
            if self.local is not None:
                return (self.local / str(pkg["file_name"])).read_bytes()
            with urllib.request.urlopen(self.source + pkg["file_name"], timeout=FETCH_TIMEOUT) as resp:
                data: bytes = resp.read()
                return data
        except OSError as exc:
            reason = printable(f"{type(exc).__name__}: {exc}")
            raise IndexFetchError(
                f"{pkg.get('name', pkg['file_name'])} is provided by the Pyodide index, and it could not be fetched from "
                f"{self.source} ({reason}){self.describe_lock()}. The kernel fetches these on the "
                "host, outside the sandbox, so SandboxKernel.allow_net does not apply: set "
                "SandboxKernel.pyodide_index to a reachable mirror URL or a local folder holding the Pyodide packages "
                "(with their pyodide-lock.json), e.g. one made by `sandbox-kernel mirror DIR NAME...`.",
                reason,
            ) from None
