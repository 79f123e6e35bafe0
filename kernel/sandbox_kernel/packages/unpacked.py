"""SandboxKernel.packages unpacked once per cache: the wheels pip resolved, checked and extracted on the host into
one folder that every sandbox mounts read-only (nothing is unpacked at a sandbox start).

The folder is made by the kernel, never by the guest (which may read it, never write it: Deno's permissions and
Landlock). Unpacking checks each wheel against the sha256 recorded when pip resolved it, every member's path (no
absolute path, no `..`, no symbolic link or special file) and every file against the wheel's own RECORD. A manifest
of every file (size, sha256) is written beside the folder, outside the guest's view; `site_problems` checks the
folder against it (names, kinds and sizes, and with `thorough` contents too), and a folder that differs is unpacked
again (`ensure_site`), never trusted.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox_kernel.packages.checks import PackageError, shown

SITE = "site"  # the unpacked folder, inside the folder pip resolved the wheels into
MANIFEST = "site.json"  # every file of SITE with its size and sha256; written last: no manifest, no folder
WHEEL_HASHES = "wheels.json"  # each resolved wheel's sha256, recorded when pip downloaded it
LOCK = ".unpack.lock"
LOCK_WAIT = 900.0  # seconds to wait for another kernel that unpacks and compiles the same packages
FORMAT = 2  # 2: with the bytecode compiled at unpacking
RECORD_HASHES = ("sha256", "sha384", "sha512")  # what a wheel's RECORD may use (PEP 376, PEP 427)
UNSIGNED = ("RECORD", "RECORD.jws", "RECORD.p7s")  # files of .dist-info that RECORD does not hash
MAX_UNPACKED_BYTES = 2 << 30  # a set of wheels larger than this once unpacked is refused (a zip bomb)


class UnpackError(PackageError):
    """A wheel that cannot be unpacked safely; the message names the wheel and the member."""


class WheelsDamaged(PackageError):
    """A cached wheel no longer matches the sha256 recorded when pip resolved it: it must be resolved again."""


def sha256_of(path: Path) -> str:
    """The file's sha256 (hex), read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_wheels(folder: Path) -> None:
    """Write WHEEL_HASHES for the wheels pip just downloaded into `folder` (the lock of this resolution)."""
    hashes = {wheel.name: sha256_of(wheel) for wheel in sorted(folder.glob("*.whl"))}
    (folder / WHEEL_HASHES).write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")


def recorded_wheels(folder: Path) -> dict[str, str] | None:
    """The wheels' recorded sha256 by file name, or None when the folder has no readable record."""
    try:
        hashes = json.loads((folder / WHEEL_HASHES).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        return None
    return {str(k): v for k, v in hashes.items()}


# ---- one wheel ----------------------------------------------------------------------------------------------------


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a wheel member may not be extracted (None when it may): its path must stay inside the folder, and it must
    be a plain file or folder."""
    name = info.filename
    if "\\" in name or "\0" in name or name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return f"{shown(name)} is an absolute path or not a plain relative path"
    if any(part in ("", ".", "..") for part in name.rstrip("/").split("/")):
        return f"{shown(name)} has an empty, '.' or '..' part"
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return f"{shown(name)} is a symbolic link or a special file"
    return None


def _record(zf: zipfile.ZipFile, wheel: str) -> dict[str, tuple[str, str]]:
    """The wheel's RECORD: path -> (hash algorithm, urlsafe base64 digest without padding)."""
    records = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(records) != 1:
        raise UnpackError(f"SandboxKernel.packages: {wheel} has {len(records)} .dist-info/RECORD files, not one")
    entries: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(zf.read(records[0]).decode("utf-8", "replace"))):
        if len(row) >= 2 and "=" in row[1]:
            algorithm, _, digest = row[1].partition("=")
            entries[row[0]] = (algorithm, digest)
    return entries


