"""Packages in the guest: Pyodide packages a cell imports, and `%pip` through micropip."""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class

from . import _host
from ._protocol import Event
from .cleantb import CleanTraceback

MATPLOTLIB_MAGIC = "run_line_magic('matplotlib'"  # how IPython transforms a %matplotlib line
SETTINGS: dict[str, Any] = {"auto_load": True, "allow_net": [], "wheelhouse": False}


class PackageLoadError(CleanTraceback, ImportError):
    """A package the cell needs could not be provided; the message says what to configure."""


class WheelhouseMiss(PackageLoadError):
    """SandboxKernel.wheelhouse has no wheels for a requirement (the package index may still have them)."""


def missing_imports(source: str) -> list[str]:
    """Top-level modules that `source` imports and that are not importable yet."""
    from pyodide.code import find_imports

    try:
        with warnings.catch_warnings():  # the cell's own compile shows them, under the cell's name
            warnings.simplefilter("ignore")
            names = set(find_imports(source))
    except SyntaxError:
        return []
    if MATPLOTLIB_MAGIC in source:  # %matplotlib needs the package as `import matplotlib` does
        names.add("matplotlib")
    tops = {name.split(".")[0] for name in names}  # find_spec("a.b") raises while "a" is missing
    return sorted(top for top in tops if importlib.util.find_spec(top) is None)


class ModuleNotFoundError(CleanTraceback, builtins.ModuleNotFoundError):
    """The builtin ModuleNotFoundError (same name, caught the same), shown without the glue's frames."""


UNAVAILABLE: dict[str, str] = {}  # top-level module -> why the host could not provide it
# Modules of the host's side, which no sandbox has: why, in the words a user of the wrong kernel needs.
HOST_SIDE = {
    "sandbox_kernel": (
        "sandbox_kernel is the host's package (the kernel, the agent API, MCP) and never runs in the sandbox; a "
        "notebook that starts sandboxes (notebooks/agents.ipynb, notebooks/files_and_network.ipynb) is for the "
        "'Python 3 (ipykernel)' kernel"
    ),
}


async def load_for(source: str) -> None:
    """Before a cell runs: have the host fetch the Pyodide packages it imports, then load them.

    A module that cannot be had fails only where it is imported, as under CPython (`try: import simplejson`
    `except ImportError: import json` works; so does an import in a function never called): with a
    ModuleNotFoundError that carries the reason (see `UnavailableFinder`).
    """
    if not SETTINGS["auto_load"]:
        return
    missing = [name for name in missing_imports(source) if name not in UNAVAILABLE]  # asked once per sandbox
    for name in [name for name in missing if name in HOST_SIDE]:
        missing.remove(name)
        _unavailable(name, HOST_SIDE[name])
    if not missing:
        return
    try:
        await load_packages({"imports": missing})
    except PackageLoadError as exc:
        if len(missing) == 1:
            _unavailable(missing[0], str(exc))
            return
        for name in missing:  # one at a time: those that can be had are loaded
            try:
                await load_packages({"imports": [name]})
            except PackageLoadError as one:
                _unavailable(name, str(one))


def _unavailable(name: str, reason: str) -> None:
    UNAVAILABLE[name] = reason
    if not any(isinstance(finder, UnavailableFinder) for finder in sys.meta_path):
        sys.meta_path.append(UnavailableFinder())


