"""The kernel's `packages` per sandbox start (sandbox/preinstalled.py): made once, then checked beside a kernel's
first start (every file's contents), not again by that kernel; a failed check unpacks the folder again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_unpacked_packages import fake_compiler, wheel

from sandbox_kernel.packages import index, unpacked
from sandbox_kernel.sandbox import bytecode, preinstalled


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    wheel(tmp_path)
    unpacked.record_wheels(tmp_path)

    async def resolved(specs, wheelhouse, say, abi_version, again=False):
        return tmp_path, sorted(tmp_path.glob("*.whl"))

    monkeypatch.setattr(index, "preinstall_wheels", resolved)
    monkeypatch.setattr(bytecode, "compile_folder", fake_compiler())
    return tmp_path


def test_a_folder_is_made_once_then_checked_at_each_kernels_first_start(folder, monkeypatch):
    lines: list[str] = []
    packages = preinstalled.PreinstalledPackages(["demo"], None, lines.append)
    checked: list[bool] = []
    real = unpacked.site_problems
    monkeypatch.setattr(unpacked, "site_problems", lambda f, thorough: checked.append(thorough) or real(f, thorough))

    async def starts(kernel: preinstalled.PreinstalledPackages) -> list[bool]:
        running = []
        for _ in range(3):
            check = await kernel.prepare("2026_0")
            assert check.site == folder / unpacked.SITE
            running.append(check.running is not None)
            await kernel.passed(check)
        return running

    assert asyncio.run(starts(packages)) == [False, False, False]  # made (and compiled) at the first start
    assert (folder / unpacked.SITE / "demo" / "__pycache__").is_dir()
    assert checked == []  # made by this kernel: its contents were hashed as they were written
    assert lines == [
        f"sandbox-kernel: unpacking SandboxKernel.packages into {folder / unpacked.SITE} (once per set of packages)"
    ]
    other_kernel = preinstalled.PreinstalledPackages(["demo"], None, lines.append)
    assert asyncio.run(starts(other_kernel)) == [True, False, False]  # beside its first start, then not again
    assert checked == [True] and len(lines) == 1  # every file's contents; nothing unpacked again


def test_a_check_that_fails_names_the_problem_and_the_folder_is_made_again(folder):
    lines: list[str] = []
    asyncio.run(preinstalled.PreinstalledPackages(["demo"], None, lines.append).prepare("2026_0"))
    module = folder / unpacked.SITE / "demo" / "__init__.py"
    module.write_text(module.read_text().replace("demo", "evil"))  # the same size: only its contents tell
    packages = preinstalled.PreinstalledPackages(["demo"], None, lines.append)  # a new kernel

    async def start() -> preinstalled.SiteCheck:
        check = await packages.prepare("2026_0")
        with pytest.raises(
            preinstalled.SiteDamaged, match=r"differ from what was unpacked \(demo/__init__.py changed\)"
        ):
            await packages.passed(check)
        return check

    check = asyncio.run(start())
    assert module.read_text() == "VALUE = 'evil'\n"  # the check only tells: the launcher kills that sandbox first
    asyncio.run(packages.remake(check, "2026_0"))
    assert module.read_text() == "VALUE = 'demo'\n"
    assert lines[-1].endswith("differ from what was unpacked (demo/__init__.py changed): unpacking them again")