def _checked_data(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, record: dict[str, tuple[str, str]], wheel: str
) -> bytes | None:
    """A member's bytes, once they match the wheel's RECORD (zipfile checks its CRC as it reads); None for bytecode
    RECORD does not hash (PEP 376 allows it): left out, the kernel compiles its own."""
    data = zf.read(info)
    if info.filename.rsplit("/", 1)[-1] in UNSIGNED and info.filename.count("/") == 1:
        return data
    algorithm, digest = record.get(info.filename, ("", ""))
    if not algorithm and "/__pycache__/" in f"/{info.filename}" and info.filename.endswith(".pyc"):
        return None
    if algorithm not in RECORD_HASHES:
        raise UnpackError(
            f"SandboxKernel.packages: {wheel}: {shown(info.filename)} has no sha256 (or sha384, sha512) in the "
            "wheel's RECORD: the wheel is incomplete or was changed after it was built"
        )
    actual = base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode()
    if actual != digest.rstrip("="):
        raise UnpackError(
            f"SandboxKernel.packages: {wheel}: {shown(info.filename)} does not match its {algorithm} in the wheel's "
            "RECORD: the wheel is damaged or was changed after it was built"
        )
    return data


def extract_wheel(wheel: Path, site: Path, files: dict[str, tuple[int, str]], budget: list[int]) -> None:
    """Extract `wheel` into `site` (a new folder that holds only what this module wrote: no links), checking every
    member; `files` gets each file's (size, sha256), `budget` the bytes still allowed."""
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        problems = [p for p in map(member_problem, infos) if p]
        if problems:
            raise UnpackError(f"SandboxKernel.packages: {wheel.name} is refused: {'; '.join(problems[:5])}")
        budget[0] -= sum(info.file_size for info in infos)
        if budget[0] < 0:
            raise UnpackError(
                f"SandboxKernel.packages: the wheels unpack to more than {MAX_UNPACKED_BYTES >> 20} MiB; "
                f"{wheel.name} is past that limit"
            )
        record = _record(zf, wheel.name)
        for info in infos:
            target = site.joinpath(*info.filename.rstrip("/").split("/"))
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            data = _checked_data(zf, info, record, wheel.name)
            if data is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # a later wheel's file of the same name wins, as pip installs them
            with open(target, "xb") as f:
                f.write(data)
            files[info.filename] = (len(data), hashlib.sha256(data).hexdigest())


# ---- the folder ---------------------------------------------------------------------------------------------------


def folder_problems(site: Path, manifest: dict[str, list[object]], thorough: bool) -> list[str]:
    """How `site` differs from its manifest ([] when it does not): files missing, added, resized, changed (with
    `thorough`: their sha256), and any entry that is not a plain file or folder."""
    problems: list[str] = []
    seen: set[str] = set()
    for root, folders, names in os.walk(site):
        for name in [*folders, *names]:
            path = Path(root, name)
            relative = path.relative_to(site).as_posix()
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                problems.append(f"{relative} is not a plain file")
                continue
            seen.add(relative)
            expected = manifest.get(relative)
            if expected is None:
                problems.append(f"{relative} was added")
            elif info.st_size != expected[0]:
                problems.append(f"{relative} changed size")
            elif thorough and sha256_of(path) != expected[1]:
                problems.append(f"{relative} changed")
    problems += [f"{relative} is missing" for relative in sorted(set(manifest) - seen)]
    return problems


def _manifest(folder: Path) -> dict[str, list[object]] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return None
    return dict(data["files"])


def is_made(folder: Path) -> bool:
    """Whether the folder was unpacked (its manifest is written last); `site_problems` says whether it is whole."""
    return (folder / MANIFEST).is_file() and (folder / SITE).is_dir()