class UnavailableFinder:
    """The last finder: an import statement (or import_module) of a module the host could not provide raises
    ModuleNotFoundError with the host's reason; `importlib.util.find_spec` gets None, as under CPython."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        __tracebackhide__ = True
        reason = UNAVAILABLE.get(fullname)
        if reason is None or not _importing():
            return None
        raise ModuleNotFoundError(f"No module named {fullname!r}: {reason}", name=fullname)


def _importing() -> bool:
    """Whether the import system's own search called this finder (not importlib.util.find_spec): the caller of
    importlib._bootstrap._find_spec is then its _find_and_load_unlocked."""
    try:
        caller = sys._getframe(3)  # _importing <- find_spec <- _find_spec <- its caller
    except ValueError:  # a shallower stack: not the import system
        return False
    return caller.f_code.co_name == "_find_and_load_unlocked"


def _object(pairs: Any) -> Any:
    import js

    return js.Object.fromEntries(pairs)


def _pip_help_for(error: BaseException, index_urls: list[str] | None) -> str:
    text = f"{type(error).__name__}: {error}"
    if any(mark in text for mark in ("net access", "NotCapable", "NetworkError", "AbortError", "Failed to fetch")):
        hosts = "the index's host" if index_urls else "pypi.org:443 and files.pythonhosted.org:443"
        return (
            f"%pip needs network access to the package index, which the sandbox does not have: allow {hosts} in "
            f"SandboxKernel.allow_net (now: {', '.join(SETTINGS['allow_net']) or 'none'}), or preinstall packages "
            "without network with SandboxKernel.packages (resolved on the host, optionally from "
            f"SandboxKernel.wheelhouse). ({text})"
        )
    return text


# Why a TLS connection to `url` failed ('' when it did not): micropip drops the cause of a failed fetch, and the
# JavaScript error's `cause` holds Deno's words ("... invalid peer certificate: UnknownIssuer").
_TLS_PROBE = """(async (url) => {
  try {
    await fetch(url, { method: "HEAD", redirect: "manual", signal: AbortSignal.timeout(15000) });
    return "";
  } catch (e) {
    return String((e && e.cause) || e);
  }
})"""
DEFAULT_INDEXES = ["https://pypi.org/simple", "https://files.pythonhosted.org/"]


async def untrusted_certificate(index_urls: list[str] | None) -> str | None:
    """The message for an index whose TLS certificate the sandbox does not trust (a proxy inspecting TLS), or None."""
    from urllib.parse import urlsplit

    from pyodide.code import run_js

    probe = run_js(_TLS_PROBE)
    for url in index_urls or DEFAULT_INDEXES:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            continue
        why = str(await probe(f"https://{parts.netloc}/"))
        if "certificate" in why.lower():
            pieces = why.split(": ")  # "Error: error sending request for url (...): ...: invalid peer ..."
            first = next(i for i, part in enumerate(pieces) if "certificate" in part.lower())
            detail = ": ".join(pieces[first:])[:200]
            return (
                f"certificate not trusted: the sandbox could not verify the TLS certificate of {parts.hostname}:"
                f"{parts.port or 443} ({detail}). If a proxy on this network inspects TLS, set "
                "SandboxKernel.ca_bundle to a PEM file of its CA certificate (or start Jupyter with SSL_CERT_FILE "
                "naming it)."
            )
    return None


async def load_packages(request: dict[str, Any]) -> list[str]:
    """Have the host fetch Pyodide packages (by import or by name), then load them; returns the names loaded (those
    asked for that the index has, with their dependencies)."""
    names = _fetch_packages(request)
    if names:
        await _pyodide_load(names)
    return [str(name) for name in names]


def _fetch_packages(request: dict[str, Any]) -> list[Any]:
    """Have the host fetch Pyodide packages into the sandbox (not loaded yet): the names it gave, or
    PackageLoadError with its reason."""
    reply = _host.request({"type": Event.LOAD_PACKAGES, **request})
    if not isinstance(reply, dict) or "error" in reply:
        error = reply.get("error") if isinstance(reply, dict) else None
        raise PackageLoadError(error.get("message") if isinstance(error, dict) else "the host did not answer")
    return list(reply.get("value") or [])


async def _pyodide_load(names: list[str], on_error: Callable[[str], None] | None = None) -> None:
    """Pyodide's loadPackage (package names or wheel paths); its notes go to stderr, never the code's output, and its
    errors to `on_error` (default: Pyodide's own, the sandbox's log)."""
    import pyodide_js
    from pyodide.ffi import create_proxy, to_js

    proxies: dict[str, Any] = {"messageCallback": create_proxy(lambda message: print(message, file=sys.stderr))}
    if on_error is not None:
        proxies["errorCallback"] = create_proxy(on_error)
    try:
        await pyodide_js.loadPackage(to_js(names), to_js(proxies, dict_converter=_object))
    finally:
        for proxy in proxies.values():
            proxy.destroy()


def _canonical(requirement: str) -> str:
    """A requirement's project name as the index names it (`Six>=1.1` -> `six`; pipcmds.project_name)."""
    from .pipcmds import project_name

    return project_name(requirement)


