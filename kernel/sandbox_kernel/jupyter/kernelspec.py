"""Register the kernelspec `pyodide-sandbox` with Jupyter."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager

from sandbox_kernel import paths

KERNEL_NAME = "pyodide-sandbox"
DISPLAY_NAME = "Python 3 (Pyodide sandbox)"


def kernel_json(python: str = sys.executable) -> dict[str, object]:
    """The kernel.json for this Python, from the kernelspec/ template."""
    spec: dict[str, object] = json.loads((paths.kernelspec_dir() / "kernel.json").read_text())
    spec["argv"] = [python if arg == "{python}" else arg for arg in spec["argv"]]  # type: ignore[attr-defined]
    return spec


def install(user: bool = False, prefix: str | None = None) -> str:
    """Install the kernelspec (with logos); returns the folder it went to."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / KERNEL_NAME
        folder.mkdir()
        for logo in paths.kernelspec_dir().iterdir():
            if logo.name != "kernel.json" and logo.is_file():
                shutil.copy(logo, folder / logo.name)
        (folder / "kernel.json").write_text(json.dumps(kernel_json(), indent=2) + "\n")
        return KernelSpecManager().install_kernel_spec(str(folder), KERNEL_NAME, user=user, prefix=prefix)
