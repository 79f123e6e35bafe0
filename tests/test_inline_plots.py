"""Inline plots as in ipykernel, with no setup cell: `import matplotlib.pyplot` picks the inline backend, figures
are shown at the end of the cell (and by plt.show()), `%matplotlib inline` and the SVG format work.

No registry we reach carries matplotlib for Pyodide 314, so the package here is tests/plotting_standin: the part
of matplotlib's API that IPython and matplotlib_inline use, drawing a small real PNG. It is loaded the way the
real one is, from a Pyodide index the kernel is pointed at.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from conftest import execute, start_kernel, stop_kernel
from sandbox_kernel import paths
from sandbox_kernel.sandbox import provision

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
STANDIN = Path(__file__).parent / "plotting_standin"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def standin_wheel(folder: Path) -> Path:
    """The stand-in as a pure wheel named matplotlib."""
    dist = "matplotlib-3.8.0"
    files = {p.relative_to(STANDIN).as_posix(): p.read_bytes() for p in (STANDIN / "matplotlib").rglob("*.py")}
    files[f"{dist}.dist-info/METADATA"] = b"Metadata-Version: 2.1\nName: matplotlib\nVersion: 3.8.0\n"
    files[f"{dist}.dist-info/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        record = []
        for path, data in files.items():
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def kc(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plotting-index")
    wheel = standin_wheel(folder)
    info = json.loads((paths.pyodide_dir(provision.deno_dir()) / "pyodide-lock.json").read_text())["info"]
    entry = {
        "name": "matplotlib", "version": "3.8.0", "file_name": wheel.name, "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "package_type": "package",
        "imports": ["matplotlib"], "depends": [], "unvendored_tests": False,
    }  # fmt: skip
    (folder / "pyodide-lock.json").write_text(json.dumps({"info": info, "packages": {"matplotlib": entry}}))
    km, client = start_kernel([f"--SandboxKernel.pyodide_index={folder}"])
    yield client
    stop_kernel(km, client)


def images(run, mime: str = "image/png") -> list:
    return [c["data"][mime] for c in run.of_type("display_data") if mime in c["data"]]


def test_a_plot_appears_at_the_end_of_the_cell_without_setup(kc):
    run = execute(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])", timeout=120)
    assert run.content["status"] == "ok", run.content
    (png,) = images(run)
    assert base64.b64decode(png).startswith(PNG_SIGNATURE)
    kinds = [m["msg_type"] for m in run.outputs if m["msg_type"] in ("execute_result", "display_data")]
    assert kinds == ["execute_result", "display_data"]  # as in ipykernel: the figure after the cell's value
    assert execute(kc, "1 + 1").of_type("display_data") == []  # shown once, then closed


def test_show_displays_the_figure_once(kc):
    run = execute(kc, "plt.plot([1]); plt.plot([2]); plt.show()")
    (png,) = images(run)
    height = int.from_bytes(base64.b64decode(png)[20:24], "big")  # IHDR: one row per plotted line
    assert height == 2


def test_matplotlib_magic_and_svg_format(kc):
    assert execute(kc, "%matplotlib inline").content["status"] == "ok"
    assert execute(kc, "%config InlineBackend.figure_format = 'svg'").content["status"] == "ok"
    run = execute(kc, "plt.plot([1, 2])")
    (svg,) = images(run, "image/svg+xml")
    assert svg.startswith("<svg") and "1 lines" in svg
    assert images(run) == []
