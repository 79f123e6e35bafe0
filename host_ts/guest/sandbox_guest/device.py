"""The `device` object: host skills called as plain synchronous methods."""

from __future__ import annotations

import base64
import json
from typing import Any

from . import _host
from ._protocol import Event
from .cleantb import CleanTraceback

BYTES_KEY = "__bytes__"


class SkillError(CleanTraceback, Exception):
    """A skill call failed on the host. `exception_type` names the host-side exception."""

    def __init__(self, message: str, exception_type: str = "") -> None:
        super().__init__(message)
        self.exception_type = exception_type


class SkillRefused(SkillError):
    """The host's gatekeeper (or the person asked) did not allow the call."""


class SkillTimeout(SkillError):
    """The skill took longer than the host allows (SandboxKernel.skill_timeout)."""


class SkillDataError(SkillError, TypeError):
    """An argument or result that is not JSON data or bytes, or is too large."""


_ERRORS = {cls.__name__: cls for cls in (SkillError, SkillRefused, SkillTimeout, SkillDataError)}


def _encode(value: Any, depth: int = 0) -> Any:
    if depth > 64:
        raise SkillDataError("arguments nested deeper than 64 levels cannot cross the bridge")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [_encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise SkillDataError("dict keys must be str to cross the bridge")
        return {k: _encode(v, depth + 1) for k, v in value.items()}
    raise SkillDataError(
        f"a {type(value).__name__} cannot cross the bridge: only JSON data (None, bool, int, float, str, "
        "list, tuple, dict with str keys) and bytes are allowed"
    )


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {BYTES_KEY}:
            return base64.b64decode(value[BYTES_KEY])
        return {k: _decode(v) for k, v in value.items()}
    return value


class Device:
    """Host skills. `device.Skill.method(...)` runs on the host after the gatekeeper allows it."""

    SkillError = SkillError
    SkillRefused = SkillRefused
    SkillTimeout = SkillTimeout
    SkillDataError = SkillDataError

    def __init__(self, catalog: dict[str, Any], max_bytes: int) -> None:
        self._catalog = catalog
        self._max_bytes = max_bytes

    def __getattr__(self, name: str) -> Any:
        __tracebackhide__ = True  # the guest sees its own call, not the proxy
        if name.startswith("_") or name not in self._catalog:
            raise AttributeError(f"device has no skill {name!r}. Available skills: {self._available()}")
        return SkillProxy(self, name)

    def _available(self) -> str:
        if self._catalog:
            return ", ".join(sorted(self._catalog))
        return (
            "none. Skills are chosen on the host, e.g. SandboxKernel.skills = ['TimeSkill'] or "
            "SandboxKernel.skills_path = 'my_skills' in the kernel's configuration"
        )

    def __dir__(self) -> list[str]:
        return [*sorted(self._catalog), "describe_function", "search_skills"]

    def __repr__(self) -> str:
        if not self._catalog:
            return "<device: no skills (the host adds them with SandboxKernel.skills or skills_path)>"
        return f"<device: {', '.join(sorted(self._catalog))}>"

    def search_skills(self, query: str = "") -> list[dict[str, str]]:
        """Skills and methods whose name or docstring contains `query` (case-insensitive)."""
        needle = query.lower()
        found = []
        for skill, info in sorted(self._catalog.items()):
            for method, m in sorted(info["methods"].items()):
                text = f"{skill}.{method} {info['doc']} {m['doc']}".lower()
                if needle in text:
                    found.append({"name": f"{skill}.{method}", "signature": m["signature"], "doc": m["doc"]})
        return found

    def describe_function(self, name: str) -> dict[str, str]:
        """Signature and docstring of `Skill.method`."""
        skill, _, method = name.partition(".")
        info = self._catalog.get(skill, {}).get("methods", {}).get(method)
        if info is None:
            raise KeyError(f"no skill method {name!r}; try device.search_skills()")
        return {"name": name, "signature": info["signature"], "doc": info["doc"]}

    def _call(self, skill: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # the guest sees its own call, not the proxy
        payload = {"args": _encode(list(args)), "kwargs": _encode(kwargs)}
        size = len(json.dumps(payload)) if args or kwargs else 0  # the host checks again
        if size > self._max_bytes:
            raise SkillDataError(
                f"the arguments are {size} bytes, over the bridge limit of {self._max_bytes} bytes "
                "(SandboxKernel.skill_max_bytes)"
            )
        reply = _host.request({"type": Event.SKILL_CALL, "skill": skill, "method": method, **payload})
        if isinstance(reply, dict) and "value" in reply:
            return _decode(reply["value"])
        error: Any = reply.get("error", {}) if isinstance(reply, dict) else {}  # the kernel's JSON
        cls = _ERRORS.get(error.get("type"), SkillError)
        raise cls(str(error.get("message", "the skill call failed")), str(error.get("exception", "")))


class SkillProxy:
    """One skill; its public methods are attributes."""

    def __init__(self, device: Device, name: str) -> None:
        self._device = device
        self._name = name

    def _methods(self) -> dict[str, Any]:
        methods: dict[str, Any] = self._device._catalog[self._name]["methods"]
        return methods

    def __getattr__(self, method: str) -> Any:
        __tracebackhide__ = True  # the guest sees its own call, not the proxy
        methods = self._methods()
        if method.startswith("_") or method not in methods:
            raise AttributeError(
                f"{self._name} has no method {method!r}. Its methods are: {', '.join(sorted(methods))}"
            )
        return MethodProxy(self._device, self._name, method, methods[method])

    def __dir__(self) -> list[str]:
        return sorted(self._methods())

    def __repr__(self) -> str:
        return f"<skill {self._name}: {', '.join(sorted(self._methods()))}>"


class MethodProxy:
    """A host method; calling it blocks until the host answers."""

    def __init__(self, device: Device, skill: str, method: str, info: dict[str, str]) -> None:
        self._device = device
        self._skill = skill
        self._method = method
        self.__name__ = method
        self.__qualname__ = f"{skill}.{method}"
        self.__doc__ = f"{skill}.{method}{info['signature']}\n\n{info['doc']}".strip()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # the guest sees its own call, not the proxy
        return self._device._call(self._skill, self._method, args, kwargs)

    def __repr__(self) -> str:
        return f"<skill method {self.__qualname__}>"
