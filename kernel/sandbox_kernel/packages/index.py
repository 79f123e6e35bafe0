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
import ssl
import sys
import tempfile
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sandbox_kernel import paths
from sandbox_kernel.packages import unpacked
from sandbox_kernel.packages.checks import (
    PackageError,
    check_guest_wheels,
    check_lock_entries,
    pip_requirement,
    printable,
    shown,
)

GUEST_PYTHON = "3.14"
ABI_TAG = "cp314"
FETCH_TIMEOUT = 15.0  # seconds per Pyodide package download


class IndexFetchError(PackageError):
    """A file the Pyodide index could not give; `reason` is the short why (for reports that list many)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def default_pyodide_index() -> str:
    return f"https://cdn.jsdelivr.net/pyodide/v{paths.pyodide_version()}/full/"


def index_cache(source: str) -> Path:
    """Where the files of the Pyodide index `source` (a pyodide_index value) are kept on the host."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    return paths.cache_dir() / "pyodide-packages" / paths.pyodide_version() / digest


def is_pinned_cdn(value: str) -> bool:
    """Whether the Pyodide index `value` is the pinned CDN, whose lock is Pyodide's own."""
    return value.rstrip("/") == default_pyodide_index().rstrip("/")


def offline_index(value: str) -> bool:
    """Whether the Pyodide index `value` is read without the network: the pinned CDN (its lock is Pyodide's own)
    or a folder on this machine."""
    if value.startswith(("http://", "https://")):
        return is_pinned_cdn(value)
    return True


def guest_platform(abi_version: str) -> str:
    """The PEP 783 platform tag of wheels built for the guest's Pyodide ABI (from its lock file's info)."""
    return f"pyemscripten_{abi_version}_wasm32"


# ---- names, versions and files from settings, indexes and lock files: checked before pip or a path sees them ----


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
    """Check the download holds only guest wheels, record their sha256, then move it into place in one rename."""
    try:
        check_guest_wheels(staging, "SandboxKernel.packages")
    except PackageError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    unpacked.record_wheels(staging)
    (staging / ".complete").write_text("ok\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return sorted(folder.glob("*.whl"))


def resolution_folder(specs: list[str], wheelhouse: Path | None, abi_version: str) -> Path:
    """The cache folder of one `SandboxKernel.packages` request (its checked specs, wheelhouse and guest ABI)."""
    request = {"specs": specs, "wheelhouse": str(wheelhouse) if wheelhouse else None, "abi": abi_version}
    key = json.dumps(request, sort_keys=True)
    return paths.cache_dir() / "packages" / hashlib.sha256(key.encode()).hexdigest()[:16]


def is_resolved(folder: Path) -> bool:
    """Whether pip resolved this request into `folder` before (its wheels and their recorded sha256 are there)."""
    return (folder / ".complete").is_file() and (folder / unpacked.WHEEL_HASHES).is_file()


async def preinstall_wheels(
    specs: list[str], wheelhouse: Path | None, say: Callable[[str], None], abi_version: str, again: bool = False
) -> tuple[Path, list[Path]]:
    """Wheels (with dependencies) for `SandboxKernel.packages`, cached by the request's digest, with their sha256
    recorded (`unpacked.WHEEL_HASHES`); `again`: resolved anew even when cached (a cached wheel changed)."""
    specs = [pip_requirement(spec, "SandboxKernel.packages") for spec in specs]
    folder = resolution_folder(specs, wheelhouse, abi_version)
    if not again and is_resolved(folder):
        return folder, sorted(folder.glob("*.whl"))
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".download-", dir=folder.parent))
    except OSError as exc:  # a read-only cache (baked into an image) that lacks them
        what = f"The wheels of SandboxKernel.packages {specs}" + (
            f" (from the wheelhouse {wheelhouse})" if wheelhouse else ""
        )
        raise PackageError(paths.cache_not_writable(what, exc, paths.FIX_KERNEL_SETTINGS)) from None
    say(f"sandbox-kernel: resolving SandboxKernel.packages {specs} on the host into {folder}")
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
        from urllib.request import url2pathname  # here and for downloads only: it loads http.client

        folder = Path(url2pathname(parts.path))
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


file_sha256 = unpacked.sha256_of  # a cached file's digest, read in blocks


def _tls_hint(error: BaseException) -> str:
    """For a certificate the host does not trust: the setting that adds a CA (a proxy that inspects TLS)."""
    if "CERTIFICATE_VERIFY_FAILED" not in str(error):
        return ""
    return ": certificate not trusted; if a proxy on this network inspects TLS, set SandboxKernel.ca_bundle to its CA"


