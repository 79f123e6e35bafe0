"""How `sandbox-kernel compare` reduces outputs to text before comparing (no kernels here)."""

from __future__ import annotations

from sandbox_kernel.cli.compare import CellDifference, Comparison, _merged, normalised, report


def test_addresses_colours_and_trailing_spaces_do_not_count() -> None:
    ours = {"output_type": "execute_result", "data": {"text/plain": "<object at 0x7f3a2b1c>  \n  x\t"}}
    theirs = {"output_type": "execute_result", "data": {"text/plain": "\x1b[31m<object at 0x1a6c2b8>\x1b[0m\n  x"}}
    assert normalised(ours) == normalised(theirs) == "text/plain: <object at 0x...>\n  x"


def test_errors_compare_by_name_and_message_not_frames() -> None:
    ours = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": ["Cell In[1], line 1"]}
    theirs = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": ["/tmp/ipykernel_1/2.py"]}
    assert normalised(ours) == normalised(theirs) == "error: ValueError: bad"
    assert normalised({**ours, "evalue": "other"}) != normalised(theirs)


def test_stream_chunks_of_one_name_are_joined() -> None:
    chunks = [
        {"output_type": "stream", "name": "stdout", "text": "a\n"},
        {"output_type": "stream", "name": "stdout", "text": "b\n"},
        {"output_type": "stream", "name": "stderr", "text": "w\n"},
    ]
    assert _merged(chunks) == ["stdout: a\nb", "stderr: w"]
    assert chunks[0]["text"] == "a\n"  # the notebook's own outputs are left as they were


def test_the_report_lists_each_difference_under_its_notebook(tmp_path) -> None:
    found = Comparison(tmp_path / "tour.ipynb", cells=3, differences=[CellDifference(2, "!ls", ["error: X"], [])])
    failed = Comparison(tmp_path / "broken.ipynb", failure="DeadKernelError: gone")
    text = report([found, failed])
    assert (
        "| tour.ipynb | 3 | 2 | 1 |" in text and "| broken.ipynb | - | - | did not run: DeadKernelError: gone |" in text
    )
    assert "### tour.ipynb, code cell 2" in text and "    error: X" in text and "    (no output)" in text


def help_of(argv: list[str], capsys) -> str:
    """What `sandbox-kernel ARGV` prints, as one line (argparse wraps it to the terminal's width)."""
    import pytest

    from sandbox_kernel.cli.main import main

    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_says_in_plain_words_that_the_reference_run_has_no_sandbox(capsys) -> None:
    assert (
        "Runs each notebook in the sandbox; then runs each notebook a second time under plain ipykernel, on this "
        "machine, with no sandbox (its code can read and change your files, use the network and run programs): only "
        "for notebooks you trust." in help_of(["compare", "--help"], capsys)
    )
    assert (
        "compare run notebooks in the sandbox and again under plain ipykernel with NO sandbox (trusted notebooks "
        "only)" in help_of(["--help"], capsys)
    )


def test_a_warning_goes_to_stderr_before_anything_runs(capsys, tmp_path, monkeypatch) -> None:
    import pytest

    from sandbox_kernel.cli import compare as compare_module
    from sandbox_kernel.cli.main import main

    notebook = tmp_path / "nb.ipynb"
    notebook.write_text("{}")
    warned_before_running: list[str] = []

    def fake_compare(path, settings):
        warned_before_running.append(capsys.readouterr().err)  # what stderr held when the runs began
        return Comparison(path, cells=0)

    monkeypatch.setattr(compare_module, "compare", fake_compare)
    with pytest.raises(SystemExit):
        main(["compare", str(notebook)])
    assert warned_before_running == [
        "sandbox-kernel compare: warning: runs each notebook a second time under plain ipykernel, on this machine, "
        "with no sandbox: only for notebooks you trust\n"
    ]