def _blocked_hosts(index_urls: list[str] | None) -> list[str]:
    """The index hosts (host:port) that SandboxKernel.allow_net does not let the sandbox reach."""
    from urllib.parse import urlsplit

    urls = index_urls or ["https://pypi.org/simple", "https://files.pythonhosted.org/"]
    allowed = set(SETTINGS["allow_net"])
    blocked = []
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if host not in allowed and f"{host}:{port}" not in allowed:
            blocked.append(f"{host}:{port}")
    return blocked


async def install_from_wheelhouse(specs: list[str]) -> None:
    """Have the host resolve `specs` (with their dependencies) from SandboxKernel.wheelhouse, then install its wheels
    as Pyodide installs a wheel: WheelhouseMiss when the wheelhouse lacks them, PackageLoadError for a spec the host
    refuses (not a requirement) or a wheel that did not install."""
    reply = _host.request({"type": Event.WHEELHOUSE_WHEELS, "specs": specs})
    if not isinstance(reply, dict) or "error" in reply:
        error = reply.get("error") if isinstance(reply, dict) else None
        message = str(error.get("message")) if isinstance(error, dict) else "the host did not answer"
        raise (WheelhouseMiss if isinstance(error, dict) and error.get("type") == "PackageError" else PackageLoadError)(
            message
        )
    wheels = [str(wheel) for wheel in reply.get("value") or []]
    errors: list[str] = []

    def failed(message: str) -> None:
        errors.append(str(message))
        print(message, file=sys.stderr)

    await _pyodide_load(wheels, failed)
    from .pipcmds import installed

    present = installed()
    absent = [spec for spec in specs if _canonical(spec) not in present]
    if absent:
        raise PackageLoadError(
            f"{', '.join(absent)}: the wheels from SandboxKernel.wheelhouse did not install"
            + (f" ({' '.join(errors)[-1000:]})" if errors else "")
        )


async def _from_pyodide_index(specs: list[str]) -> tuple[set[str], dict[str, str]]:
    """Load what Pyodide's index has of `specs` (through the host): the canonical names loaded, and for each the host
    could not fetch, why (a failed batch is asked again one name at a time, so that one file's absence names it)."""
    try:
        return {_canonical(name) for name in await load_packages({"packages": specs})}, {}
    except PackageLoadError as exc:
        if len(specs) == 1:
            return set(), {_canonical(specs[0]): str(exc)}
    loaded: set[str] = set()
    unfetched: dict[str, str] = {}
    for spec in specs:
        try:
            loaded |= {_canonical(name) for name in await load_packages({"packages": [spec]})}
        except PackageLoadError as exc:
            unfetched[_canonical(spec)] = str(exc)
    return loaded, unfetched


class _ReachableLock(dict):  # type: ignore[type-arg]
    """Pyodide's lock file as micropip looks a requirement up in it (`get`, while it resolves, before it installs
    anything): an entry whose files the host cannot fetch is absent, so micropip takes the package index's wheel;
    the reasons are kept in `unfetched` (for the message if the index lacks it too)."""

    def __init__(self, lock: dict[str, Any], unfetched: dict[str, str]) -> None:
        super().__init__(lock)
        self.unfetched = unfetched
        self.fetched: set[str] = set()

    def get(self, name: Any, default: Any = None) -> Any:
        if name not in self or name in self.unfetched:
            return default
        if name not in self.fetched:
            try:
                _fetch_packages({"packages": [str(name)]})  # fetched, not yet loaded
            except PackageLoadError as exc:
                self.unfetched[str(name)] = str(exc)
                return default
            self.fetched.add(name)
        return super().get(name, default)


@contextlib.contextmanager
def _micropip_lock_view(unfetched: dict[str, str]) -> Iterator[None]:
    """During one micropip.install: micropip sees Pyodide's lock file without the entries whose files the host cannot
    fetch (`_ReachableLock`; `unfetched` grows with them), and loads the others through the host, with Pyodide's
    notes on stderr (micropip alone would print "Failed to load ..." and go on as if it had them)."""
    from micropip._compat import compatibility_layer as layer  # micropip 0.11.1's seam to Pyodide (pinned)

    saved = layer.lockfile_packages, layer.loadPackage

    async def load_through_host(names: Any, *options: Any) -> None:
        await load_packages({"packages": [str(name) for name in (names.to_py() if hasattr(names, "to_py") else names)]})

    layer.lockfile_packages = _ReachableLock(saved[0], unfetched)
    layer.loadPackage = staticmethod(load_through_host)
    try:
        yield
    finally:
        layer.lockfile_packages, layer.loadPackage = saved