def site_problems(folder: Path, thorough: bool) -> list[str]:
    """How the unpacked folder differs from its manifest ([] when it does not); blocking: run it in a thread."""
    manifest = _manifest(folder)
    if manifest is None or not (folder / SITE).is_dir():
        return [f"{folder / SITE} is not unpacked"]
    return folder_problems(folder / SITE, manifest, thorough)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One kernel at a time checks or makes the folder (others wait, then find it made), for LOCK_WAIT at most."""
    deadline = time.monotonic() + LOCK_WAIT
    with open(folder / LOCK, "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PackageError(
                        f"another kernel has been unpacking SandboxKernel.packages in {folder} for more than "
                        f"{LOCK_WAIT:.0f} s; if none is running, remove {folder / LOCK}"
                    ) from None
                time.sleep(0.1)  # a poll with a deadline (the lock may be held by another process)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


Compile = Callable[[Path], bool]  # compiles a folder's modules to bytecode in place; True when all compiled


def _compiled(staging: Path, files: dict[str, tuple[int, str]], compile: Compile, say: Callable[[str], None]) -> None:
    """Compile `staging` to bytecode and put the bytecode in `files` (a wheel's own bytecode may be made again); any
    other change the compiler made is refused.
    A compiler that fails leaves the modules as they are (a sandbox then compiles what it imports), said once."""
    try:
        if not compile(staging):
            say("sandbox-kernel: some modules of SandboxKernel.packages could not be compiled to bytecode")
    except Exception as exc:
        say(f"sandbox-kernel: SandboxKernel.packages not compiled to bytecode ({exc}): sandboxes compile them")
    for path in staging.rglob("*.pyc"):  # new bytecode, or a wheel's own made again
        if path.parent.name == "__pycache__" and path.is_file() and not path.is_symlink():
            files[path.relative_to(staging).as_posix()] = (path.stat().st_size, sha256_of(path))
    problems = folder_problems(staging, {k: list(v) for k, v in files.items()}, thorough=True)
    if problems:
        raise UnpackError(f"SandboxKernel.packages: compiling changed the unpacked files: {'; '.join(problems[:3])}")


def _unpack(folder: Path, compile: Compile | None, say: Callable[[str], None]) -> None:
    """Unpack every wheel of `folder` into a new folder (compiled to bytecode with `compile`), then put it in place of
    SITE and write the manifest."""
    recorded = recorded_wheels(folder)
    wheels = sorted(folder.glob("*.whl"))
    if recorded is None or sorted(recorded) != [w.name for w in wheels]:
        raise WheelsDamaged(f"the wheels in {folder} are not those pip resolved")
    damaged = [w.name for w in wheels if sha256_of(w) != recorded[w.name]]
    if damaged:
        raise WheelsDamaged(f"{', '.join(damaged)} in {folder} changed since pip resolved them")
    (folder / MANIFEST).unlink(missing_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".site-", dir=folder))
    try:
        files: dict[str, tuple[int, str]] = {}
        budget = [MAX_UNPACKED_BYTES]
        for wheel in wheels:
            extract_wheel(wheel, staging, files, budget)
        if compile is not None:
            _compiled(staging, files, compile, say)
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UnpackError(f"SandboxKernel.packages: could not unpack the wheels in {folder}: {exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    site = folder / SITE
    if site.exists():
        old = Path(tempfile.mkdtemp(prefix=".old-", dir=folder))
        site.rename(old / SITE)
        shutil.rmtree(old, ignore_errors=True)
    staging.rename(site)
    partial = folder / f".{MANIFEST}.part"
    partial.write_text(json.dumps({"format": FORMAT, "files": files}, sort_keys=True))
    partial.rename(folder / MANIFEST)


def ensure_site(folder: Path, thorough: bool, say: Callable[[str], None], compile: Compile | None = None) -> Path:
    """The unpacked folder of the wheels pip resolved into `folder`: made once (its modules compiled by `compile`),
    checked (sizes, and contents too with `thorough`) and made again when it differs from its manifest. Blocking: run
    it in a thread.

    WheelsDamaged when the wheels themselves changed (resolve them again); UnpackError when one is unsafe.
    """
    site = folder / SITE
    with _locked(folder):
        if is_made(folder):
            problems = site_problems(folder, thorough)
            if not problems:
                return site
            say(
                f"sandbox-kernel: the unpacked SandboxKernel.packages in {site} differ from what was unpacked "
                f"({'; '.join(problems[:3])}): unpacking them again"
            )
        else:
            say(f"sandbox-kernel: unpacking SandboxKernel.packages into {site} (once per set of packages)")
        _unpack(folder, compile, say)
    return site
