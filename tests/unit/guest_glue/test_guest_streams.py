"""The guest's standard streams (sandbox_guest.streams) and clean tracebacks (sandbox_guest.cleantb)."""

from __future__ import annotations

import pytest
from sandbox_guest import _host
from sandbox_guest.cleantb import CleanTraceback
from sandbox_guest.streams import BridgeStream, InputStream


def test_a_bridge_stream_writes_lines_to_the_host(host):
    out = BridgeStream(_host.STDERR, "<stderr>")
    assert (out.name, out.encoding, out.isatty(), out.writable()) == ("<stderr>", "utf-8", False, True)
    assert out.write("half") == 4
    assert out.write("") == 0
    assert host.writes() == []
    out.flush()
    assert out.write("a line\n") == 7
    assert host.writes() == [(_host.STDERR, "half", 0), (_host.STDERR, "a line\n", 0)]


def test_a_bridge_stream_takes_text_only(host):
    with pytest.raises(TypeError, match=r"write\(\) argument must be str, not bytes"):
        BridgeStream(_host.STDOUT, "<stdout>").write(b"x")  # type: ignore[arg-type]


def answers(*lines: str):
    """An `ask` function for InputStream that gives `lines`, then EOF (the frontend's Ctrl-D)."""
    left = list(lines)
    asked: list[int] = []

    def ask() -> str:
        asked.append(1)
        if not left:
            raise EOFError("EOF when reading a line")
        return left.pop(0)

    return ask, asked


def test_stdin_asks_a_line_at_a_time():
    ask, asked = answers("first", "second")
    stdin = InputStream(ask)
    assert (stdin.name, stdin.readable(), stdin.isatty()) == ("<stdin>", True, False)
    assert stdin.readline(3) == "fir"
    assert stdin.readline() == "st\n"
    assert len(asked) == 1  # the rest of the line came from the first answer
    assert stdin.readline() == "second\n"
    assert stdin.readline() == ""  # EOF
    assert stdin.readline() == ""
    assert len(asked) == 3  # EOF is remembered: not asked again


def test_stdin_read_reads_to_eof_or_size():
    ask, _ = answers("a", "b", "c")
    stdin = InputStream(ask)
    assert stdin.read(3) == "a\nb"
    assert stdin.read() == "\nc\n"
    assert stdin.read() == ""


def test_a_new_cell_forgets_eof_and_unread_text():
    ask, _ = answers("unread tail")
    stdin = InputStream(ask)
    assert stdin.readline(6) == "unread"
    stdin.reset()
    assert stdin.readline() == ""  # the ask function is out of lines: EOF
    stdin.reset()
    stdin._ask = lambda: "again"  # the next cell's frontend answers again
    assert stdin.readline() == "again\n"


class Refused(CleanTraceback, PermissionError):
    """An error the sandbox raises on purpose."""


def raise_from_a_cell_and_the_glue(glue_file: str) -> Refused:
    """A Refused raised through a cell's frame and a glue frame (the files named as IPython and the guest do)."""
    namespace: dict = {}
    exec(
        compile("def glue():\n    raise Refused(13, 'not here')\n", glue_file, "exec"), {"Refused": Refused}, namespace
    )
    exec(compile("def cell():\n    glue()\n", "<ipython-input-7-0123abcd>", "exec"), namespace, namespace)
    try:
        namespace["cell"]()
    except Refused as exc:
        return exc
    raise AssertionError("not raised")


def test_a_clean_traceback_shows_the_users_frames_only():
    lines = raise_from_a_cell_and_the_glue("/lib/python3.14/site-packages/sandbox_guest/guards.py")._render_traceback_()
    text = "".join(lines[:-1])
    assert lines[0] == "Traceback (most recent call last):\n"
    assert "Cell In[7], line 2, in cell" in text
    assert "sandbox_guest" not in text and "ipython-input" not in text
    assert lines[-1] == "Refused: [Errno 13] not here"


@pytest.mark.parametrize("internal", ["/x/IPython/core/y.py", "/x/_pyodide/_base.py", "/x/pyodide/ffi.py"])
def test_frames_of_ipython_and_pyodide_are_hidden_too(internal):
    text = "".join(raise_from_a_cell_and_the_glue(internal)._render_traceback_())
    assert internal not in text and "Cell In[7]" in text
