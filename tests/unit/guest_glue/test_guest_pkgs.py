"""Packages in the guest (sandbox_guest.pkgs): imports a cell needs, %pip parsing, and the host's answers."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import sys

import pytest
from sandbox_guest import pipcmds, pkgs


@pytest.fixture(autouse=True)
def importable(monkeypatch, request):
    """After an install: what the fakes installed is importable, the rest is not (pipcmds.not_importable's verdict;
    its own tests are in test_guest_pipcmds.py)."""
    if "fake_pyodide" not in request.fixturenames:
        return

    def verdict(specs: list[str]) -> dict[str, str]:
        fake = request.getfixturevalue("fake_pyodide")
        names = [pkgs._canonical(spec) for spec in specs]
        return {name: "it is not installed" for name in names if name not in fake.installed}

    monkeypatch.setattr(pipcmds, "not_importable", verdict)


@pytest.fixture
def settings(monkeypatch):
    fresh = {"auto_load": True, "allow_net": [], "wheelhouse": False}
    monkeypatch.setattr(pkgs, "SETTINGS", fresh)
    return fresh


def test_missing_imports_are_the_top_level_modules_not_importable_yet(fake_pyodide, monkeypatch):
    source = "import json, sbk_absent_a.sub\nfrom sbk_absent_b.x import y\nfrom . import sibling\nimport os.path"
    assert pkgs.missing_imports(source) == ["sbk_absent_a", "sbk_absent_b"]
    assert pkgs.missing_imports("import (") == []  # the cell's own compile reports it


def test_a_matplotlib_magic_needs_matplotlib(fake_pyodide, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "matplotlib" else find_spec(name))
    assert pkgs.missing_imports("get_ipython().run_line_magic('matplotlib', 'inline')\n") == ["matplotlib"]
    assert pkgs.missing_imports("get_ipython().run_line_magic('time', 'inline')\n") == []


def test_load_for_asks_the_host_for_missing_imports_only(host, fake_pyodide, settings):
    host.answers = [{"value": []}]
    asyncio.run(pkgs.load_for("import json\nimport sbk_absent"))
    assert host.events() == [{"type": "load_packages", "imports": ["sbk_absent"], "n": 1}]
    asyncio.run(pkgs.load_for("import json"))
    settings["auto_load"] = False  # SandboxKernel.auto_load_packages = False
    asyncio.run(pkgs.load_for("import sbk_absent"))
    assert len(host.events()) == 1


@pytest.fixture
def unavailable(monkeypatch):
    monkeypatch.setattr(pkgs, "UNAVAILABLE", {})
    yield pkgs.UNAVAILABLE
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, pkgs.UnavailableFinder)]


def test_an_import_the_host_cannot_provide_fails_where_it_runs_with_the_reason(
    host, fake_pyodide, settings, unavailable
):
    """A batch that fails is asked again one import at a time: what can be had is loaded, the rest fails later."""
    refusal = {"error": {"type": "PackageError", "message": "could not be fetched (offline)"}}
    host.answers = [refusal, {"value": []}, refusal]
    asyncio.run(pkgs.load_for("import sbk_fine\ndef later():\n    import sbk_offline"))  # no exception here
    assert [e["imports"] for e in host.events()] == [["sbk_fine", "sbk_offline"], ["sbk_fine"], ["sbk_offline"]]
    assert unavailable == {"sbk_offline": "could not be fetched (offline)"}
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'sbk_offline': could not be fetched") as caught:
        import sbk_offline  # noqa: F401
    assert caught.value.name == "sbk_offline"
    with pytest.raises(ImportError, match="could not be fetched"):
        importlib.import_module("sbk_offline")
    assert importlib.util.find_spec("sbk_offline") is None  # as under CPython: a check, not an import
    asyncio.run(pkgs.load_for("import sbk_offline"))
    assert len(host.events()) == 3  # not asked again
    assert sum(isinstance(f, pkgs.UnavailableFinder) for f in sys.meta_path) == 1


def test_a_host_side_module_is_never_asked_for_and_fails_saying_which_kernel_it_is_for(
    host, fake_pyodide, settings, unavailable, monkeypatch
):
    monkeypatch.setitem(pkgs.HOST_SIDE, "sbk_host_side", "it runs in the 'Python 3 (ipykernel)' kernel")
    asyncio.run(pkgs.load_for("import sbk_host_side"))
    assert host.events() == []
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'sbk_host_side': it runs in the 'Python 3"):
        import sbk_host_side  # noqa: F401


def test_loaded_packages_are_loaded_with_pyodide_and_say_so(host, fake_pyodide, settings, capsys):
    host.answers = [{"value": ["demo", "demo-dep"]}]
    asyncio.run(pkgs.load_packages({"imports": ["demo"]}))
    calls = [r for r in fake_pyodide.record if r[0] == "loadPackage"]
    assert len(calls) == 1
    _, names, options = calls[0]
    assert names == ["demo", "demo-dep"]
    assert list(options["<js Object>"]) == ["messageCallback"]  # a JS object, made with js.Object.fromEntries
    assert capsys.readouterr() == ("", "Loading demo\n")  # Pyodide's messages are printed, to stderr
    proxy = next(r[1] for r in fake_pyodide.record if r[0] == "create_proxy")
    assert proxy.destroyed


def test_nothing_to_load_loads_nothing(host, fake_pyodide, settings):
    host.answers = [{"value": []}]
    asyncio.run(pkgs.load_packages({"packages": ["unknown"]}))
    assert fake_pyodide.record == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"error": {"type": "PackageError", "message": "numpy is provided by the Pyodide index"}}, "numpy is provided"),
        ({"error": "not a dict"}, "the host did not answer"),
        (["not", "a", "dict"], "the host did not answer"),
    ],
)
def test_a_refused_load_raises_package_load_error(host, fake_pyodide, settings, answer, message):
    host.answers = [answer]
    with pytest.raises(pkgs.PackageLoadError, match=message) as caught:
        asyncio.run(pkgs.load_packages({"imports": ["numpy"]}))
    assert isinstance(caught.value, ImportError)


def test_blocked_hosts_of_the_package_index(settings):
    assert pkgs._blocked_hosts(None) == ["pypi.org:443", "files.pythonhosted.org:443"]
    settings["allow_net"] = ["pypi.org", "files.pythonhosted.org:443"]
    assert pkgs._blocked_hosts(None) == []
    assert pkgs._blocked_hosts(["http://127.0.0.1:8000/simple", "http://mirror.example/simple"]) == [
        "127.0.0.1:8000", "mirror.example:80"
    ]  # fmt: skip
    settings["allow_net"] = ["127.0.0.1:8000"]
    assert pkgs._blocked_hosts(["http://127.0.0.1:8000/simple"]) == []


def test_pip_install_without_network_names_what_to_allow(host, fake_pyodide, settings):
    host.answers = [{"error": {"type": "PackageError", "message": "not in the Pyodide index"}}]
    with pytest.raises(pkgs.PackageLoadError, match="not in the Pyodide index"):  # Pyodide's index tried first
        asyncio.run(pkgs.pip_install(["sbk-demo"]))
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["sbk-demo"], ["https://mirror.example/simple"]))
    assert str(caught.value) == (
        "%pip needs network access to the package index, which the sandbox does not have: allow mirror.example:443 "
        "in SandboxKernel.allow_net (now: none), or preinstall packages without network with SandboxKernel.packages "
        "(resolved on the host, optionally from SandboxKernel.wheelhouse)."
    )
    assert [e["type"] for e in host.events()] == ["load_packages"]  # a named index is not replaced by Pyodide's
    assert not [r for r in fake_pyodide.record if r[0] == "micropip.install"]


def test_pip_install_from_a_reachable_index_uses_micropip(host, fake_pyodide, settings):
    settings["allow_net"] = ["pypi.org:443", "files.pythonhosted.org:443"]
    host.answers = [{"error": {"type": "PackageError", "message": "not in the Pyodide index"}}]
    asyncio.run(pkgs.pip_install(["sbk-demo==1.0"], pre=True))
    assert host.events() == [{"type": "load_packages", "packages": ["sbk-demo==1.0"], "n": 1}]
    assert fake_pyodide.record == [("micropip.install", ["sbk-demo==1.0"], None, True)]
    asyncio.run(pkgs.pip_install(["other"], ["https://pypi.org/simple"]))
    assert fake_pyodide.record[-1] == ("micropip.install", ["other"], ["https://pypi.org/simple"], False)
    assert len(host.events()) == 1  # with a named index, Pyodide's is not asked


def test_a_micropip_failure_from_the_network_explains_allow_net(host, fake_pyodide, settings):
    settings["allow_net"] = ["127.0.0.1:9"]
    fake_pyodide.pip_error = RuntimeError("TypeError: NetworkError when attempting to fetch resource.")
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["x"], ["http://127.0.0.1:9/simple"]))
    assert str(caught.value).startswith(
        "%pip needs network access to the package index, which the sandbox does not have: allow the index's host "
        "in SandboxKernel.allow_net (now: 127.0.0.1:9)"
    )
    assert str(caught.value).endswith("(RuntimeError: TypeError: NetworkError when attempting to fetch resource.)")
    fake_pyodide.pip_error = ValueError("Can't find a pure Python 3 wheel for: 'x'\nSee: https://faq\n")
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["x"], ["http://127.0.0.1:9/simple"]))
    assert str(caught.value) == (
        "%pip install x: Can't find a pure Python 3 wheel for: 'x': the package index (http://127.0.0.1:9/simple) "
        "has no pure-Python (py3-none-any) or Pyodide wheel that fits. Check the name and version; a compiled "
        "package needs a Pyodide build, from SandboxKernel.pyodide_index."
    )


def test_a_micropip_failure_behind_an_untrusted_certificate_says_so_and_names_ca_bundle(host, fake_pyodide, settings):
    settings["allow_net"] = ["127.0.0.1:8000", "127.0.0.1:8443", "pypi.org:443", "files.pythonhosted.org:443"]
    fake_pyodide.pip_error = ValueError(
        "Can't fetch metadata for 'tabulate'. Please make sure you have entered a correct package name"
    )
    fake_pyodide.probe_answers["https://127.0.0.1:8443/"] = (
        "Error: error sending request for url (https://127.0.0.1:8443/): client error (Connect): invalid peer "
        "certificate: UnknownIssuer"
    )
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["tabulate"], ["http://127.0.0.1:8000/simple", "https://127.0.0.1:8443/simple"]))
    assert str(caught.value) == (
        "certificate not trusted: the sandbox could not verify the TLS certificate of 127.0.0.1:8443 (invalid peer "
        "certificate: UnknownIssuer). If a proxy on this network inspects TLS, set SandboxKernel.ca_bundle to a PEM "
        "file of its CA certificate (or start Jupyter with SSL_CERT_FILE naming it)."
    )
    assert [r for r in fake_pyodide.record if r[0] == "probe"] == [("probe", "https://127.0.0.1:8443/")]  # https only
    fake_pyodide.probe_answers.clear()  # the index is trusted: micropip's own words stand
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["tabulate"], ["https://127.0.0.1:8443/simple"]))
    assert str(caught.value) == (
        "%pip install tabulate: Can't fetch metadata for 'tabulate'. Please make sure you have entered a correct "
        "package name (package index: https://127.0.0.1:8443/simple)."
    )
    fake_pyodide.probe_answers["https://pypi.org/"] = "Error: ...: invalid peer certificate: Expired"
    host.answers = [{"error": {"type": "PackageError", "message": "not in the Pyodide index"}}]
    with pytest.raises(
        pkgs.PackageLoadError, match=r"certificate of pypi\.org:443 \(invalid peer certificate: Expired\)"
    ):
        asyncio.run(pkgs.pip_install(["tabulate"]))  # PyPI's hosts when no index is named


MISS = {"error": {"type": "PackageError", "message": "%pip install sbk-absent: SandboxKernel.wheelhouse (/h) has no"}}


@pytest.fixture
def installed(monkeypatch, fake_pyodide):
    """What importlib.metadata finds after a load (the fake loadPackage of wheel paths installs nothing)."""
    monkeypatch.setattr(pipcmds, "installed", lambda: dict.fromkeys(fake_pyodide.installed))
    return fake_pyodide.installed


def test_with_a_wheelhouse_what_pyodides_index_lacks_comes_from_it(host, fake_pyodide, settings, installed):
    settings["wheelhouse"] = True
    installed.update({"sbk-app"})
    host.answers = [{"value": ["six"]}, {"value": ["/c/pip-wheelhouse/d/sbk_app-1.0-py3-none-any.whl", "/c/x.whl"]}]
    assert asyncio.run(pkgs.pip_install(["six", "SBK_App>=1"])) == "the Pyodide index and SandboxKernel.wheelhouse"
    assert host.events()[1] == {"type": "wheelhouse_wheels", "specs": ["SBK_App>=1"], "n": 2}  # the rest only
    loads = [r for r in fake_pyodide.record if r[0] == "loadPackage"]
    assert [names for _, names, _ in loads] == [
        ["six"],
        ["/c/pip-wheelhouse/d/sbk_app-1.0-py3-none-any.whl", "/c/x.whl"],
    ]
    assert sorted(loads[1][2]["<js Object>"]) == ["errorCallback", "messageCallback"]
    assert not [r for r in fake_pyodide.record if r[0] == "micropip.install"]


def test_a_wheel_that_did_not_install_is_an_error_with_pyodides_words(host, fake_pyodide, settings, installed):
    settings["wheelhouse"] = True
    host.answers = [{"value": []}, {"value": ["/c/sbk_app-1.0-py3-none-any.whl"]}]
    original = sys.modules["pyodide_js"].loadPackage

    async def failing(names, options):
        options["<js Object>"]["errorCallback"]("The following error occurred while loading sbk_app: bad zip")
        await original(names, options)

    sys.modules["pyodide_js"].loadPackage = failing
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["sbk-app"]))
    assert str(caught.value) == (
        "sbk-app: the wheels from SandboxKernel.wheelhouse did not install (The following error occurred while "
        "loading sbk_app: bad zip)"
    )


def test_a_name_the_wheelhouse_lacks_without_network_says_so_and_what_to_allow(host, fake_pyodide, settings):
    settings["wheelhouse"] = True
    host.answers = [{"value": []}, MISS]
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["sbk-absent"]))
    assert str(caught.value) == (
        f"{MISS['error']['message']}\nBeyond the wheelhouse, %pip needs network access to the package index, which "
        "the sandbox does not have: allow pypi.org:443, files.pythonhosted.org:443 in SandboxKernel.allow_net."
    )
    assert not [r for r in fake_pyodide.record if r[0] in ("micropip.install", "loadPackage")]


def test_a_name_the_wheelhouse_lacks_goes_to_the_index_when_the_sandbox_may_reach_it(host, fake_pyodide, settings):
    settings.update(wheelhouse=True, allow_net=["pypi.org:443", "files.pythonhosted.org:443"])
    host.answers = [{"value": []}, MISS]
    assert asyncio.run(pkgs.pip_install(["sbk-absent"])) == "micropip"
    assert fake_pyodide.record[-1] == ("micropip.install", ["sbk-absent"], None, False)


def test_a_requirement_the_host_refuses_is_never_tried_elsewhere(host, fake_pyodide, settings):
    settings.update(wheelhouse=True, allow_net=["pypi.org:443", "files.pythonhosted.org:443"])
    refusal = {"error": {"type": "InvalidRequirement", "message": "%pip install: '../x' is not a package name"}}
    host.answers = [{"value": []}, refusal]
    with pytest.raises(pkgs.PackageLoadError, match=r"^%pip install: '\.\./x' is not a package name$"):
        asyncio.run(pkgs.pip_install(["../x"]))
    assert not [r for r in fake_pyodide.record if r[0] == "micropip.install"]


def test_without_a_wheelhouse_the_host_is_not_asked_for_its_wheels(host, fake_pyodide, settings):
    host.answers = [{"value": []}]
    with pytest.raises(pkgs.PackageLoadError, match="needs network access"):
        asyncio.run(pkgs.pip_install(["sbk-app"]))
    assert [e["type"] for e in host.events()] == ["load_packages"]


def test_pip_magic_says_where_the_package_came_from(pip, host, fake_pyodide, settings, installed, capsys):
    settings["wheelhouse"] = True
    installed.add("sbk-app")
    host.answers = [{"value": []}, {"value": ["/c/sbk_app-1.0-py3-none-any.whl"]}, {"value": True}]
    pip("install sbk-app")
    assert capsys.readouterr().out == "Installed sbk-app in the sandbox (SandboxKernel.wheelhouse)\n"
    assert host.events()[-1] == {"type": "pip_installed", "specs": ["sbk-app"], "index_urls": None, "n": 3}


@pytest.fixture
def pip(host, fake_pyodide, settings):
    """The %pip line magic, with the index reachable and the host answering every question."""
    settings["allow_net"] = ["127.0.0.1:8000", "pypi.org:443", "files.pythonhosted.org:443"]
    return pkgs.PipMagics(None).pip


def test_pip_magic_parses_names_indexes_and_flags(pip, host, fake_pyodide, capsys):
    host.answers = [{"value": True}]
    pip("install -q 'sbk-demo==1.0' other --pre --index-url=http://127.0.0.1:8000/simple -i http://127.0.0.1:8000/b")
    urls = ["http://127.0.0.1:8000/simple", "http://127.0.0.1:8000/b"]
    assert fake_pyodide.record == [("micropip.install", ["sbk-demo==1.0", "other"], urls, True)]
    assert capsys.readouterr().out == "Installed sbk-demo==1.0, other in the sandbox (micropip)\n"
    assert host.events() == [{"type": "pip_installed", "specs": ["sbk-demo==1.0", "other"], "index_urls": urls, "n": 1}]


def test_pip_magic_records_the_install_and_shows_a_refusal_to_replay_it(pip, host, fake_pyodide, capsys):
    host.answers = [{"error": {"message": "no Pyodide packages"}}, {"error": {"message": "more than 50 %pip installs"}}]
    pip("install sbk-demo")
    assert host.events()[-1] == {"type": "pip_installed", "specs": ["sbk-demo"], "index_urls": None, "n": 2}
    assert capsys.readouterr().err == "[more than 50 %pip installs]\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", r"supports `%pip install NAME\[==VERSION\] ... \[--index-url URL\] \[--pre\]`, `%pip list`"),
        ("freeze", "`%pip show NAME` and `%pip uninstall \\[-y\\] NAME` only"),
        ("install", "name at least one package"),
        ("install -q", "name at least one package"),
        ("install x --user", "option '--user' is not supported here"),
        ("install -r requirements.txt", "option '-r' is not supported here"),
    ],
)
def test_pip_magic_refuses_what_it_cannot_do(pip, fake_pyodide, line, message):
    with pytest.raises(pkgs.PackageLoadError, match=message):
        pip(line)
    assert fake_pyodide.record == []


def test_pip_magic_where_run_sync_is_not_available(pip, fake_pyodide):
    fake_pyodide.can_run_sync = False
    with pytest.raises(pkgs.PackageLoadError, match=r"use `import micropip; await micropip.install\(...\)`"):
        pip("install x")


def test_a_lock_entry_whose_file_the_host_cannot_fetch_comes_from_the_package_index(host, fake_pyodide, settings):
    """micropip prefers a name in Pyodide's lock over the index's wheel; the lock's file is unreachable here, so
    micropip sees the lock without it (and takes PyPI's wheel), as SandboxKernel.packages does on the host."""
    settings["allow_net"] = ["pypi.org:443", "files.pythonhosted.org:443"]
    fake_pyodide.lock.update({"sbk-lockpure": {"version": "1.0"}, "sbk-other": {"version": "1.0"}})
    host.answers = [{"error": {"type": "PackageError", "message": "sbk-lockpure is provided by the Pyodide index"}}]
    assert asyncio.run(pkgs.pip_install(["sbk-lockpure"])) == "micropip"
    assert fake_pyodide.record == [("micropip.install", ["sbk-lockpure"], None, False)]
    assert fake_pyodide.installed == {"sbk-lockpure"}
    assert set(fake_pyodide.layer.lockfile_packages) == {"sbk-lockpure", "sbk-other"}  # micropip's own view, back


def test_micropip_looks_in_the_lock_through_the_host_and_a_missing_file_means_the_index(host, fake_pyodide, settings):
    """A lock entry micropip would choose (a requirement of a wheel, say) is fetched by the host while micropip
    resolves, before it installs anything: one the host cannot fetch is not in micropip's view, so the index gives
    it; one it can is loaded through the host (Pyodide's notes on stderr), never by micropip's own loadPackage."""
    settings["allow_net"] = ["pypi.org:443", "files.pythonhosted.org:443"]
    fake_pyodide.lock.update({"sbk-lockdep": {"version": "1.0"}, "sbk-fine": {"version": "1.0"}})
    refusal = {"error": {"type": "PackageError", "message": "sbk-lockdep could not be fetched"}}
    host.answers = [{"value": []}, refusal]  # not given by name at first (as a requirement of a wheel would not be)
    assert asyncio.run(pkgs.pip_install(["sbk-lockdep"])) == "micropip"
    assert [e.get("packages") for e in host.events()] == [["sbk-lockdep"], ["sbk-lockdep"]]
    assert [r[0] for r in fake_pyodide.record] == ["micropip.install"]
    assert fake_pyodide.installed == {"sbk-lockdep"}  # from the index
    host.answers = [{"value": []}, {"value": ["sbk-fine"]}, {"value": ["sbk-fine"]}]
    assert asyncio.run(pkgs.pip_install(["sbk-fine"])) == "micropip"
    assert [e.get("packages") for e in host.events()[2:]] == [["sbk-fine"]] * 3  # asked, fetched, then loaded
    assert [r[0] for r in fake_pyodide.record][1:] == ["micropip.install", "create_proxy", "loadPackage", "destroy"]
    assert "sbk-fine" in fake_pyodide.installed


def test_a_package_neither_index_can_give_names_it_why_and_the_setting(host, fake_pyodide, settings):
    settings["allow_net"] = ["pypi.org:443", "files.pythonhosted.org:443"]
    fake_pyodide.lock["sbk-compiled"] = {"version": "1.0"}
    reason = "sbk-compiled is provided by the Pyodide index, and it could not be fetched (...): set SandboxKernel.pyodide_index"
    host.answers = [{"error": {"type": "PackageError", "message": reason}}]
    fake_pyodide.pip_error = ValueError("Can't find a pure Python 3 wheel for: 'sbk-compiled'\nSee: https://faq\n")
    with pytest.raises(pkgs.PackageLoadError) as caught:
        asyncio.run(pkgs.pip_install(["sbk-compiled"]))
    assert str(caught.value) == (
        f"{reason}\nThe package index (https://pypi.org/simple) does not give it either: Can't find a pure Python 3 "
        "wheel for: 'sbk-compiled'"
    )


def test_pip_magic_says_installed_only_for_what_python_can_import(pip, host, fake_pyodide, capsys, monkeypatch):
    async def installs_nothing(specs, index_urls=None, pre=False):
        fake_pyodide.record.append(("micropip.install", specs, index_urls, pre))

    monkeypatch.setattr(sys.modules["micropip"], "install", installs_nothing)
    host.answers = [{"value": []}]
    with pytest.raises(pkgs.PackageLoadError) as caught:
        pip("install sbk-ghost")
    assert str(caught.value) == (
        "%pip install: sbk-ghost did not install: it is not installed (after installing from micropip). %pip list "
        "shows what is installed."
    )
    assert capsys.readouterr().out == ""  # no "Installed" line
    assert [e["type"] for e in host.events()] == ["load_packages"]  # not recorded for replay after a restart
