"""`%pip list`, `%pip show` and `%pip uninstall` in pip's own words, over importlib.metadata and micropip."""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from .guards import PACKAGES_SITE  # SandboxKernel.packages, unpacked on the host (read-only)

KERNEL_SITE = "/lib/sandbox-site"  # the sandbox's own IPython and its dependencies (read-only, the kernel's)


class PipUsageError(ValueError):
    """What the line asks cannot be done as written; the message says what can."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_name(spec: str) -> str:
    """The canonical project name an install spec names: a requirement's (`Six>=1.1` -> `six`, `x @ URL` -> `x`), or
    for a wheel's URL or path (`https://host/x_y-1.0-py3-none-any.whl`, `emfs:/tmp/x-1.0-...whl`, as micropip takes
    them) its file name's, the part before the first '-' (the wheel file name convention)."""
    spec = spec.strip()
    name = re.split(r"[<>=!~\[;@ ]", spec, maxsplit=1)[0]
    if "/" in name or ":" in name or name.endswith(".whl"):
        from urllib.parse import unquote, urlsplit

        path = urlsplit(spec).path if "://" in spec else spec.split("?", 1)[0].split("#", 1)[0]
        name = unquote(path).rstrip("/").rsplit("/", 1)[-1].split("-", 1)[0]
    return canonical(name)


