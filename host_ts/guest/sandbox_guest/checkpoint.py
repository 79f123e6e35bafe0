"""Checkpoints of the user's session, made and applied inside the sandbox (the kernel only stores the bytes).

Kept: the user's variables, pickled together with cloudpickle (functions and classes defined in cells go by value;
shared references between variables survive; a variable that cannot be pickled is left out and named), modules
bound to names (imported again), the sandbox's own files (every file outside /dev, /proc and /lib, and
site-packages: packages installed in the session), the working folder, environment variables and sys.path.
Not kept: host mounts (the user's own files), objects that cannot be pickled (open files, generators, running
tasks, JS objects), state held inside imported modules, the output history (Out, _N, _iN).

A checkpoint is `header JSON + "\\n" + namespace pickle + files tar`; the header gives the two sections' sizes.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import pickle
import re
import site
import sys
import tarfile
import types
from collections.abc import Iterator
from typing import Any

import cloudpickle

from . import _host

FORMAT = 1
# Pyodide's own, and the shell's command files (host_ts/shell_commands.json's folders); site-packages is taken
# separately.
SYSTEM_ROOTS = frozenset({"dev", "proc", "lib", "usr", "bin"})
_OUTPUT_CACHE = re.compile(r"_+|_\d+|_i+|_i\d+")
MAX_NAMED = 1000  # variables named in the summary
REASON_CHARS = 200


def _user_names(user_ns: dict[str, Any], hidden: dict[str, Any]) -> list[str]:
    """The user's own names: not IPython's (In, Out, exit, ...), not dunders, not the output cache."""
    return [
        name
        for name in user_ns
        if name not in hidden
        and not (name.startswith("__") and name.endswith("__"))
        and name != "__builtin__"
        and not _OUTPUT_CACHE.fullmatch(name)
    ]


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:REASON_CHARS]


def _pickle_namespace(user_ns: dict[str, Any], names: list[str]) -> tuple[bytes, dict[str, str], dict[str, str]]:
    """(pickle of the variables, modules by name, variables left out with why)."""
    values: dict[str, Any] = {}
    modules: dict[str, str] = {}
    left_out: dict[str, str] = {}
    for name in names:
        value = user_ns[name]
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
        else:
            values[name] = value
    try:
        return cloudpickle.dumps(values, protocol=5), modules, left_out
    except Exception:  # find the ones that cannot be pickled; the rest are pickled together
        pass
    for name in list(values):
        try:
            cloudpickle.dumps(values[name], protocol=5)
        except Exception as exc:
            left_out[name] = _reason(exc)
            del values[name]
    return cloudpickle.dumps(values, protocol=5), modules, left_out


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _roots() -> list[str]:
    roots = [f"/{entry}" for entry in sorted(os.listdir("/")) if entry not in SYSTEM_ROOTS]
    return [*roots, site.getsitepackages()[0]]


def _tar_files(exclude: list[str]) -> tuple[bytes, int]:
    """A tar of the sandbox's own files (mounts in `exclude` left out) and how many files it holds."""
    count = 0

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal count
        if _under("/" + info.name, exclude):
            return None
        count += info.isfile()
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root in _roots():
            if os.path.lexists(root) and not _under(root, exclude):
                tar.add(root, arcname=root.lstrip("/"), filter=keep)
    return buffer.getvalue(), count


def _parts(sections: list[bytes], size: int) -> Iterator[memoryview]:
    for section in sections:
        view = memoryview(section)
        for start in range(0, len(view), size):
            yield view[start : start + size]


def capture(req: dict[str, Any], user_ns: dict[str, Any], hidden: dict[str, Any]) -> dict[str, Any]:
    """Make a checkpoint and send it to the kernel in parts (unparsed bytes); returns its summary."""
    exclude = [str(p) for p in req.get("exclude") or []]
    part_bytes = max(1, int(req.get("part_bytes") or 1 << 20))
    names = _user_names(user_ns, hidden)
    namespace, modules, left_out = _pickle_namespace(user_ns, names)
    files, file_count = _tar_files(exclude)
    header = {
        "format": FORMAT,
        "sections": {"namespace": len(namespace), "files": len(files)},
        "modules": modules,
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "sys_path": list(sys.path),
    }
    head = json.dumps(header).encode() + b"\n"
    for part in _parts([head, namespace, files], part_bytes):
        _host.send_blob(part)
    kept = sorted(n for n in names if n not in left_out)
    return {
        "status": "ok",
        "bytes": len(head) + len(namespace) + len(files),
        "variables": kept[:MAX_NAMED],
        "variable_count": len(kept),
        "files": file_count,
        "not_kept": dict(list(left_out.items())[:MAX_NAMED]),
    }


def _extract(files: memoryview, exclude: list[str]) -> tuple[int, dict[str, str]]:
    """Unpack the files (none under a mount of this session); returns the count and what failed, with why."""
    count, failed = 0, {}
    with tarfile.open(fileobj=io.BytesIO(files), mode="r") as tar:
        for member in tar:
            if _under("/" + member.name, exclude):
                continue
            try:
                tar.extract(member, "/", filter="tar")
                count += member.isfile()
            except (OSError, tarfile.TarError) as exc:
                failed[f"/{member.name}"] = _reason(exc)
    return count, failed


def apply(req: dict[str, Any], user_ns: dict[str, Any], parts: Any) -> dict[str, Any]:
    """Apply a checkpoint (`parts`: the JS Uint8Arrays the kernel sent): files, environment, working folder,
    sys.path, modules, variables."""
    lengths = [int(part.length) for part in parts]
    blob = bytearray(sum(lengths))
    view = memoryview(blob)
    offset = 0
    for part, length in zip(parts, lengths, strict=True):
        part.assign_to(view[offset : offset + length])  # one copy, from JS memory into this buffer
        offset += length
    newline = blob.index(b"\n")
    header = json.loads(blob[:newline])
    if header.get("format") != FORMAT:
        raise ValueError(f"checkpoint format {header.get('format')!r} is not {FORMAT}")
    sizes = header["sections"]
    start = newline + 1
    namespace = view[start : start + sizes["namespace"]]
    files = view[start + sizes["namespace"] : start + sizes["namespace"] + sizes["files"]]
    file_count, failed = _extract(files, [str(p) for p in req.get("exclude") or []])
    os.environ.update(header["environ"])
    if os.path.isdir(header["cwd"]):
        os.chdir(header["cwd"])
    sys.path[:] = [*header["sys_path"], *(p for p in sys.path if p not in header["sys_path"])]
    for name, module in header["modules"].items():
        try:
            user_ns[name] = importlib.import_module(module)
        except Exception as exc:
            failed[name] = _reason(exc)
    values = pickle.loads(namespace)
    user_ns.update(values)
    return {
        "status": "ok",
        "variable_count": len(values) + len(header["modules"]) - sum(n in header["modules"] for n in failed),
        "files": file_count,
        "not_restored": dict(list(failed.items())[:MAX_NAMED]),
    }
