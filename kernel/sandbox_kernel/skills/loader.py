"""Host skills: Python classes whose public methods the guest may call through `device`."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from sandbox_kernel.skills.grants import code_digest

ENTRY_POINT_GROUP = "sandbox_kernel.skills"
# The examples shipped with sandbox-kernel, exposed only when SandboxKernel.skills names them.
SHIPPED = {
    "TimeSkill": "sandbox_kernel.skills.time_skill.TimeSkill",
    "KeyValueSkill": "sandbox_kernel.skills.kv_skill.KeyValueSkill",
    "SignerSkill": "sandbox_kernel.skills.secret_skill.SignerSkill",
}
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class SkillLoadError(Exception):
    """A skill file or entry point could not be loaded; the message says which and why."""


@dataclass(frozen=True)
class MethodInfo:
    name: str
    signature: str
    doc: str


@dataclass
class Skill:
    """One loaded skill: its instance and the methods the guest may see."""

    name: str
    instance: Any
    doc: str
    methods: dict[str, MethodInfo]
    source: str
    code_sha256: str = ""  # of its code as loaded (grants.code_digest): a lasting approval is bound to it

    def bound(self, method: str) -> Callable[..., Any]:
        found: Callable[..., Any] = getattr(self.instance, method)
        return found


def public_methods(obj: Any) -> dict[str, MethodInfo]:
    """Callable attributes of a skill instance whose names do not start with `_`."""
    found = {}
    for name, member in inspect.getmembers(type(obj)):
        if name.startswith("_") or not NAME.fullmatch(name) or not callable(member):
            continue
        bound = getattr(obj, name)
        try:
            signature = str(inspect.signature(bound))
        except (TypeError, ValueError):
            signature = "(...)"
        found[name] = MethodInfo(name=name, signature=signature, doc=inspect.getdoc(member) or "")
    return found


def code_files(cls: type, beside: Iterable[Path] = ()) -> list[Path]:
    """The files a skill's code comes from: its class's module file and `beside` (for a skills_path skill, every
    *.py of that folder, which it may import)."""
    try:
        own = inspect.getsourcefile(cls)
    except TypeError:  # a class without a source file
        own = None
    return [*([Path(own)] if own else []), *beside]


def make_skill(cls: type, source: str, beside: Iterable[Path] = ()) -> Skill:
    try:
        instance = cls()
    except Exception as exc:
        raise SkillLoadError(f"skill {cls.__name__} from {source} could not be created: {exc}") from None
    files = code_files(cls, beside)
    code = code_digest(files) if files else code_digest([]) + f":{cls.__module__}.{cls.__qualname__}"
    return Skill(cls.__name__, instance, inspect.getdoc(cls) or "", public_methods(instance), source, code)


def skill_classes(module: Any) -> list[type]:
    """Classes defined in `module` whose names end in `Skill`."""
    return [
        obj
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and name.endswith("Skill")
        and obj.__module__ == module.__name__
        and NAME.fullmatch(name)
    ]


def load_directory(folder: Path) -> list[Skill]:
    """Every `*.py` in `folder`: each class named `...Skill` becomes a skill."""
    if not folder.is_dir():
        raise SkillLoadError(f"SandboxKernel.skills_path {str(folder)!r} is not a directory")
    skills: list[Skill] = []
    everything = sorted(folder.glob("*.py"))
    for path in everything:
        module_name = f"sandbox_kernel_skills_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise SkillLoadError(f"skill file {path} failed to import: {type(exc).__name__}: {exc}") from None
        skills.extend(make_skill(cls, str(path), everything) for cls in skill_classes(module))
    return skills


def load_entry_points() -> list[Skill]:
    """Skills published by installed packages under the `sandbox_kernel.skills` group."""
    skills: list[Skill] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise SkillLoadError(f"entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from None
        classes = [obj] if inspect.isclass(obj) else skill_classes(obj)
        skills.extend(make_skill(cls, f"entry point {ep.name}") for cls in classes)
    return skills


def load_configured(names: Iterable[str]) -> list[Skill]:
    """SandboxKernel.skills: shipped examples by name, or import paths of classes or modules."""
    skills: list[Skill] = []
    for name in names:
        path = SHIPPED.get(name, name)
        module_name, _, attribute = path.rpartition(".")
        try:
            try:
                obj = importlib.import_module(path)
            except ImportError:
                if not module_name:
                    raise
                obj = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            shipped = ", ".join(SHIPPED)
            raise SkillLoadError(
                f"SandboxKernel.skills names {name!r}, which could not be imported ({type(exc).__name__}: {exc}). "
                f"Give a shipped example ({shipped}), 'package.module.Class' or 'package.module'."
            ) from None
        classes = [obj] if inspect.isclass(obj) else skill_classes(obj)
        if not classes:
            raise SkillLoadError(f"SandboxKernel.skills names {name!r}, which holds no class named ...Skill")
        skills.extend(make_skill(cls, f"SandboxKernel.skills {name!r}") for cls in classes)
    return skills


def by_name(skills: Iterable[Skill]) -> dict[str, Skill]:
    """Skills by name; two with one name is an error naming both sources (never a silent replacement)."""
    found: dict[str, Skill] = {}
    for skill in skills:
        other = found.get(skill.name)
        if other is not None:
            raise SkillLoadError(
                f"two skills are named {skill.name!r}: one from {other.source}, one from {skill.source}. "
                "Rename one of them (the guest calls skills by name)."
            )
        found[skill.name] = skill
    return found


def catalog(skills: dict[str, Skill]) -> dict[str, Any]:
    """What the guest learns about the skills: names, signatures, docstrings (no host paths)."""
    return {
        name: {
            "doc": skill.doc,
            "methods": {m.name: {"signature": m.signature, "doc": m.doc} for m in skill.methods.values()},
        }
        for name, skill in sorted(skills.items())
    }
