"""`sandbox-kernel install` registers a working, complete kernelspec."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.timeout(600)


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=500, stdin=subprocess.DEVNULL
    )


def install(prefix: Path, *args: str) -> Path:
    proc = run(str(BIN / "sandbox-kernel"), "install", "--prefix", str(prefix), *args)
    assert proc.returncode == 0, proc.stderr
    assert "Installed kernelspec pyodide-sandbox (Python 3 (Pyodide sandbox))" in proc.stdout
    return prefix / "share" / "jupyter" / "kernels" / "pyodide-sandbox"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (which must come first)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR", f"{path.name} has no IHDR first"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_install_prefix_writes_kernelspec(tmp_path: Path) -> None:
    folder = install(tmp_path, "--no-fetch")
    assert sorted(p.name for p in folder.iterdir()) == [
        "kernel.json",
        "logo-32x32.png",
        "logo-64x64.png",
        "logo-svg.svg",
    ]
    spec = json.loads((folder / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (Pyodide sandbox)"
    assert spec["language"] == "python"
    python, *rest = spec["argv"]
    # `-c` with the working folder taken off sys.path first (not `-m`, which would import from the notebook's folder)
    assert (
        rest[0] == "-c"
        and rest[1].startswith("import os, sys; sys.path[:] = ")
        and rest[2:] == ["-f", "{connection_file}"]
    )
    assert Path(python).is_absolute()
    # The argv's Python is this environment's Python, and it can import the kernel.
    probe = run(python, "-c", "import sys, sandbox_kernel; print(sys.prefix)")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == sys.prefix
    assert png_size(folder / "logo-32x32.png") == (32, 32)
    assert png_size(folder / "logo-64x64.png") == (64, 64)
    assert ET.parse(folder / "logo-svg.svg").getroot().tag in {"svg", "{http://www.w3.org/2000/svg}svg"}


def test_jupyter_kernelspec_list_finds_it(tmp_path: Path) -> None:
    folder = install(tmp_path, "--no-fetch")
    proc = run(str(BIN / "jupyter"), "kernelspec", "list", env={"JUPYTER_PATH": str(tmp_path / "share" / "jupyter")})
    assert proc.returncode == 0, proc.stderr
    listed = dict(line.split(None, 1) for line in proc.stdout.splitlines()[1:] if line.strip())
    assert Path(listed["pyodide-sandbox"].strip()) == folder


def test_install_fetches_by_default(tmp_path: Path) -> None:
    """Without --no-fetch, install also makes sure Pyodide and the guest wheels are cached."""
    proc = run(str(BIN / "sandbox-kernel"), "install", "--prefix", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "Pyodide cached in" in proc.stdout
    assert (tmp_path / "share" / "jupyter" / "kernels" / "pyodide-sandbox" / "kernel.json").is_file()
