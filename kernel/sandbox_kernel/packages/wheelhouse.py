"""`%pip install` from `SandboxKernel.wheelhouse`: the guest's requirements resolved on the host (pip, offline,
from the wheelhouse only) into a folder made for them, which the sandbox may read; the guest installs the wheels.

The wheelhouse itself stays out of the sandbox's reach; its folder holds at most one copy of each wheel. The requirements come from guest code (hostile): each is
checked as `SandboxKernel.packages` entries are (`checks.pip_requirement`) before pip sees it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from sandbox_kernel import paths
from sandbox_kernel.packages.checks import PackageError, check_guest_wheels, pip_requirement
from sandbox_kernel.packages.index import guest_platform, pip_download

WHERE = "%pip install"
MAX_REMEMBERED = 256  # resolved requests a kernel remembers (a guest asking for ever more is bounded)


def _listing(wheelhouse: Path) -> list[tuple[str, int, int]]:
    """What the wheelhouse holds now (name, size, mtime): a wheel added or replaced there is resolved afresh."""
    found = []
    for entry in os.scandir(wheelhouse):
        if entry.name.endswith(".whl") and entry.is_file():
            info = entry.stat()
            found.append((entry.name, info.st_size, info.st_mtime_ns))
    return sorted(found)


def _place(staging: Path, target: Path) -> list[Path]:
    """Check that pip's download holds only guest wheels, then move them into `target` (one file per wheel name:
    what the sandbox may read never grows beyond one copy of the wheelhouse, however often the guest asks)."""
    try:
        check_guest_wheels(staging, f"{WHERE} from SandboxKernel.wheelhouse")
        target.mkdir(parents=True, exist_ok=True)
        placed = []
        for wheel in sorted(staging.glob("*.whl")):
            os.replace(wheel, target / wheel.name)  # the same name from the same wheelhouse: the same file
            placed.append(target / wheel.name)
        return placed
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class PipWheelhouse:
    """Wheels for `%pip install` from one wheelhouse, for the guest's Pyodide ABI, copied under `folder` (the one
    place of this the sandbox reads); what a requirement resolved to is remembered while the wheelhouse is
    unchanged."""

    def __init__(self, wheelhouse: Path, abi_version: str) -> None:
        self.wheelhouse = Path(os.path.abspath(wheelhouse))
        self.abi_version = abi_version
        digest = hashlib.sha256(f"{self.wheelhouse}\0{abi_version}".encode()).hexdigest()[:16]
        self.folder = paths.cache_dir() / "pip-wheelhouse" / digest
        self._resolved: dict[str, list[Path]] = {}

    def prepare(self) -> None:
        """The folder exists before the sandbox starts (its read permission names it)."""
        self.folder.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def checked(specs: list[str]) -> list[str]:
        """The requirements as pip gets them; a name, version or extra that is not one (an option, a path, a URL)
        is a PackageError that says what is allowed."""
        return [pip_requirement(spec, WHERE) for spec in specs]

    async def wheels(self, specs: list[str]) -> list[Path]:
        """The wheels of `specs` (checked) and of their dependencies, from the wheelhouse only."""
        specs = self.checked(specs)
        try:
            listing = await asyncio.to_thread(_listing, self.wheelhouse)
        except OSError as exc:
            raise PackageError(
                f"{WHERE}: SandboxKernel.wheelhouse ({self.wheelhouse}) cannot be read ({exc.strerror or exc}): set it "
                "to a folder of wheels"
            ) from None
        target = self.folder / hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]
        key = json.dumps([sorted(specs), str(target)])
        known = self._resolved.get(key)
        if known and all(await asyncio.to_thread(lambda: [w.is_file() for w in known])):
            return known
        try:
            await asyncio.to_thread(self.prepare)
            staging = Path(tempfile.mkdtemp(prefix=".download-", dir=self.folder))
        except OSError as exc:  # a read-only cache (baked into an image)
            what = f"The wheels {WHERE} {' '.join(specs)} takes from SandboxKernel.wheelhouse"
            raise PackageError(paths.cache_not_writable(what, exc, paths.FIX_PIP)) from None
        code, out = await pip_download(specs, self.wheelhouse, staging, self.abi_version)
        if code != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise PackageError(
                f"{WHERE} {' '.join(specs)}: SandboxKernel.wheelhouse ({self.wheelhouse}) has no pure-Python "
                f"(py3-none-any) or Pyodide ({guest_platform(self.abi_version)}) wheels for it and all its "
                "dependencies: add their wheels to that folder, or set SandboxKernel.wheelhouse to a folder that has "
                f"them.\npip said: {out.strip()[-1500:]}"
            )
        wheels = await asyncio.to_thread(_place, staging, target)
        if len(self._resolved) >= MAX_REMEMBERED:
            self._resolved.clear()
        self._resolved[key] = wheels
        return wheels
