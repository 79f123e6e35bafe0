"""Writes past a mount limit fail in the cell, at the write() that crosses it.

Promise (docs/security.md, "Writes past a limit fail at the write"): a write that would take a host file past
mount_limits' max_file_bytes, or its folder past max_total_bytes or max_growth_bytes, raises OSError in the cell at
that write() (not at a close that may come later, or a garbage collection that only prints "Exception ignored"),
with the limit and the setting that raises it; none of the refused write's bytes reach the host, and nothing fails
again when the file is closed.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from conftest import execute, once_running, sandbox_pids, start_kernel, stop_kernel, value

LIMITS = {
    "/capped": {"max_file_bytes": 1000},
    "/total": {"max_total_bytes": 3000},
    "/grow": {"max_growth_bytes": 2000},
    "/cycle": {"max_growth_bytes": 1000},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {name: tmp_path_factory.mktemp(name) for name in ("capped", "total", "grow", "cycle")}
    (made["total"] / "there.csv").write_bytes(b"t" * 2000)  # counted when the sandbox starts
    return made


@pytest.fixture(scope="module")
def kc(folders):
    mounts = ", ".join(f"'{path}:/{name}:rw'" for name, path in folders.items())
    km, kc = start_kernel([f"--SandboxKernel.mounts=[{mounts}]", f"--SandboxKernel.mount_limits={json.dumps(LIMITS)}"])
    yield kc
    stop_kernel(km, kc)


def test_an_unclosed_write_past_max_file_bytes_fails_at_the_write(kc, folders):
    run = execute(kc, "open('/capped/never_closed.csv', 'w').write('x' * 2000)")
    assert run.content["status"] == "error", run.content
    assert run.content["ename"] == "OSError"
    assert run.content["evalue"] == (
        '[Errno 22] files in /capped may be at most 1000 bytes (SandboxKernel.mount_limits["/capped"]'
        '["max_file_bytes"]); this would make /capped/never_closed.csv 2000 bytes'
    )
    assert "Exception ignored" not in run.stream("stderr"), run.stream("stderr")
    assert (folders["capped"] / "never_closed.csv").read_bytes() == b""  # none of the refused write's bytes
    # The kernel goes on, and a write that fits still works.
    assert value(execute(kc, "open('/capped/never_closed.csv', 'w').write('y' * 1000)")) == "1000"
    assert (folders["capped"] / "never_closed.csv").read_bytes() == b"y" * 1000


@pytest.mark.parametrize("mode", ["w", "wb"])
def test_small_writes_that_cross_max_file_bytes_fail_at_the_one_that_crosses(kc, folders, mode):
    name = f"small_{mode}.csv"
    piece = "'0123456789'" if mode == "w" else "b'0123456789'"
    code = (
        f"f = open('/capped/{name}', '{mode}')\ncount = 0\ntry:\n    for _ in range(200):\n"
        f"        f.write({piece})\n        count += 1\nexcept OSError as e:\n    err = str(e)\nf.close()\ncount, err"
    )
    count, err = eval(value(execute(kc, code)))
    assert count == 100  # the 101st write is the one that would make the file 1010 bytes
    assert err == (
        '[Errno 22] files in /capped may be at most 1000 bytes (SandboxKernel.mount_limits["/capped"]'
        f'["max_file_bytes"]); this would make /capped/{name} 1010 bytes'
    )
    assert (folders["capped"] / name).read_bytes() == b"0123456789" * 100


def test_a_file_open_across_cells_fails_in_the_cell_whose_write_crosses(kc, folders):
    assert execute(kc, "f = open('/capped/across.csv', 'w')\nf.write('a' * 600)").content["status"] == "ok"
    run = execute(kc, "f.write('b' * 600)")
    assert run.content["status"] == "error", run.content
    assert "this would make /capped/across.csv 1200 bytes" in run.content["evalue"], run.content
    run = execute(kc, "f.close()")
    assert run.content["status"] == "ok", run.content  # the refused bytes are not tried again
    assert (folders["capped"] / "across.csv").read_bytes() == b"a" * 600


def test_a_write_past_max_total_bytes_fails_at_the_write(kc, folders):
    run = execute(kc, "open('/total/more.csv', 'w').write('m' * 1500)")
    assert run.content["status"] == "error", run.content
    assert run.content["evalue"] == (
        '[Errno 51] /total may hold at most 3000 bytes of files (SandboxKernel.mount_limits["/total"]'
        '["max_total_bytes"]); it holds 2000, and this would add 1500'
    )
    assert "Exception ignored" not in run.stream("stderr")
    assert (folders["total"] / "more.csv").read_bytes() == b""


def test_a_write_past_max_growth_bytes_fails_at_the_write(kc, folders):
    code = "f = open('/grow/g.csv', 'wb')\nf.write(b'g' * 1500)\nf.write(b'h' * 1000)"
    run = execute(kc, code)
    assert run.content["status"] == "error", run.content
    assert run.content["evalue"] == (
        "[Errno 51] the sandbox may add at most 2000 bytes to /grow (apparent sizes: a sparse file counts at its "
        'full length; SandboxKernel.mount_limits["/grow"]["max_growth_bytes"]); it has added 1500, and this would '
        "add 1000 more (/grow/g.csv)"
    )
    assert execute(kc, "f.close()").content["status"] == "ok"
    assert (folders["grow"] / "g.csv").read_bytes() == b"g" * 1500


# Between the first handle's write and the second open: a chmod by name (with the file open, it changes the file
# being written), or a rename there and back (which puts the bytes written so far at the name).
TOUCH = {
    "chmod": "    os.chmod('/cycle/f.csv', 0o644)\n",
    "rename": "    os.rename('/cycle/f.csv', '/cycle/g.csv')\n    os.rename('/cycle/g.csv', '/cycle/f.csv')\n",
}


@pytest.mark.parametrize("touch", sorted(TOUCH))
def test_rewriting_a_file_while_its_name_changes_gives_back_no_byte_twice(kc, folders, touch):
    """Such cycles gave a file's bytes back twice (at the truncating open and at the close of the handle still
    holding it), or counted bytes a second open had truncated away: a loop of them moved max_growth_bytes."""
    code = (
        "import os\nfor _ in range(5):\n    a = open('/cycle/f.csv', 'wb', buffering=0)\n    a.write(b'a' * 400)\n"
        f"{TOUCH[touch]}    b = open('/cycle/f.csv', 'wb', buffering=0)\n"
        "    os.remove('/cycle/f.csv')\n    a.close()\n    b.close()\nsorted(os.listdir('/cycle'))"
    )
    assert value(execute(kc, code)) == "[]"  # the control: every cycle ran, and left nothing
    assert list(folders["cycle"].iterdir()) == []
    run = execute(kc, f"open('/cycle/big_{touch}.csv', 'wb', buffering=0).write(b'b' * 1500)")
    assert run.content["status"] == "error", run.content
    assert run.content["evalue"] == (
        "[Errno 51] the sandbox may add at most 1000 bytes to /cycle (apparent sizes: a sparse file counts at its "
        'full length; SandboxKernel.mount_limits["/cycle"]["max_growth_bytes"]); it has added 0, and this would '
        f"add 1500 more (/cycle/big_{touch}.csv)"
    )
    assert (folders["cycle"] / f"big_{touch}.csv").read_bytes() == b""
    os.remove(folders["cycle"] / f"big_{touch}.csv")


# ---- a file reaches the host whole or as it was ---------------------------------------------------------------


@pytest.fixture
def out_kernel(tmp_path):
    km, kc = start_kernel([f"--SandboxKernel.mounts=['{tmp_path}:/out:rw']"])
    yield km, kc, tmp_path
    stop_kernel(km, kc)


def test_a_file_open_across_cells_reaches_the_host_whole_when_closed(out_kernel):
    _, kc, folder = out_kernel
    (folder / "table.csv").write_text("old\n")
    code = (
        "f = open('/out/table.csv', 'w')\nf.write('new,1\\n' * 100_000)\nf.flush()\nimport os\n"
        "os.fstat(f.fileno()).st_size, os.path.getsize('/out/table.csv'), open('/out/table.csv').read(), "
        "os.listdir('/out')"
    )
    # The handle has the file being written; its name, in the sandbox as on the host, the old one until it is closed
    # (and the file beside it that takes the bytes is not listed).
    assert value(execute(kc, code)) == "(600000, 4, 'old\\n', ['table.csv'])"
    assert len(list(folder.glob("table.sandbox-partial-*.csv"))) == 1  # the control: it is there, on the host
    assert (folder / "table.csv").read_text() == "old\n"
    assert value(execute(kc, "f.write('new,2\\n')\nf.close()\nos.listdir('/out')")) == "['table.csv']"
    assert (folder / "table.csv").read_text() == "new,1\n" * 100_000 + "new,2\n"
    assert sorted(p.name for p in folder.iterdir()) == ["table.csv"]  # the file written aside was renamed over it


def test_a_sandbox_killed_mid_write_leaves_the_previous_file_whole(out_kernel):
    km, kc, folder = out_kernel
    old = b"previous,content\n" * 1000
    (folder / "big.csv").write_bytes(old)
    code = (
        "f = open('/out/big.csv', 'wb')\nchunk = b'n' * (1 << 20)\nfor _ in range(8):\n    f.write(chunk)\n"
        "f.flush()\nprint('writing', flush=True)\nwhile True:\n    f.write(chunk)\n    f.flush()"
    )
    partial: list[int] = []

    def kill() -> None:
        partial.extend(p.stat().st_size for p in folder.glob("big.sandbox-partial-*.csv"))  # mid-write: bytes aside
        for pid in sandbox_pids(km.provisioner.pid):  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGKILL)

    run = execute(kc, code, timeout=120, on_output=once_running(kill))
    assert run.content["status"] == "error", run.content  # the sandbox was lost with the cell
    assert partial and partial[0] >= 8 << 20, partial  # the control: the kill came while the bytes were going aside
    # The kernel noticed the death and started a new sandbox: by then the file written aside is gone.
    assert value(execute(kc, "import os\nos.listdir('/out')")) == "['big.csv']"
    assert sorted(p.name for p in folder.iterdir()) == ["big.csv"]  # what a host program globbing *.csv sees
    assert (folder / "big.csv").read_bytes() == old  # never part-written


def test_a_sandbox_killed_while_it_writes_several_files_leaves_none_aside(out_kernel):
    km, kc, folder = out_kernel
    (folder / "sub").mkdir()
    (folder / "sub" / "kept.csv").write_text("kept\n")
    code = (
        "fs = [open(f'/out/sub/kept.csv', 'a'), open('/out/sub/second.tsv', 'w'), open('/out/third.csv', 'a')]\n"
        "for f in fs:\n    f.write('x' * 100_000)\n    f.flush()\nprint('writing', flush=True)\n"
        "while True:\n    fs[0].write('y')\n    fs[0].flush()"
    )
    aside: list[str] = []

    def kill() -> None:
        aside.extend(sorted(p.name for p in folder.rglob("*.sandbox-partial-*")))
        for pid in sandbox_pids(km.provisioner.pid):  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGKILL)

    run = execute(kc, code, timeout=120, on_output=once_running(kill))
    assert run.content["status"] == "error", run.content
    assert len(aside) == 3, aside  # the control: each file was being written aside when the process was killed
    assert value(execute(kc, "1 + 1")) == "2"  # the kernel noticed, and runs cells again
    assert not list(folder.rglob("*.sandbox-partial-*")), list(folder.rglob("*"))
    assert (folder / "sub" / "kept.csv").read_text() == "kept\n"


def test_a_sandbox_killed_while_it_writes_a_new_file_leaves_nothing_at_its_name(out_kernel):
    km, kc, folder = out_kernel
    code = (
        "f = open('/out/new.csv', 'wb')\nchunk = b'n' * (1 << 20)\nfor _ in range(4):\n    f.write(chunk)\n"
        "f.flush()\nprint('writing', flush=True)\nwhile True:\n    f.write(chunk)\n    f.flush()"
    )
    seen: list[tuple[str, int]] = []

    def kill() -> None:
        seen.extend(sorted((p.name, p.stat().st_size) for p in folder.iterdir()))  # mid-write: the name, empty
        for pid in sandbox_pids(km.provisioner.pid):  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGKILL)

    run = execute(kc, code, timeout=120, on_output=once_running(kill))
    assert run.content["status"] == "error", run.content
    # The control: the name was made on the host (empty) and the bytes were going aside when the process was killed.
    assert [name for name, _ in seen] == ["new.csv", seen[1][0]] and seen[0][1] == 0, seen
    assert seen[1][0].startswith("new.sandbox-partial-") and seen[1][1] >= 4 << 20, seen
    assert value(execute(kc, "import os\nos.listdir('/out')")) == "[]"
    assert list(folder.iterdir()) == []  # a new file reaches the host whole or not at all


def test_a_new_file_closed_before_the_sandbox_is_killed_stays_whole(out_kernel):
    km, kc, folder = out_kernel
    code = (
        "with open('/out/done.csv', 'wb') as f:\n    f.write(b'd' * 100_000)\n"
        "open('/out/empty.csv', 'w').close()\nprint('written', flush=True)\nwhile True:\n    pass"
    )

    def kill() -> None:
        for pid in sandbox_pids(km.provisioner.pid):  # type: ignore[attr-defined]
            os.kill(pid, signal.SIGKILL)

    run = execute(kc, code, timeout=120, on_output=once_running(kill))
    assert run.content["status"] == "error", run.content
    assert value(execute(kc, "import os\nsorted(os.listdir('/out'))")) == "['done.csv', 'empty.csv']"
    assert (folder / "done.csv").read_bytes() == b"d" * 100_000
    assert (folder / "empty.csv").read_bytes() == b""  # closed empty: whole as written, kept