async def _micropip_install(
    specs: list[str], index_urls: list[str] | None, pre: bool, unfetched: dict[str, str]
) -> None:
    """micropip.install, with the lock's packages whose files the host cannot fetch taken from the package index
    (`unfetched` grows with those found on the way); a failure says which package, why and what to set."""
    import micropip

    try:
        with _micropip_lock_view(unfetched):
            await micropip.install(specs, index_urls=index_urls, pre=pre)
    except PackageLoadError:
        raise
    except Exception as exc:
        # micropip says "Can't fetch metadata ... make sure you have entered a correct package name" for any
        # failed fetch: an untrusted certificate is told as such.
        untrusted = await untrusted_certificate(index_urls)
        raise PackageLoadError(untrusted or _not_on_the_index(exc, specs, index_urls, unfetched)) from None


def _micropips_index(index_urls: list[str] | None) -> list[str]:
    """The package index micropip used: the line's, else its own default (micropip.set_index_urls may change it)."""
    if index_urls:
        return index_urls
    import micropip

    manager = getattr(micropip, "_package_manager_singleton", None)
    return [str(url) for url in getattr(manager, "index_urls", None) or DEFAULT_INDEXES[:1]]


def _not_on_the_index(
    error: BaseException, specs: list[str], index_urls: list[str] | None, unfetched: dict[str, str]
) -> str:
    """Why micropip failed, with the setting that helps: for a package the Pyodide index has but could not give,
    the host's reason first."""
    help_text = _pip_help_for(error, index_urls)
    if help_text.startswith("%pip needs network access") or not isinstance(error, ValueError):
        return help_text
    where = ", ".join(_micropips_index(index_urls))
    said = " ".join(str(error).split("\n", 1)[0].split())
    named = [reason for name, reason in unfetched.items() if re.search(f"'{re.escape(name)}[^-_.a-z0-9]", said.lower())]
    if named:
        return f"{' '.join(named)}\nThe package index ({where}) does not give it either: {said}"
    if "pure Python 3 wheel" not in said:
        return f"%pip install {' '.join(specs)}: {said.rstrip('.')} (package index: {where})."
    return (
        f"%pip install {' '.join(specs)}: {said.rstrip('.')}: the package index ({where}) has no pure-Python "
        "(py3-none-any) or Pyodide wheel that fits. Check the name and version; a compiled package needs a Pyodide "
        "build, from SandboxKernel.pyodide_index."
    )


async def pip_install(specs: list[str], index_urls: list[str] | None = None, pre: bool = False) -> str:
    """Install `specs`; returns where they came from. Without an index on the line: Pyodide's index (via the host),
    then SandboxKernel.wheelhouse (via the host), then the package index with micropip (needs allow_net); a lock
    entry whose file the host cannot fetch comes from the package index then. PackageLoadError unless every spec
    (and what it requires) is importable afterwards."""
    source = await _install(specs, index_urls, pre)
    from .pipcmds import not_importable

    broken = not_importable(specs)
    if broken:
        raise PackageLoadError(
            "%pip install: "
            + "; ".join(f"{name} did not install: {why}" for name, why in broken.items())
            + f" (after installing from {source}). %pip list shows what is installed."
        )
    return source


async def _install(specs: list[str], index_urls: list[str] | None, pre: bool) -> str:
    blocked = _blocked_hosts(index_urls)
    unfetched: dict[str, str] = {}
    sources: list[str] = []
    if not index_urls:  # an index named on the line is used as asked; otherwise Pyodide's index comes first
        loaded, unfetched = await _from_pyodide_index(specs)
        rest = [spec for spec in specs if _canonical(spec) not in loaded]  # those Pyodide's index did not give
        sources = ["the Pyodide index"] if len(rest) < len(specs) else []
        index_error = PackageLoadError("\n".join(dict.fromkeys(unfetched.values()))) if unfetched else None
        if not rest:
            return "the Pyodide index"  # all installed: the package index is not needed
        if SETTINGS.get("wheelhouse"):
            try:
                await install_from_wheelhouse(rest)
                return " and ".join([*sources, "SandboxKernel.wheelhouse"])
            except WheelhouseMiss as miss:
                if blocked:
                    raise index_error or PackageLoadError(
                        f"{miss}\nBeyond the wheelhouse, %pip needs network access to the package index, which the "
                        f"sandbox does not have: allow {', '.join(blocked)} in SandboxKernel.allow_net."
                    ) from None
        elif index_error is not None and blocked:
            raise index_error
    if blocked:
        raise PackageLoadError(
            f"%pip needs network access to the package index, which the sandbox does not have: allow "
            f"{', '.join(blocked)} in SandboxKernel.allow_net (now: {', '.join(SETTINGS['allow_net']) or 'none'}), "
            "or preinstall packages without network with SandboxKernel.packages (resolved on the host, optionally "
            "from SandboxKernel.wheelhouse)."
        )
    await _micropip_install(specs, index_urls, pre, unfetched)
    return "micropip"