class PyodideIndex:
    """Pyodide's compiled packages: the lock file says what exists, files are fetched on the host.

    `source` is an http(s) URL, a `file://` URL or a folder. The index's own `pyodide-lock.json` is used
    when it has one (Pyodide's bundled lock otherwise, noted in `notes`); every file is checked against
    the lock's sha256 each time it is used, so a changed or damaged cached file is fetched again.
    """

    def __init__(
        self,
        source: str,
        cache: Path,
        bundled_lock: Path,
        setting: str = "SandboxKernel.pyodide_index",
        ca_pem: bytes | None = None,
    ) -> None:
        self.source, self.local = _index_location(source, setting)
        self.cache = cache
        self._ca_pem = ca_pem
        self._tls_context: ssl.SSLContext | None = None
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

    @property
    def _tls(self) -> ssl.SSLContext:
        """The host's own trust (SSL_CERT_FILE included), and SandboxKernel.ca_bundle's certificates with it; made on
        first use (~20 ms: a sandbox's start from the pinned or a local index never needs it)."""
        if self._tls_context is None:
            self._tls_context = ssl.create_default_context()
            if self._ca_pem:
                self._tls_context.load_verify_locations(cadata=self._ca_pem.decode("ascii"))
        return self._tls_context

    def _own_lock(self, value: str, bundled_text: str) -> str | None:
        """The index's pyodide-lock.json, or None (with a note) where it has none."""
        if self.local is not None:
            own = self.local / LOCK_NAME
            if own.is_file():
                return own.read_text()
        elif is_pinned_cdn(value):
            return bundled_text  # the CDN of the pinned version: its lock is the one Pyodide ships
        else:
            from urllib.request import urlopen

            try:
                with urlopen(self.source + LOCK_NAME, timeout=LOCK_TIMEOUT, context=self._tls) as resp:
                    return str(resp.read().decode())
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    self.notes.append(f"could not read {self.source}{LOCK_NAME} (HTTP {exc.code})")
                    return None
            except (OSError, UnicodeDecodeError) as exc:
                self.notes.append(
                    printable(f"could not read {self.source}{LOCK_NAME} ({type(exc).__name__}: {exc}){_tls_hint(exc)}")
                )
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
        changed under the same name) is fetched again rather than loaded. A cache that cannot be written (baked
        into an image) is said before anything is downloaded.
        """
        for name in self.closure(names):
            pkg = self.packages[name]
            cached = self.cache / pkg["file_name"]
            if cached.is_file() and file_sha256(cached) == pkg["sha256"]:
                continue
            if not paths.cache_writable(self.cache):
                what = f"{name} (from {self.source})"
                raise PackageError(
                    paths.read_only_cache(what, self.cache, "this user may not write there", paths.FIX_PYODIDE_PACKAGE)
                )
            data = self._download(pkg)
            digest = hashlib.sha256(data).hexdigest()
            if digest != pkg["sha256"]:
                raise PackageError(
                    f"{pkg['file_name']} from {self.source} has sha256 {digest}, but the lock file says "
                    f"{pkg['sha256']}{self.describe_lock()}"
                )
            try:
                self._keep(cached, data)
            except OSError as exc:
                raise PackageError(paths.cache_not_writable(f"{name} (from {self.source})", exc)) from None

    def _keep(self, cached: Path, data: bytes) -> None:
        """Put a checked file into the cache in one rename (over a damaged one)."""
        self.cache.mkdir(parents=True, exist_ok=True)
        partial = self.cache / f".{cached.name}.part"
        partial.write_bytes(data)
        partial.rename(cached)

    def _download(self, pkg: dict[str, Any]) -> bytes:
        from urllib.request import urlopen

        try:
            if self.local is not None:
                return (self.local / str(pkg["file_name"])).read_bytes()
            with urlopen(self.source + pkg["file_name"], timeout=FETCH_TIMEOUT, context=self._tls) as resp:
                data: bytes = resp.read()
                return data
        except OSError as exc:
            reason = printable(f"{type(exc).__name__}: {exc}")
            name = str(pkg.get("name", pkg["file_name"]))
            raise IndexFetchError(
                f"{name} is provided by the Pyodide index, and it could not be fetched from {self.source} "
                f"({reason}){_tls_hint(exc)}{self.describe_lock()}. {_fixes(name, str(pkg['file_name']))}",
                reason,
            ) from None


def _fixes(name: str, file_name: str) -> str:
    """What makes a Pyodide package the index could not give available: a pure-Python one also comes from the
    package index (SandboxKernel.packages on the host, or %pip in the sandbox); any, from a reachable Pyodide index."""
    mirror = (
        "set SandboxKernel.pyodide_index to a reachable mirror URL or a local folder holding the Pyodide packages "
        "(with their pyodide-lock.json), e.g. one made by `sandbox-kernel mirror DIR NAME...`."
    )
    host_side = "The kernel fetches these on the host, outside the sandbox, so SandboxKernel.allow_net does not apply"
    if not file_name.endswith("-none-any.whl"):
        return f"{host_side}: {mirror}"
    return (
        f"{name} is pure Python, so a wheel from the package index (PyPI) works as well: add {name!r} to "
        f"SandboxKernel.packages (resolved on the host), or run `%pip install {name}` with pypi.org:443 and "
        f"files.pythonhosted.org:443 in SandboxKernel.allow_net (fetched by the sandbox). Or {mirror} "
        f"({host_side} to them.)"
    )
