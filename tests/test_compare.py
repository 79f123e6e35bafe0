"""`sandbox-kernel compare`: a notebook under this kernel and under ipykernel, cell by cell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from sandbox_kernel.cli.compare import compare

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CLI = str(Path(sys.executable).parent / "sandbox-kernel")


@pytest.fixture
def tour(tmp_path) -> Path:
    """A small tutorial: what it reads lies next to it; one cell lists it with the shell, one starts a job."""
    (tmp_path / "data.txt").write_text("3\n4\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A tour"),
        nbformat.v4.new_code_cell("numbers = [int(line) for line in open('data.txt')]\nsum(numbers)"),
        nbformat.v4.new_code_cell("print('hello', object())"),
        nbformat.v4.new_code_cell("!ls"),
        nbformat.v4.new_code_cell("!sleep 0 &"),
        nbformat.v4.new_code_cell("1/0"),
    ]
    path = tmp_path / "tour.ipynb"
    nbformat.write(nb, path)
    return path


def test_only_the_cell_the_sandbox_forbids_differs_and_it_says_why(tour):
    result = compare(tour, ["--SandboxKernel.working_folder=ro"])
    assert result.failure is None and result.cells == 5
    # `!sleep 0 &` is refused in both, with IPython's words; `!ls` lists the same files, one per line here and in
    # columns under ipykernel (its shell runs on a terminal).
    assert [d.index for d in result.differences] == [3], result.differences
    (difference,) = result.differences
    assert difference.source == "!ls"
    assert difference.ours == ["stdout: data.txt\ntour.ipynb"], difference.ours


def test_without_the_working_folder_the_file_cell_differs_with_the_hint(tour):
    result = compare(tour)
    by_index = {d.index: d for d in result.differences}
    assert sorted(by_index) == [1, 3]  # the file, and the folder `!ls` lists
    assert "SandboxKernel.working_folder" in by_index[1].ours[0]


def test_the_command_prints_the_report_and_says_one_line_for_a_missing_notebook(tour, tmp_path):
    written = tmp_path / "report.md"
    done = subprocess.run(
        [CLI, "compare", "--working-folder", "ro", str(tour), "--output", str(written)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (  # said before anything ran
        "sandbox-kernel compare: warning: runs each notebook a second time under plain ipykernel, on this machine, "
        "with no sandbox: only for notebooks you trust"
    )
    assert "| tour.ipynb | 5 | 4 | 1 |" in done.stdout and written.read_text() == done.stdout
    missing = subprocess.run([CLI, "compare", str(tmp_path / "nope.ipynb")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"sandbox-kernel compare: no such notebook: {tmp_path / 'nope.ipynb'}"
