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


def test_the_tour_gives_what_ipykernel_gives(tour):
    """`!ls` lists the files in columns as ipykernel's terminal does; `!sleep 0 &` is refused in IPython's words."""
    result = compare(tour, ["--SandboxKernel.working_folder=ro"])
    assert result.failure is None and result.cells == 5
    assert result.differences == [], result.differences


# The shell cells of two tutorials, in order: the Python Data Science Handbook's "IPython and Shell Commands"
# (jakevdp/PythonDataScienceHandbook, notebooks/01.05, its session) and IPython's own examples/IPython Kernel/
# "Script Magics.ipynb" (without the cells for programs neither kernel has here: python2, ruby).
TUTORIAL_CELLS = [
    '!echo "hello world"', "!pwd", "!ls", "%cd projects", "!pwd", "!ls", "!mkdir myproject", "%cd myproject",
    "!mv ../myproject.txt ./", "!ls", '!echo "printing from the shell"', "contents = !ls", "print(contents)",
    "directory = !pwd", "print(directory)", "type(directory)", 'message = "hello from Python"', "!echo {message}",
    "!pwd", "!cd ..", "!pwd", "%cd ..", "cd myproject", "mkdir tmp", "ls", "cp myproject.txt tmp/", "ls tmp",
    "rm -r tmp", "ls",
    "import sys", "%%script python3\nimport sys\nprint('hello from Python: %s' % sys.version_info[0])",
    '%%bash\necho "hi, stdout"\necho "hello, stderr" >&2\n',
    '%%bash --out output --err error\necho "hi, stdout"\necho "hello, stderr" >&2', "print(error)\nprint(output)",
]  # fmt: skip


def test_the_shell_cells_of_real_tutorials_give_what_ipykernel_gives(tmp_path):
    """Cell by cell the same output, except the working folder's path: the sandbox's is /work."""
    (tmp_path / "projects").mkdir()
    (tmp_path / "projects" / "myproject.txt").write_text("my project\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in TUTORIAL_CELLS]
    nbformat.write(nb, tmp_path / "tutorials.ipynb")
    # The tutorial moves a .txt file about: .txt reaches a host folder only where a mount's suffixes opt in to it.
    opt_in = '--SandboxKernel.mount_limits={"/work": {"suffixes": [".txt"]}}'
    result = compare(tmp_path / "tutorials.ipynb", ["--SandboxKernel.working_folder=rw", opt_in])
    assert result.failure is None and result.cells == len(TUTORIAL_CELLS)
    (first_pwd,) = [d for d in result.differences if d.source == "!pwd"][:1]
    host_folder = first_pwd.reference[0].removeprefix("stdout: ")
    assert first_pwd.ours == ["stdout: /work"], first_pwd.ours
    for difference in result.differences:
        assert [o.replace("/work", host_folder) for o in difference.ours] == difference.reference, difference
    shown = [d.source for d in result.differences]
    assert shown == ["!pwd", "%cd projects", "!pwd", "%cd myproject", "print(directory)", "!pwd", "!pwd", "%cd ..",
                     "cd myproject"], shown  # fmt: skip


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
    assert "| tour.ipynb | 5 | 5 | 0 |" in done.stdout and written.read_text() == done.stdout
    missing = subprocess.run([CLI, "compare", str(tmp_path / "nope.ipynb")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"sandbox-kernel compare: no such notebook: {tmp_path / 'nope.ipynb'}"