def installed() -> dict[str, metadata.Distribution]:
    """Every distribution Python can import, by canonical name (the first on sys.path, as import finds it)."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) not in found:
            found[canonical(name)] = dist
    return found


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """pip's table: a header, a rule of dashes, columns as wide as their widest cell, one space apart."""
    sizes = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
    lines = [" ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip() for row in rows]
    lines.insert(1, " ".join("-" * size for size in sizes))
    return lines


def pip_list(args: list[str]) -> str:
    """`pip list [--format columns|freeze|json]`."""
    form = "columns"
    words = iter(args)
    for word in words:
        if word in ("--format",):
            form = next(words, "")
        elif word.startswith("--format="):
            form = word.split("=", 1)[1]
        else:
            raise PipUsageError(f"%pip list: option {word!r} is not supported here (only --format)")
    if form not in ("columns", "freeze", "json"):
        raise PipUsageError(f"%pip list: --format must be columns, freeze or json, not {form!r}")
    dists = sorted(installed().items())
    pairs = [(str(dist.metadata["Name"]), str(dist.version)) for _, dist in dists]
    if form == "json":
        return json.dumps([{"name": name, "version": version} for name, version in pairs]) + "\n"
    if form == "freeze":
        return "".join(f"{name}=={version}\n" for name, version in pairs)
    return "\n".join(_columns([("Package", "Version"), *pairs])) + "\n"


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    """The projects `dist` needs here (markers evaluated, no extras), as pip's `Requires:` names them."""
    requirement_class = _requirement_class()
    names = []
    for text in dist.requires or []:
        if requirement_class is None:  # no parser: plain requirements only (a marker cannot be evaluated)
            if ";" not in text:
                names.append(re.split(r"[ <>=!~\[(]", text.strip(), maxsplit=1)[0])
            continue
        requirement = requirement_class(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(requirement.name)
    return names


def _requirement_class() -> Any:
    """packaging's Requirement: the copy micropip carries (the guest has no other), else packaging's own."""
    import importlib

    for module in ("micropip._vendored.packaging.src.packaging.requirements", "packaging.requirements"):
        try:
            return importlib.import_module(module).Requirement
        except ImportError:
            continue
    return None


def _homepage(meta: Any) -> str:
    if meta["Home-page"]:
        return str(meta["Home-page"])
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if canonical(label.strip()) in ("homepage", "home-page"):
            return str(url).strip()
    return ""


def pip_show(args: list[str], warn: Callable[[str], None]) -> str:
    """`pip show NAME...`: pip's fields for each, `---` between them; those not installed are named on stderr."""
    names = [a for a in args if not a.startswith("-")]
    if not names or len(names) != len(args):
        raise PipUsageError("%pip show: name one or more installed packages (no options are supported here)")
    dists = installed()
    needs = {key: {canonical(n) for n in _requirement_names(dist)} for key, dist in dists.items()}
    shown, missing = [], []
    for name in names:
        dist = dists.get(canonical(name))
        if dist is None:
            missing.append(name)
            continue
        meta = dist.metadata
        requires = sorted(set(_requirement_names(dist)), key=str.lower)
        required_by = sorted(
            (str(dists[key].metadata["Name"]) for key, wanted in needs.items() if canonical(name) in wanted),
            key=str.lower,
        )
        fields = [
            ("Name", meta["Name"]), ("Version", dist.version), ("Summary", meta["Summary"]),
            ("Home-page", _homepage(meta)), ("Author", meta["Author"]), ("Author-email", meta["Author-email"]),
            ("License", meta["License-Expression"] or meta["License"]), ("Location", str(dist.locate_file(""))),
            ("Requires", ", ".join(requires)), ("Required-by", ", ".join(required_by)),
        ]  # fmt: skip
        shown.append("".join(f"{key}: {value or ''}\n" for key, value in fields))
    if missing:
        warn(f"WARNING: Package(s) not found: {', '.join(missing)}")
    return "---\n".join(shown)


def top_level_modules(dist: metadata.Distribution) -> list[str]:
    """The modules a distribution gives `import` (its top_level.txt, else the top of each file it installed)."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return sorted({line.strip() for line in listed.splitlines() if line.strip().isidentifier()})
    tops = set()
    for file in dist.files or []:
        first = file.parts[0] if file.parts else ".."
        if first in ("..", "__pycache__") or first.endswith((".dist-info", ".data")):
            continue
        if len(file.parts) > 1:
            tops.add(first)  # a package's folder (namespace packages too)
        elif first.endswith((".py", ".so")):
            tops.add(first.split(".", 1)[0])
    return sorted(top for top in tops if top.isidentifier())


def _findable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def not_importable(specs: list[str]) -> dict[str, str]:
    """Of the projects `specs` name (and all they require here), those Python cannot import now, with why."""
    import importlib

    importlib.invalidate_caches()
    dists = installed()
    broken: dict[str, str] = {}
    todo = [(project_name(spec), "") for spec in specs]
    seen: set[str] = set()
    while todo:
        name, needed_by = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        dist = dists.get(name)
        why = f" (needed by {needed_by})" if needed_by else ""
        if dist is None:
            broken[name] = f"it is not installed{why}"
            continue
        lost = [module for module in top_level_modules(dist) if not _findable(module)]
        if lost:
            broken[name] = f"its metadata is there but Python cannot find {', '.join(lost)}{why}"
            continue
        todo.extend((canonical(need), str(dist.metadata["Name"])) for need in _requirement_names(dist))
    return broken


def _top_entries(dist: metadata.Distribution) -> list[str]:
    """What uninstalling removes, as pip lists it: each top-level folder as `folder/*`, each top-level file."""
    root = str(dist.locate_file("")).rstrip("/")
    tops = set()
    for file in dist.files or []:
        parts = file.parts
        if not parts or parts[0] == "..":
            continue
        tops.add(f"{root}/{parts[0]}/*" if len(parts) > 1 else f"{root}/{parts[0]}")
    return sorted(tops)


def pip_uninstall(
    args: list[str], ask: Callable[[str], str], say: Callable[[str], None], warn: Callable[[str], None]
) -> list[str]:
    """`pip uninstall [-y] NAME...` through micropip; returns the canonical names removed (a PipUsageError carries
    those removed before it as `removed`)."""
    yes = any(a in ("-y", "--yes") for a in args)
    unknown = [a for a in args if a.startswith("-") and a not in ("-y", "--yes", "-q", "--quiet")]
    if unknown:
        raise PipUsageError(f"%pip uninstall: option {unknown[0]!r} is not supported here (only -y)")
    names = [a for a in args if not a.startswith("-")]
    if not names:
        raise PipUsageError("%pip uninstall: name at least one package")
    dists = installed()
    removed: list[str] = []
    for name in names:
        dist = dists.get(canonical(name))
        if dist is None:
            warn(f"WARNING: Skipping {name} as it is not installed.")
            continue
        try:
            gone = _uninstall_one(dist, yes, ask, say)
        except PipUsageError as exc:
            exc.removed = removed  # type: ignore[attr-defined]  # (those before it were removed all the same)
            raise
        if gone:
            removed.append(gone)
    return removed


def _uninstall_one(
    dist: metadata.Distribution, yes: bool, ask: Callable[[str], str], say: Callable[[str], None]
) -> str | None:
    """Uninstall one distribution, as pip does; its canonical name once it is gone (None: the person said no)."""
    import micropip

    if str(dist.locate_file("")).startswith(KERNEL_SITE):
        raise PipUsageError(
            f"%pip uninstall: {dist.metadata['Name']} is part of the sandbox's own kernel (IPython and what it "
            "needs), which cannot be uninstalled"
        )
    if str(dist.locate_file("")).startswith(PACKAGES_SITE):
        raise PipUsageError(
            f"%pip uninstall: {dist.metadata['Name']} {dist.version} is preinstalled by SandboxKernel.packages, "
            f"read-only in {PACKAGES_SITE} (shared by every sandbox with these packages): remove it from "
            "SandboxKernel.packages (and start the kernel again) to go without it"
        )
    if dist.files is None:
        raise PipUsageError(
            f"%pip uninstall: cannot uninstall {dist.metadata['Name']} {dist.version}: no RECORD file was found "
            f"for it in {dist.locate_file('')}, so what it installed is unknown (pip refuses it too): remove its "
            "modules and its .dist-info folder yourself"
        )
    label = f"{dist.metadata['Name']}-{dist.version}"
    say(f"Found existing installation: {dist.metadata['Name']} {dist.version}\nUninstalling {label}:\n")
    if not yes:
        say("  Would remove:\n" + "".join(f"    {entry}\n" for entry in _top_entries(dist)))
        if ask("Proceed (Y/n)? ").strip().lower() not in ("", "y", "yes"):
            return None
    project = str(dist.metadata["Name"])  # (read before its files are gone)
    files = _installed_files(dist)
    try:
        with _quiet_micropip():
            micropip.uninstall(project)
    except OSError as exc:
        raise PipUsageError(f"%pip uninstall: {label} could not be removed ({type(exc).__name__}: {exc})") from None
    left = _left_behind(project, files)
    if left:
        raise PipUsageError(f"%pip uninstall: {label} was not removed: {left}")
    say(f"  Successfully uninstalled {label}\n")
    return canonical(project)


def _installed_files(dist: metadata.Distribution) -> list[str]:
    """The files of `dist` (as its RECORD names them) that are there now."""
    import os

    paths = (str(dist.locate_file(file)) for file in dist.files or [])
    return [path for path in paths if os.path.isfile(path)]


def _left_behind(project: str, files: list[str]) -> str:
    """What of an uninstalled project is still there ('' when nothing): its metadata, or files it installed."""
    import importlib
    import os

    importlib.invalidate_caches()
    if canonical(project) in installed():
        return "Python still finds its metadata"
    kept = [path for path in files if os.path.exists(path)]
    return f"{len(kept)} of its files are still there, e.g. {kept[0]}" if kept else ""


@contextlib.contextmanager
def _quiet_micropip() -> Iterator[None]:
    """micropip warns of files a wheel's RECORD names that were never installed (e.g. a licenses folder); pip
    says nothing of them."""

    def errors_only(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    logger = logging.getLogger("micropip")
    logger.addFilter(errors_only)
    try:
        yield
    finally:
        logger.removeFilter(errors_only)
