"""`sandbox-kernel uninstall`: remove the kernelspec and, when asked, the cache, the checkpoint key and the audit log."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_core.paths import SYSTEM_JUPYTER_PATH, jupyter_data_dir, jupyter_path

from sandbox_kernel import paths, private_files
from sandbox_kernel.checkpoints import file as checkpoint_file
from sandbox_kernel.checkpoints import kernel_folder
from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME


@dataclass
class Removal:
    """What one uninstall did: lines for stdout, and failures (each a line for stderr)."""

    removed: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def kernelspec_folders(user: bool, sys_prefix: bool, prefix: str | None) -> list[Path]:
    """Where to look for the kernelspec: the one place a flag names (as `install` puts it), else every folder
    Jupyter finds kernelspecs in."""
    if user:
        bases = [Path(jupyter_data_dir())]
    elif sys_prefix or prefix:
        bases = [Path(sys.prefix if sys_prefix else str(prefix)) / "share" / "jupyter"]
    else:
        bases = [Path(p) for p in dict.fromkeys([*jupyter_path(), *SYSTEM_JUPYTER_PATH])]
    return [base / "kernels" / KERNEL_NAME for base in bases]


def _remove(path: Path, what: str, done: Removal) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        done.absent.append(f"{what}: nothing at {path}")
    except OSError as exc:
        done.failed.append(f"could not remove {what} {path}: {exc.strerror or exc}")
    else:
        done.removed.append(f"removed {what} {path}")


def cache_problem(folder: Path) -> str | None:
    """Why the cache folder may not be removed whole (it holds what the kernel does not put there), or None."""
    real, home = folder.resolve(), Path.home().resolve()
    if real == Path("/") or home == real or home.is_relative_to(real):
        return f"{folder} is {'/' if real == Path('/') else 'your home folder or holds it'}"
    others = sorted(entry.name for entry in folder.iterdir() if entry.name not in paths.CACHE_PARTS)
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        return f"{folder} holds what sandbox-kernel did not put there ({shown})"
    return None


def uninstall(  # what to remove: a plain list of choices
    kernelspecs: list[Path],
    cache: bool,
    key: bool,
    audit_log: Path | None,
    done: Removal | None = None,
    page_policies: Sequence[Path] = (),
) -> Removal:
    """Remove the kernelspec found in `kernelspecs` and the page policy's config files found in `page_policies`
    (optional: none found is no problem), and the cache, the key and the audit log (with its rotated files) when
    asked."""
    done = done or Removal()
    found = [folder for folder in kernelspecs if (folder / "kernel.json").is_file()]
    for folder in found:
        _remove(folder, "kernelspec", done)
    if not found:
        done.absent.append(f"kernelspec {KERNEL_NAME}: not in {', '.join(str(f.parent) for f in kernelspecs)}")
    for path in page_policies:
        if path.is_file():
            _remove(path, "the page policy (restart Jupyter for its pages to lose it)", done)
    if cache:
        folder = paths.cache_dir()
        problem = cache_problem(folder) if folder.is_dir() else None
        if problem:
            done.failed.append(
                f"the cache was kept: {problem} (SANDBOX_KERNEL_CACHE or XDG_CACHE_HOME); remove what is yours by hand"
            )
        else:
            _remove(folder, "the cache", done)
    if key:
        _remove(
            checkpoint_file.key_path(), "the checkpoint key (checkpoints saved with it can no longer be restored)", done
        )
    if audit_log is not None:
        _remove(audit_log, "the audit log", done)
        older = [p for p in audit_log.parent.glob(f"{audit_log.name}.*") if p.name.rpartition(".")[2].isdigit()]
        for path in sorted(older, key=lambda p: int(p.name.rpartition(".")[2])):  # audit.jsonl.1, .2, ... (rotated)
            _remove(path, "a rotated audit log", done)
    kernel_folder.sweep()  # checkpoint folders of kernels that are gone
    own = private_files.kernel_data_folder()
    for folder in (kernel_folder.root(), own):
        try:
            folder.rmdir()  # only when nothing is left in it (running kernels' checkpoints stay)
        except OSError:
            continue
        done.removed.append(f"removed the empty folder {folder}")
    return done
