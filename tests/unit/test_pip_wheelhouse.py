"""%pip install from SandboxKernel.wheelhouse, on the host: the guest's requirements checked before pip sees them,
resolved offline from the wheelhouse (dependencies too) into the folder the sandbox reads, cached per request."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandbox_kernel.jupyter.guest_services import GuestServiceDesk, PipReplays, RequestContext
from sandbox_kernel.packages import wheelhouse as wheelhouse_module
from sandbox_kernel.packages.wheelhouse import PipWheelhouse
from test_packages import make_wheel

ABI = "2026_0"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SANDBOX_KERNEL_CACHE", str(folder))
    return folder


@pytest.fixture
def house(tmp_path, cache) -> PipWheelhouse:
    folder = tmp_path / "house"
    folder.mkdir()
    make_wheel(folder, "sbk_app", requires=("sbk-dep>=1",))
    make_wheel(folder, "sbk_dep", version="1.2")
    make_wheel(folder, "sbk_native", tag="cp314-cp314-linux_x86_64")
    return PipWheelhouse(folder, ABI)


def desk(house: PipWheelhouse | None) -> GuestServiceDesk:
    context = RequestContext(allow_stdin=False, in_cell=True, execution_count=1, ident=None, parent=None)
    return GuestServiceDesk(context, None, print, None, None, PipReplays(), house)  # type: ignore[arg-type]


def ask(house: PipWheelhouse | None, *specs: str) -> dict:
    return asyncio.run(desk(house).wheelhouse_wheels({"type": "wheelhouse_wheels", "n": 1, "specs": list(specs)}))


def test_a_requirement_and_its_dependencies_come_from_the_wheelhouse_into_the_sandboxs_folder(house, cache):
    answer = ask(house, "SBK_App")
    wheels = [Path(p) for p in answer["value"]]
    assert sorted(w.name for w in wheels) == ["sbk_app-1.0-py3-none-any.whl", "sbk_dep-1.2-py3-none-any.whl"]
    assert all(w.parent.parent == house.folder and w.is_file() for w in wheels)
    assert house.folder.parent == cache / "pip-wheelhouse"  # a folder made for this, not the wheelhouse
    # another way of asking for them gives the same copies: the folder never holds more than the wheelhouse has
    assert ask(house, "sbk-app>=1", "sbk-dep")["value"] == answer["value"]
    assert sorted(p.name for p in house.folder.rglob("*") if p.is_file()) == sorted(w.name for w in wheels)


def test_the_same_request_is_served_from_the_cache_until_the_wheelhouse_changes(house, monkeypatch):
    first = ask(house, "sbk-app")["value"]
    ran = []

    async def no_pip(*args):
        ran.append(args)
        return 1, "pip must not run"

    monkeypatch.setattr(wheelhouse_module, "pip_download", no_pip)
    assert ask(house, "sbk-app")["value"] == first and ran == []
    make_wheel(house.wheelhouse, "sbk_dep", version="1.3")  # a newer dependency: resolved again
    assert ask(house, "sbk-app")["error"]["type"] == "PackageError" and len(ran) == 1


def test_a_name_the_wheelhouse_lacks_says_which_wheelhouse_and_which_setting(house):
    error = ask(house, "sbk-absent")["error"]
    assert error["type"] == "PackageError"
    message = error["message"]
    assert message.startswith(f"%pip install sbk-absent: SandboxKernel.wheelhouse ({house.wheelhouse}) has no ")
    assert "pyemscripten_2026_0_wasm32" in message and "pip said:" in message and "sbk-absent" in message


def test_a_native_wheel_in_the_wheelhouse_is_not_given_to_the_sandbox(house):
    error = ask(house, "sbk-native")["error"]
    assert error["type"] == "PackageError" and "sbk-native" in error["message"]
    assert not list(house.folder.rglob("*"))  # nothing of it reaches the sandbox's folder


HOSTILE = [
    "--index-url=http://x",
    "../x",
    "/etc/passwd",
    "http://evil.example/x-1.0-py3-none-any.whl",
    "x @ file:///etc/shadow",
    "-r",
    "--requirement=req.txt",
    "x==1.0.whl",
    "x; python_version > '3'",
]


@pytest.mark.parametrize("spec", HOSTILE)
def test_a_hostile_name_is_refused_before_pip_runs(house, monkeypatch, spec):
    ran = []

    async def record(*args):
        ran.append(args)
        return 0, ""

    monkeypatch.setattr(wheelhouse_module, "pip_download", record)
    error = ask(house, "sbk-app", spec)["error"]
    assert error["type"] == "InvalidRequirement"
    assert error["message"].startswith(f"%pip install: {spec!r}"), error["message"]
    assert ran == []  # pip never saw it, nor the good name beside it


def test_a_wheelhouse_gone_since_the_start_is_named(house, tmp_path):
    house.wheelhouse = tmp_path / "gone"
    assert ask(house, "sbk-app")["error"]["message"] == (
        f"%pip install: SandboxKernel.wheelhouse ({tmp_path / 'gone'}) cannot be read (No such file or directory): "
        "set it to a folder of wheels"
    )


def test_without_a_wheelhouse_the_request_is_refused():
    assert ask(None, "sbk-app")["error"] == {
        "type": "PackageError", "message": "SandboxKernel.wheelhouse is not set", "exception": ""
    }  # fmt: skip
