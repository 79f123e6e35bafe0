"""Every notebook in notebooks/ runs on the real kernel, and its outputs are what it promises."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbformat import NotebookNode

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
JUPYTER = str(Path(sys.executable).parent / "jupyter")
CELL_TIMEOUT = 120
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RAISES = "raises-exception"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


# What a notebook's own text tells its reader to put in sandbox_kernel_config.json before running it.
SETTINGS = {"skills.ipynb": {"SandboxKernel": {"skills": ["TimeSkill", "KeyValueSkill", "SignerSkill"]}}}
# The host's environment for a notebook's kernel: the SignerSkill signs only with a key set.
HOST_ENV = {"skills.ipynb": {"SANDBOX_DEMO_API_KEY": "notebook-test-key"}}


@functools.cache
def executed(path: Path) -> NotebookNode:
    """The notebook after `jupyter execute` ran it as the README says (once per test session): under the kernel its
    metadata names, with the settings its text asks for, in a copy of notebooks/ (its outputs are saved there)."""
    with tempfile.TemporaryDirectory() as config_dir, tempfile.TemporaryDirectory() as copy:
        shutil.copytree(path.parent, copy, dirs_exist_ok=True)
        env = {**os.environ, **HOST_ENV.get(path.name, {})}
        if path.name in SETTINGS:
            (Path(config_dir) / "sandbox_kernel_config.json").write_text(json.dumps(SETTINGS[path.name]))
            env["JUPYTER_CONFIG_DIR"] = config_dir
        proc = subprocess.run(
            [JUPYTER, "execute", f"--timeout={CELL_TIMEOUT}", "--inplace", path.name],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]  # a cell's error (not tagged raises-exception) fails it
        return nbformat.read(Path(copy) / path.name, as_version=4)


def test_the_skills_notebook_says_which_settings_it_needs() -> None:
    text = "".join(cell.source for cell in nbformat.read(REPO / "notebooks" / "skills.ipynb", as_version=4).cells)
    assert json.dumps(SETTINGS["skills.ipynb"]) in text


def code_cells(nb: NotebookNode) -> list[NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def outputs(nb: NotebookNode, output_type: str) -> list[NotebookNode]:
    return [out for cell in code_cells(nb) for out in cell.outputs if out.output_type == output_type]


def stdout(nb: NotebookNode) -> str:
    return "".join(out.text for out in outputs(nb, "stream") if out.name == "stdout")


def rich(nb: NotebookNode, mime: str) -> list[str]:
    """Every `mime` payload of display_data and execute_result outputs."""
    found = outputs(nb, "display_data") + outputs(nb, "execute_result")
    return [out.data[mime] for out in found if mime in out.data]


def check_ran_cleanly(nb: NotebookNode) -> None:
    """Every code cell ran; errors only (and always) where a cell is tagged raises-exception."""
    for cell in code_cells(nb):
        assert cell.execution_count is not None, f"cell did not run:\n{cell.source}"
        errors = [out for out in cell.outputs if out.output_type == "error"]
        if RAISES in cell.metadata.get("tags", []):
            assert errors, f"cell tagged {RAISES} did not raise:\n{cell.source}"
        else:
            assert not errors, f"unexpected error {errors[0].ename}: {errors[0].evalue}\n{cell.source}"


def check_quickstart(nb: NotebookNode) -> None:
    assert nb.metadata.kernelspec == {
        "name": "pyodide-sandbox",
        "display_name": "Python 3 (Pyodide sandbox)",
        "language": "python",
    }
    assert re.fullmatch(
        r"Hello from the sandbox!\n"
        r"Running on emscripten\n"
        r"Defined squares\n"
        r"Sum of squares: 285\n"
        r"The PNG from earlier is \d+ bytes long\n"
        r"Still here after the error: squares\[3\] = 9\n"
        r"No keyboard here: input\(\) raised StdinNotImplementedError\n"
        r"Hello, headless runner!\n",
        stdout(nb),
    ), stdout(nb)
    assert any("<b>bold</b>" in html for html in rich(nb, "text/html"))
    (image,) = rich(nb, "image/png")
    png = base64.b64decode(image)
    assert png.startswith(PNG_SIGNATURE)
    assert png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (128, 64)
    (failing,) = [cell for cell in code_cells(nb) if RAISES in cell.metadata.get("tags", [])]
    (error,) = [out for out in failing.outputs if out.output_type == "error"]
    assert error.ename == "TypeError"
    assert "list indices must be integers" in error.evalue


def check_skills(nb: NotebookNode) -> None:
    out = stdout(nb)
    assert "Skills: KeyValueSkill, SignerSkill, TimeSkill\n" in out
    assert "Host time is an ISO timestamp: True\n" in out
    assert "Two days after 2024-02-28: 2024-03-01\n" in out
    assert "TimeSkill.get_current_time(tz: 'str' = 'UTC') -> 'str'\n" in out
    assert "Key visible in the sandbox: False\n" in out
    assert "Signed by the host; signature length 64\n" in out  # HOST_ENV sets the key
    assert any("'raw': b'\\x00\\x01'" in text for text in rich(nb, "text/plain")), rich(nb, "text/plain")
    failing = [cell for cell in code_cells(nb) if RAISES in cell.metadata.get("tags", [])]
    errors = [out for cell in failing for out in cell.outputs if out.output_type == "error"]
    assert [(e.ename, e.evalue) for e in errors] == [
        (
            "AttributeError",
            "device has no skill 'WeatherSkill'. Available skills: KeyValueSkill, SignerSkill, TimeSkill",
        ),
        ("SkillError", "KeyValueSkill.delete failed: KeyError: 'no such key'"),
    ]
    assert "sandbox_guest" not in "".join(errors[1].traceback)


def check_agents(nb: NotebookNode) -> None:
    out = stdout(nb)
    assert out.startswith("285 True ")
    for step in ("--- step 1: ok=True", "mean 3.875", "--- step 2: ok=False", "[error] NameError: name 'dta' is not defined",
                 "[1, 1, 2, 3, 4, 5, 6, 9]", "--- step 5: ok=False timed_out=True", "cell_timeout=3s",
                 "still have 8 values", "Out: '2025-01-01'", r"['tick 0\n', 'tick 1\n', 'tick 2\n']",
                 "total computed in the sandbox: 4950", "median approach: 4 | mean approach: 3.875",
                 "costs: ['cpu_s', 'output_bytes', 'peak_memory_bytes', 'skill_calls', 'wall_s'] True",
                 "after restore: [3, 1, 4, 1, 5, 9, 2, 6] | checkpoint 'checkpoint-1': 1 variables"):  # fmt: skip
        assert step in out, step


def check_files_and_network(nb: NotebookNode) -> None:
    out = stdout(nb)
    assert "item,price\napple,3\npear,5" in out
    assert "/data/prices.csv stays inside the sandbox" in out and "/data is a read-only mount" in out
    assert "the host file: ['item,price', 'apple,3', 'pear,5']" in out
    assert "readable: /data, /out; writable: /out" in out
    assert "written on the host: 12" in out  # the sandbox sees its own plum,4 row
    assert "'/etc/passwd' is not in the sandbox" in out
    assert "is blocked" in out and "allow_net): none" in out
    assert "allowed: 'hello from the host'" in out
    assert "sandbox_guest" not in out


ORCHESTRATORS = {"agents.ipynb": "python3", "files_and_network.ipynb": "python3"}
CHECKS: dict[str, Callable[[NotebookNode], None]] = {
    "quickstart.ipynb": check_quickstart,
    "skills.ipynb": check_skills,
    "agents.ipynb": check_agents,
    "files_and_network.ipynb": check_files_and_network,
}


def test_known_notebooks_exist() -> None:
    assert set(CHECKS) <= {path.name for path in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    # Notebooks that drive sandboxes through the agent API run in ipykernel's python3 kernel.
    assert nb.metadata.kernelspec.name == ORCHESTRATORS.get(path.name, "pyodide-sandbox")
    for cell in code_cells(nb):
        assert cell.outputs == [] and cell.execution_count is None, f"stored with outputs:\n{cell.source}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path) -> None:
    nb = executed(path)
    check_ran_cleanly(nb)
    check = CHECKS.get(path.name)
    if check is not None:
        check(nb)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_names_its_kernel_in_its_first_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert f"**{nb.metadata.kernelspec.display_name}** kernel" in nb.cells[0].source


def test_an_agent_notebook_under_the_sandbox_kernel_is_told_which_kernel_it_is_for() -> None:
    """The README's batch command with the sandbox's kernel on a notebook that starts sandboxes itself."""
    proc = run(JUPYTER, "execute", "--kernel_name=pyodide-sandbox", "notebooks/agents.ipynb")
    assert proc.returncode != 0
    assert "No module named 'sandbox_kernel': sandbox_kernel is the host's package" in proc.stderr, proc.stderr
    assert "is for the 'Python 3 (ipykernel)' kernel" in proc.stderr


def test_jupyter_execute() -> None:
    proc = run(JUPYTER, "execute", "--kernel_name=pyodide-sandbox", "notebooks/quickstart.ipynb")
    assert proc.returncode == 0, proc.stderr


def test_nbconvert_execute(tmp_path: Path) -> None:
    proc = run(
        JUPYTER,
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--output-dir",
        str(tmp_path),
        "notebooks/quickstart.ipynb",
    )
    assert proc.returncode == 0, proc.stderr
    (written,) = tmp_path.glob("*.ipynb")
    nb = nbformat.read(written, as_version=4)
    check_ran_cleanly(nb)
    check_quickstart(nb)
