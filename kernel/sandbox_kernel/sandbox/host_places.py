"""Host places that guest code must never change (the kernel's code and configuration) or read (its secrets).

A writable mount that holds one of them, or lies inside one, would let guest code plant code that a later
kernel (or any host program of the user) runs: a module on the kernel's `sys.path`, a skill file, a Jupyter
config file or kernelspec, a wheel that `packages` installs. A mount of any kind that holds one of the secret
places would show guest code the Jupyter server's token, the checkpoint key or other sessions' files. The
kernel refuses such settings at start, naming the place and why, before it loads anything from them.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import tempfile
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jupyter_core.paths import jupyter_config_path, jupyter_data_dir, jupyter_path, jupyter_runtime_dir

from sandbox_kernel import paths
from sandbox_kernel.checkpoints import file as checkpoint_file
from sandbox_kernel.sandbox.mounts import Mount


@dataclass(frozen=True)
class Place:
    """A host path the kernel trusts.

    `trusted`: no read-write mount may hold it or lie inside it; `secret`: no mount may hold it at all.
    """

    path: Path
    what: str
    secret: bool = False
    trusted: bool = True


def _real(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def _ipython_dir() -> str:
    from IPython.paths import get_ipython_dir

    return get_ipython_dir()


def kernel_places(extra: Iterable[Place] = ()) -> list[Place]:
    """Where the kernel process reads code, configuration and secrets from (on this host, for this user)."""
    places = [Place(_real(p), "the kernel's Python path (sys.path)") for p in sys.path if p and os.path.isabs(p)]
    places += [
        Place(_real(sys.prefix), "the kernel's Python environment (sys.prefix)"),
        Place(_real(sys.base_prefix), "the Python installation the kernel runs on"),
        Place(_real(os.path.dirname(sys.executable)), "the folder of the kernel's Python and its commands"),
        Place(_real(sysconfig.get_path("scripts")), "the kernel environment's commands (jupyter, sandbox-kernel)"),
        Place(_real(site.getuserbase()), "Python's per-user folder (user site-packages and commands)"),
        Place(_real(_ipython_dir()), "IPython's configuration (profiles, startup files)"),
        Place(_real(paths.host_dir()), "the sandbox's host program (host_ts)"),
        Place(_real(paths.cache_dir()), "sandbox-kernel's own cache (Pyodide and the start-up snapshot)"),
        Place(_real(paths.deno_executable()), "the Deno binary"),
        *(Place(_real(p), "Jupyter's configuration folders") for p in jupyter_config_path()),
        *(Place(_real(p), "Jupyter's data folders (kernelspecs, extensions)") for p in jupyter_path()),
        Place(_real(jupyter_data_dir()), "Jupyter's data folder (checkpoint key, audit log)", secret=True),
        Place(_real(jupyter_runtime_dir()), "Jupyter's runtime folder (server tokens, connection files)", True),
        Place(_real(checkpoint_file.key_path()), "the checkpoint key", secret=True),
        Place(_real(tempfile.gettempdir()), "the temporary folder (other kernels' private folders)", True, False),
    ]
    return [*places, *extra]


def local_folder(location: str) -> Path | None:
    """The folder a `file://` URL or a plain path names (SandboxKernel.pyodide_index), None for a remote URL."""
    if location.startswith("file:"):
        from urllib.request import url2pathname  # only for a file: URL (it loads http.client)

        return _real(url2pathname(urllib.parse.urlsplit(location).path))
    if "://" in location or not location:
        return None
    return _real(location)


def _holds(outer: Path, inner: Path) -> bool:
    return inner == outer or inner.is_relative_to(outer)


def mount_problems(mounts: Iterable[Mount], places: Iterable[Place], home: Path | None = None) -> list[str]:
    """Why each mount may not be used as it is: one line per mount, naming the place and the fix."""
    home = _real(home or Path.home())
    places = list(places)
    problems = []
    for mount in mounts:
        spec = f"{mount.host} at {mount.guest}"
        if mount.writable and _holds(mount.host, home):
            problems.append(
                f"the read-write mount {spec} holds your home folder {home} (shell start-up files, tool "
                "configuration): mount a project folder inside it instead"
            )
            continue
        for place in places:
            if place.secret and _holds(mount.host, place.path):
                problems.append(
                    f"the mount {spec} holds {place.what} ({place.path}), which guest code must not read: mount "
                    "a folder that does not hold it"
                )
                break
            if mount.writable and place.trusted and (_holds(mount.host, place.path) or _holds(place.path, mount.host)):
                where = "holds" if _holds(mount.host, place.path) else "lies inside"
                problems.append(
                    f"the read-write mount {spec} {where} {place.what} ({place.path}): guest code could plant code "
                    "there that runs on the host later. Mount it read-only ('ro'), or a folder apart from it"
                )
                break
    return problems


def working_folder_problem(folder: Path, home: Path | None = None) -> str | None:
    """Why the kernel's working folder may not be shown to the guest at all (its home or the root folder)."""
    folder, home = _real(folder), _real(home or Path.home())
    if folder in (home, Path("/")):
        which = "your home folder" if folder == home else "the root folder"
        return (
            f"the working folder {folder} is {which}, which holds your keys and tool configuration: put the "
            "notebook in a project folder (a subfolder of it) and start the kernel there, or leave working_folder "
            "'off' and mount the folders it needs with SandboxKernel.mounts"
        )
    return None
