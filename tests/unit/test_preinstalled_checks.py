"""The kernel's `packages` per sandbox start (sandbox/preinstalled.py): made once, then checked beside each start,
contents at the kernel's first start and sizes later; a failed check unpacks the folder again."""

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


def test_a_folder_is_made_at_the_first_start_then_checked_beside_each_start(folder, monkeypatch):
    lines: list[str] = []
    packages = preinstalled.PreinstalledPackages(["demo"], None, lines.append)
    checked: list[bool] = []
    real = unpacked.site_problems
    monkeypatch.setattr(unpacked, "site_problems", lambda f, thorough: checked.append(thorough) or real(f, thorough))

    async def starts() -> None:
        first = await packages.prepare("2026_0")
        assert first.running is None and (first.site / "demo" / "__pycache__").is_dir()  # made (and compiled) now
        for _ in range(2):
            check = await packages.prepare("2026_0")
            assert check.site == folder / unpacked.SITE and check.running is not None
            await packages.passed(check)

    asyncio.run(starts())
    assert checked == [False, False]  # made by this kernel: its contents were hashed as they were written
    assert lines == [
        f"sandbox-kernel: unpacking SandboxKernel.packages into {folder / unpacked.SITE} (once per set of packages)"
    ]
    other_kernel = preinstalled.PreinstalledPackages(["demo"], None, lines.append)

    async def later() -> None:
        for _ in range(2):
            await other_kernel.passed(await other_kernel.prepare("2026_0"))

    asyncio.run(later())
    assert checked == [False, False, True, False]  # another kernel: contents at its first start, sizes after


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