def _forget(removed: list[str]) -> None:
    """Tell the host what %pip uninstall removed: not installed again after a restart."""
    if removed:
        reply = _host.request({"type": Event.PIP_UNINSTALLED, "names": removed})
        if isinstance(reply, dict) and "error" in reply:
            print(f"[{reply['error'].get('message')}]", file=sys.stderr)


def _warn(text: str) -> None:
    print(text, file=sys.stderr)


def _ask(question: str) -> str:
    """pip's question before it removes anything, where the frontend answers prompts."""
    from IPython.core.error import StdinNotImplementedError

    from .pipcmds import PipUsageError

    try:
        return input(question)
    except StdinNotImplementedError:
        raise PipUsageError(
            "%pip uninstall asks before it removes anything, but this frontend does not answer prompts: add -y"
        ) from None


@magics_class
class PipMagics(Magics):
    """`%pip install ...` runs micropip inside the sandbox (there is no pip process to start); `%pip list`, `show`
    and `uninstall` answer from what the sandbox's Python has (pipcmds.py)."""

    @line_magic
    def pip(self, line: str) -> None:
        __tracebackhide__ = True
        try:
            self._pip(line)
        except PackageLoadError as exc:
            exc.message_only = True  # as pip says what failed: no traceback (it would show only the magic's line)
            raise

    def _inspect(self, command: str, args: list[str]) -> None:
        """list, show, uninstall: pip's output (pipcmds.py); a line they cannot take is a UsageError."""
        from IPython.core.error import UsageError

        from . import pipcmds

        try:
            if command == "list":
                print(pipcmds.pip_list(args), end="")
            elif command == "show":
                print(pipcmds.pip_show(args, _warn), end="")
            else:
                _forget(pipcmds.pip_uninstall(args, _ask, lambda text: print(text, end=""), _warn))
        except pipcmds.PipUsageError as exc:
            _forget(getattr(exc, "removed", []))
            raise UsageError(str(exc)) from None

    def _pip(self, line: str) -> None:
        __tracebackhide__ = True
        from pyodide.ffi import can_run_sync, run_sync

        words = shlex.split(line)
        if words and words[0] in ("list", "show", "uninstall"):
            self._inspect(words[0], words[1:])
            return
        if not words or words[0] != "install":
            raise PackageLoadError(
                "the sandbox supports `%pip install NAME[==VERSION] ... [--index-url URL] [--pre]`, "
                "`%pip list`, `%pip show NAME` and `%pip uninstall [-y] NAME` only"
            )
        specs, index_urls, pre, args = [], [], False, iter(words[1:])
        for word in args:
            if word in ("-i", "--index-url", "--extra-index-url"):
                index_urls.append(next(args, ""))
            elif word.startswith("--index-url="):
                index_urls.append(word.split("=", 1)[1])
            elif word == "--pre":
                pre = True
            elif word in ("-q", "-qq", "--quiet"):
                continue  # micropip says little anyway
            elif word.startswith("-"):
                raise PackageLoadError(f"%pip install: option {word!r} is not supported here")
            else:
                specs.append(word)
        if not specs:
            raise PackageLoadError("%pip install: name at least one package")
        if not can_run_sync():
            raise PackageLoadError("%pip cannot run here; use `import micropip; await micropip.install(...)`")
        source = run_sync(pip_install(specs, index_urls or None, pre))
        print(f"Installed {', '.join(specs)} in the sandbox ({source})")
        reply = _host.request({"type": Event.PIP_INSTALLED, "specs": specs, "index_urls": index_urls or None})
        if isinstance(reply, dict) and "error" in reply:
            print(f"[{reply['error'].get('message')}]", file=sys.stderr)
