"""The guards (sandbox_guest.guards): errors that say what the sandbox allows, and the host's reasons in them."""

from __future__ import annotations

import asyncio
import builtins
import errno
import io
import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from sandbox_guest import guards

from guest_glue.fake_host import GUEST_DIR

ROOTS = (
    "Host folders visible here (SandboxKernel.mounts): readable: /data, /out, /work; writable: /out, /work. "
    "The sandbox's own scratch space (in memory, lost on restart): /tmp, /home/pyodide."
)


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> guards.Limits:
    """A read-only /data, a size-limited /out and a plain read-write /work; the sandbox's own top-level folders."""
    mounts = [
        {"guest": "/data", "writable": False},
        {"guest": "/out", "writable": True, "limited": True},
        {"guest": "/work", "writable": True},
    ]
    own = ("data", "dev", "home", "lib", "out", "proc", "share", "tmp", "usr", "work")
    new = guards.Limits(mounts=mounts, allow_net=["example.org:443"], memory_limit_mb=512, own_roots=own)
    monkeypatch.setattr(guards, "LIMITS", new)
    return new


def refused(path, writing=False) -> str:
    """A read refused is a PermissionError (EACCES); a write, what Linux gives on a read-only file system (EROFS)."""
    kind, number = (guards.OSError, errno.EROFS) if writing else (guards.PermissionError, errno.EACCES)
    with pytest.raises(OSError) as caught:
        guards.check_path(path, writing)
    assert type(caught.value) is kind and caught.value.errno == number
    return f"{caught.value.filename}: {caught.value.strerror}"


def test_writing_to_a_read_only_mount_is_left_to_the_overlay(limits):
    """A write to a read-only mount stays in the sandbox's layer over it (rwfs.ts): the guards let it through."""
    guards.check_path("/data/in.txt", True)
    guards.check_path(b"/data/sub/../x", True)
    guards.check_path("/data/in.txt", False)  # reading is allowed
    guards.check_path(Path("/out/new.txt"), True)
    guards.check_path("/work", True)


def test_a_host_path_is_not_in_the_sandbox(limits):
    assert refused("/etc/passwd") == f"/etc/passwd: '/etc/passwd' is not in the sandbox: the host's files are not visible here. {ROOTS}"  # fmt: skip
    assert refused("/out/../etc/passwd", True).startswith(
        "/etc/passwd: Read-only file system: '/etc/passwd' is not in the sandbox"
    )
    assert refused("/database").startswith("/database: '/database' is not in the sandbox")  # not under /data
    for allowed in ("/", "/tmp/x", "/home/pyodide/y", 3):
        guards.check_path(allowed, True)


def test_relative_paths_are_judged_from_the_working_folder(limits, monkeypatch):
    monkeypatch.setattr(guards, "_getcwd", lambda: "/sbk-nowhere")
    assert refused("x.txt", writing=True).startswith(
        "/sbk-nowhere/x.txt: Read-only file system: '/sbk-nowhere/x.txt' is not in the sandbox"
    )
    monkeypatch.setattr(guards, "_getcwd", lambda: "/home/pyodide")
    guards.check_path("x.txt", True)


def test_before_install_nothing_is_refused_for_being_outside(monkeypatch):
    monkeypatch.setattr(guards, "LIMITS", guards.Limits())
    guards.check_path("/etc/passwd", True)
    assert "readable: none; writable: none" in guards.roots_text()


@pytest.mark.parametrize(
    ("event", "args", "message"),
    [
        ("open", ("/etc/shadow", "r", os.O_RDONLY), "'/etc/shadow' is not in the sandbox"),
        ("os.symlink", ("/etc", "/out/etc", -1), "'/etc' is not in the sandbox"),
        ("shutil.copyfile", ("/etc/hosts", "/out/b"), "'/etc/hosts' is not in the sandbox"),
        ("os.listdir", ("/etc",), "'/etc' is not in the sandbox"),
        ("os.scandir", (b"/root",), "'/root' is not in the sandbox"),
    ],
)
def test_the_audit_hook_refuses(limits, event, args, message):
    with pytest.raises(PermissionError, match=message):
        guards._audit(event, args)


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("open", ("/data/a", "r", os.O_RDONLY)),
        ("open", ("/data/a", "w", 0)),  # a read-only mount's writes stay in the sandbox's layer
        ("os.remove", ("/data/a", -1)),
        ("shutil.copyfile", ("/out/a", "/data/b")),
        ("open", (None, "r", 0)),  # an open file descriptor
        ("open", (5, "w", os.O_WRONLY)),
        ("shutil.copyfile", ("/data/a", "/out/b")),
        ("os.listdir", (4,)),
        ("os.remove", (7, -1)),
        ("socket.connect", ("/etc/x",)),  # not a file event
    ],
)
def test_the_audit_hook_lets_pass(limits, event, args):
    guards._audit(event, args)


def test_a_relative_symlink_target_is_judged_from_the_links_folder(limits, monkeypatch):
    """os.symlink's relative target is relative to the folder the link is in, not to the working folder."""
    monkeypatch.setattr(guards, "_getcwd", lambda: "/home/pyodide/a/b/c")
    with pytest.raises(PermissionError, match="'/etc' is not in the sandbox"):
        guards._audit("os.symlink", ("../../../../etc", "/out/link", None))  # from the cwd: /home, allowed
    with pytest.raises(PermissionError, match="'/etc/passwd' is not in the sandbox"):
        guards._audit("os.symlink", (b"../../etc/passwd", "../../../../x/link", None))  # the link: /home/x/link
    monkeypatch.setattr(guards, "_getcwd", lambda: "/sbk-nowhere")
    guards._audit("os.symlink", ("data.csv", "/out/link", None))  # /out/data.csv (from the cwd: refused)
    guards._audit("os.symlink", (b"../data/a", b"/out/link", None))  # /data/a
    guards._audit("os.symlink", ("../home", "/tmp/link", None))  # /home


def test_explained_puts_the_host_reason_in_the_same_kind_of_error(host):
    host.refusals = ["/out/big.bin would be over 1 MiB (SandboxKernel.mount_limits)"]
    error = guards.explained(builtins.PermissionError(13, "Permission denied", "/out/big.bin"))
    assert isinstance(error, guards.PermissionError)
    assert (error.errno, error.strerror, error.filename) == (
        13, "/out/big.bin would be over 1 MiB (SandboxKernel.mount_limits)", "/out/big.bin"
    )  # fmt: skip
    host.refusals = ["no .exe files on /out"]
    error = guards.explained(builtins.OSError(27, "File too large", "/out/x.exe"))
    assert type(error) is guards.OSError
    assert (error.errno, error.strerror, error.filename) == (27, "no .exe files on /out", "/out/x.exe")


def test_explained_without_a_refusal_is_the_error_itself(host):
    original = builtins.OSError(5, "I/O error")
    assert guards.explained(original) is original


class RefusingFile:
    """A file on a mount whose writes the host refuses (it leaves its reason, then the call fails)."""

    def __init__(self, host, reason: str) -> None:
        self.host, self.reason, self.closed, self.lines = host, reason, False, ["a\n", "b\n"]

    def write(self, data):
        self.host.refusals.append(self.reason)
        raise builtins.OSError(27, "File too large")

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.host.refusals.append(self.reason)
        raise builtins.OSError(27, "File too large")

    def __iter__(self):
        return iter(self.lines)


def test_explained_file_raises_the_fresh_reason_not_a_stale_one(host):
    host.refusals = ["stale: an earlier refusal nobody read"]
    file = guards.ExplainedFile(RefusingFile(host, "over the 10 byte limit"))
    with pytest.raises(guards.OSError, match="over the 10 byte limit") as caught:
        file.write("x" * 20)
    assert caught.value.__suppress_context__  # shown without the original error
    assert file.lines == ["a\n", "b\n"]  # other attributes pass through
    assert list(file) == ["a\n", "b\n"]
    file.close()
    assert file.closed


@pytest.mark.parametrize(("mode", "piece", "room", "buffered"), [("wb", b"abcd", 10, 2), ("w", "abcd", 30, 1)])
def test_explained_file_buffers_writes_only_while_they_fit_the_hosts_room(host, tmp_path, mode, piece, room, buffered):
    """A write waits in Python's buffer only while all written since the host's last answer surely fits the room it
    reported (text: counted at 4 bytes a character, and 4 more); the one that may not goes to the host at once, so
    the host's refusal (or not) is that write's."""
    path = tmp_path / "out.csv"
    real = open(path, mode)
    host.rooms[real.fileno()] = room
    file = guards.ExplainedFile(real)
    for _ in range(buffered):
        file.write(piece)
    assert path.read_bytes() == b""  # still in Python's buffer
    file.write(piece)  # may not fit: this one and all before it go to the host now
    assert path.read_bytes() == b"abcd" * (buffered + 1)
    assert file.tell() == 4 * (buffered + 1)  # the buffered layer knows where the file is
    host.rooms[real.fileno()] = 1000  # the host's answer after that write: writes wait in the buffer once more
    file.write(piece)
    assert path.read_bytes() == b"abcd" * (buffered + 1)
    file.close()
    assert path.read_bytes() == b"abcd" * (buffered + 2)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "utf-32", "utf-8"])
@pytest.mark.parametrize("rooms", [(0, 0, 1000, 0), (1000, 0, 1000, 0)])
def test_explained_file_writes_text_as_the_text_layer_would(host, tmp_path, encoding, rooms):
    """Writes that go to the host at once (no room) and writes that wait in Python's buffer, in any order, leave the
    bytes a plain file gets: one BOM at the start, not one per write."""
    pieces = ["ab\n", "cd", "é\n", "f"]
    expected = tmp_path / "plain.txt"
    with open(expected, "w", encoding=encoding, newline="\r\n") as plain:
        for piece in pieces:
            plain.write(piece)
    path = tmp_path / "out.txt"
    real = open(path, "w", encoding=encoding, newline="\r\n")
    file = guards.ExplainedFile(real, newline="\r\n")  # as the guarded open() makes it
    for piece, room in zip(pieces, rooms, strict=True):
        host.rooms[real.fileno()] = room
        file._room, file._pending = room, 0  # the host's answer after the last write
        assert file.write(piece) == len(piece)
    file.close()
    assert path.read_bytes() == expected.read_bytes()
    with open(path, "a", encoding=encoding) as again:  # appending later: no BOM mid-file either
        host.rooms[again.fileno()] = 0
        guards.ExplainedFile(again).write("g")
    assert path.read_bytes().decode(encoding) == "ab\r\ncdé\r\nfg"


def test_explained_file_returns_the_bytes_of_a_buffer_as_io_does(host, tmp_path):
    import array

    items = memoryview(array.array("i", [1, 2, 3]))
    real = open(tmp_path / "out.bin", "wb")
    host.rooms[real.fileno()] = 0
    with guards.ExplainedFile(real) as file:
        assert file.write(items) == io.BytesIO().write(items) == items.nbytes == 12
    with pytest.raises(TypeError, match="must be str, not bytes"):
        with open(tmp_path / "out.txt", "w") as text:
            host.rooms[text.fileno()] = 0
            guards.ExplainedFile(text).write(b"x")


def test_explained_file_explains_a_refusal_on_closing_a_with_block(host):
    with pytest.raises(guards.OSError, match="over quota"):
        with guards.ExplainedFile(RefusingFile(host, "over quota")) as file:
            assert isinstance(file, guards.ExplainedFile)


def test_explain_wraps_an_os_function(host):
    def mkdir(path, mode=0o777):
        """Make a folder."""
        if path == "/out/refused":
            host.refusals.append("folders named 'refused' are not allowed here")
            raise builtins.PermissionError(13, "Permission denied", path)
        return f"made {path}"

    wrapped = guards._explain(mkdir)
    assert (wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == ("mkdir", "Make a folder.", mkdir)
    assert wrapped("/out/ok", mode=0o700) == "made /out/ok"
    with pytest.raises(guards.PermissionError, match="folders named 'refused' are not allowed here"):
        wrapped("/out/refused")


def test_guard_os_wraps_the_functions_that_change_files(host, monkeypatch):
    for name in guards._EXPLAINED_OS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, getattr(os, name))  # put back after the test
    originals = {name: getattr(os, name) for name in guards._EXPLAINED_OS if hasattr(os, name)}
    guards._guard_os()
    for name, original in originals.items():
        assert getattr(os, name).__wrapped__ is original


def test_missing_file_hint(limits, monkeypatch):
    monkeypatch.setattr(guards, "_getcwd", lambda: "/home/pyodide")
    hint = guards.missing_file_hint("data.csv")
    assert hint is not None
    assert hint.startswith("The sandbox's working folder is /home/pyodide, its own (host files are not there).")
    assert "SandboxKernel.working_folder = 'ro'" in hint
    assert "SandboxKernel.mounts = ['host_folder:/data'], then open('/data/...')" in hint
    assert guards.missing_file_hint(Path("sub/data.csv")) == hint
    assert guards.missing_file_hint("/home/pyodide/data.csv") is None  # absolute: an ordinary miss
    assert guards.missing_file_hint(b"data.csv") is None
    assert guards.missing_file_hint(3) is None
    monkeypatch.setattr(guards, "_getcwd", lambda: "/work/notebooks")  # the working folder is a host folder
    assert guards.missing_file_hint("data.csv") is None


def test_a_path_above_the_working_folder_says_how_to_show_it(limits, monkeypatch):
    monkeypatch.setattr(guards, "_getcwd", lambda: "/work")  # working_folder: a host folder
    hint = guards.missing_file_hint("../data.txt")
    assert hint is not None and hint.startswith("The path goes above the working folder /work")
    assert "SandboxKernel.project_folder = '..'" in hint
    assert guards.missing_file_hint("sub/../data.txt") is None  # still inside: an ordinary miss
    assert guards.missing_file_hint("../data/x.csv") is None  # in another mount
    with pytest.raises(PermissionError, match=r"'/data.txt' is not in the sandbox.*project_folder = '\.\.'"):
        guards.check_path("../data.txt", False)
    with pytest.raises(PermissionError, match="not in the sandbox") as refused:
        guards.check_path("/data.txt", False)  # absolute: no word about the working folder
    assert "project_folder" not in str(refused.value)
    limits.mounts = [{"guest": "/project", "writable": False}, {"guest": "/project/nb", "writable": True}]
    monkeypatch.setattr(guards, "_getcwd", lambda: "/project/nb")
    assert guards._mount_of("/project/nb/x")["writable"] is True  # the innermost mount
    assert guards.missing_file_hint("../data.txt") is None  # in the project folder
    hint = guards.missing_file_hint("../../data.txt")
    assert hint is not None and hint.startswith("The path goes above /project, the folder SandboxKernel.project_folder")


def test_the_guards_do_not_use_what_guest_code_replaces(limits, monkeypatch):
    """A notebook that replaces os functions changes neither the guards' checks nor their words."""
    monkeypatch.setattr(guards, "_getcwd", lambda: "/home/pyodide")  # the real working folder

    def broken(*args, **kwargs):
        raise ZeroDivisionError

    for name in ("getcwd", "fspath", "fsdecode", "listdir"):
        monkeypatch.setattr(os, name, broken)
    for name in ("join", "normpath", "isabs", "abspath"):
        monkeypatch.setattr(os.path, name, broken)
    with pytest.raises(PermissionError, match=r"^\[Errno 13\] '/etc/passwd' is not in the sandbox"):
        guards.check_path(b"/etc/../etc/passwd", False)
    hint = guards.missing_file_hint("data.csv")
    assert hint is not None and hint.startswith("The sandbox's working folder is /home/pyodide, its own")
    guards._audit("open", ("/tmp/x", "r", 0))  # allowed: no error


def test_an_error_inside_the_guards_does_not_escape_the_audit_hook(limits, monkeypatch):
    monkeypatch.setattr(guards, "_getcwd", lambda: 1 / 0)  # e.g. the working folder was removed
    guards._audit("open", ("relative.txt", "r", 0))  # Deno's permissions still decide; nothing raised here
    with pytest.raises(PermissionError):
        guards._audit("open", ("/etc/passwd", "r", 0))  # an absolute path needs no working folder


@pytest.fixture
def guarded_open(host, monkeypatch):
    """guards._guard_open applied (builtins.open, io.open and IPython's io_open put back after the test)."""
    import IPython.core.interactiveshell as ipython_shell

    monkeypatch.setattr(builtins, "open", builtins.open)
    monkeypatch.setattr(io, "open", io.open)
    monkeypatch.setattr(ipython_shell, "io_open", ipython_shell.io_open)

    def apply():
        guards._guard_open()
        assert io.open is builtins.open is ipython_shell.io_open
        return builtins.open

    return apply


def test_open_of_a_missing_relative_file_says_where_the_sandbox_looks(limits, guarded_open, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    guarded = guarded_open()
    with pytest.raises(FileNotFoundError) as caught:
        guarded("data.csv")
    assert caught.value.filename == "data.csv"
    assert caught.value.strerror.startswith(f"No such file or directory. The sandbox's working folder is {tmp_path}")
    with pytest.raises(FileNotFoundError) as caught:
        guarded(str(tmp_path / "data.csv"))
    assert caught.value.strerror == "No such file or directory"


def test_open_for_writing_on_a_limited_mount_explains_refusals(host, guarded_open, tmp_path, monkeypatch):
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir(), work.mkdir()
    mounts = [{"guest": str(out), "writable": True, "limited": True}, {"guest": str(work), "writable": True}]
    monkeypatch.setattr(guards, "LIMITS", guards.Limits(mounts=mounts))
    guarded = guarded_open()
    with guarded(out / "a.txt", "w") as file:
        assert isinstance(file, guards.ExplainedFile)
        file.write("kept")
    assert (out / "a.txt").read_text() == "kept"
    with guarded(out / "a.txt") as file:  # reading: the plain file
        assert not isinstance(file, guards.ExplainedFile)
    with guarded(work / "b.txt", "w") as file:  # no limits on /work: nothing to explain
        assert not isinstance(file, guards.ExplainedFile)


def test_open_refused_by_the_host_carries_its_reason(host, guarded_open, monkeypatch):
    def refusing_open(file, mode="r", *args, **kwargs):
        host.refusals.append("'.exe' files may not be written to /out (SandboxKernel.mount_limits)")
        raise builtins.PermissionError(13, "Permission denied", file)

    monkeypatch.setattr(io, "open", refusing_open)
    guarded = guarded_open()
    host.refusals = ["stale"]
    with pytest.raises(guards.PermissionError, match=r"'\.exe' files may not be written to /out") as caught:
        guarded("/out/x.exe", "wb")
    assert caught.value.filename == "/out/x.exe"


def test_a_blocked_fetch_names_the_allowed_hosts(limits, fake_pyodide):
    guards._guard_fetch()
    pyfetch = sys.modules["pyodide.http"].pyfetch
    fake_pyodide.fetch_error = RuntimeError('TypeError: NotCapable: Requires net access to "evil.example:443"')
    with pytest.raises(PermissionError) as caught:
        asyncio.run(pyfetch("https://evil.example/x", method="GET"))
    assert str(caught.value) == (
        "network access to evil.example is blocked (RuntimeError). Hosts the sandbox may reach "
        "(SandboxKernel.allow_net): example.org:443. Loopback and private addresses stay blocked unless listed."
    )
    fake_pyodide.fetch_error = ValueError("bad header")
    with pytest.raises(ValueError, match="bad header"):
        asyncio.run(pyfetch("https://example.org/"))
    fake_pyodide.fetch_error = None
    assert asyncio.run(pyfetch("https://example.org/", method="POST")) == {"fetched": "https://example.org/"}
    assert fake_pyodide.record[-1] == ("pyfetch", "https://example.org/", {"method": "POST"})


def test_urllib_says_to_use_pyfetch(limits, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", urllib.request.urlopen)
    guards._guard_urllib()
    with pytest.raises(guards.OSError) as caught:
        urllib.request.urlopen(urllib.request.Request("https://example.org/data"))
    assert str(caught.value) == (
        "urllib cannot open connections in the sandbox (no sockets): use "
        "`await pyodide.http.pyfetch('https://example.org/data')`. Allowed hosts (SandboxKernel.allow_net): "
        "example.org:443"
    )


def test_memory_message_names_the_setting(limits):
    assert guards.memory_message() == (
        "the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb=512 MiB (raise it to allow more)"
    )


def test_a_size_wasm32_cannot_address_is_shown_as_the_memory_error(limits):
    shown = guards.budget_error(OverflowError, OverflowError("cannot fit 'int' into an index-sized integer"))
    assert type(shown) is MemoryError
    assert str(shown) == (
        "the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb=512 MiB (raise it to allow more); "
        "no size or count of 2**31 or more fits its 32-bit (wasm32) memory at all"
    )


def test_a_memory_error_names_what_the_files_hold_when_it_is_much(limits, host):
    assert str(guards.budget_error(MemoryError, MemoryError())) == guards.memory_message()
    host.files_held_mib = 200
    assert str(guards.budget_error(MemoryError, MemoryError())) == (
        "the sandbox ran out of memory: its limit is SandboxKernel.memory_limit_mb=512 MiB (raise it to allow more); "
        "the sandbox's in-memory files hold 200 MiB of it (delete files in /tmp or /home/pyodide to free it)"
    )


@pytest.mark.parametrize(
    ("etype", "evalue"),
    [
        (OverflowError, OverflowError("math range error")),
        (IndexError, IndexError("cannot fit 'int' into an index-sized integer")),
        (ValueError, ValueError("cannot fit 'int' into an index-sized integer")),
    ],
)
def test_other_errors_are_no_budget_errors(limits, host, etype, evalue):
    assert guards.budget_error(etype, evalue) is None


def test_full_files_show_the_budgets_reason_with_enospc(limits, host):
    host.files_full_reasons = ["the sandbox's in-memory files are full: ..."]
    shown = guards.budget_error(OSError, OSError(errno.ENOSPC, "No space left on device"))
    assert type(shown) is builtins.OSError and shown.errno == errno.ENOSPC
    assert str(shown) == f"[Errno {errno.ENOSPC}] the sandbox's in-memory files are full: ..."
    # ENOSPC the budget did not give (none since): shown as it is
    assert guards.budget_error(OSError, OSError(errno.ENOSPC, "No space left on device")) is None
    assert guards.budget_error(OSError, OSError(errno.EACCES, "denied")) is None
    assert host.calls().count("files_full") == 2  # only for ENOSPC


def test_a_host_folders_enospc_keeps_its_own_reason_after_a_caught_budget_refusal(limits, host):
    """A cell caught the in-memory files' ENOSPC (its refusal was never shown), then a host folder's
    max_total_bytes refused a write: that error says so, not the memory budget's words."""
    host.files_full_reasons = ["the sandbox's in-memory files are full: ..."]
    mount_full = OSError(errno.ENOSPC, "mount /data: SandboxKernel.mount_limits max_total_bytes=10 would be passed")
    assert guards.budget_error(OSError, mount_full) is None
    # the stale refusal went with it: a later bare ENOSPC the budget did not give is shown as it is
    assert guards.budget_error(OSError, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))) is None


INSTALL_CHILD = """
import builtins, json, os, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from guest_glue.fake_host import FakeHost, FakePyodide
sys.modules.update(FakePyodide().modules())
sys.modules["_sandbox_host"] = FakeHost()
from sandbox_guest import _host, guards
_host.attach()
guards.install({"mounts": [{"guest": "/data", "writable": False}], "memory_limit_mb": 256})
first_open = builtins.open
guards.install({"mounts": [{"guest": "/data", "writable": False}], "allow_net": ["example.org"]})
seen = {"open_replaced_once": builtins.open is first_open, "own_roots": guards.LIMITS.own_roots,
        "memory_limit_mb": guards.LIMITS.memory_limit_mb, "allow_net": guards.LIMITS.allow_net}
for name, attempt in [
    ("host_path", lambda: os.listdir("/sbk-no-such-top-level-folder")),
]:
    try:
        attempt()
        seen[name] = "allowed"
    except PermissionError as exc:
        seen[name] = [type(exc).__module__, exc.strerror.split(". ")[0]]
import errno, socket
with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    try:
        server.listen()
        seen["listen"] = "allowed"
    except OSError as exc:
        seen["listen"] = [exc.errno == errno.EOPNOTSUPP, str(exc)]
print(json.dumps(seen))
"""


def test_install_guards_every_open_and_change_once(tmp_path):
    """guards.install for real (its audit hook cannot be removed, so in a child process)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(INSTALL_CHILD), str(GUEST_DIR), str(Path(__file__).parents[1])],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen.pop("open_replaced_once") is True  # the second install changes the limits, not the guards
    own_roots = seen.pop("own_roots")
    assert {"tmp", "home", "lib", "dev", "proc", "share"} <= set(own_roots)
    assert set(os.listdir("/")) - {""} <= set(own_roots)
    assert seen == {
        "memory_limit_mb": 0,
        "allow_net": ["example.org"],
        "host_path": ["sandbox_guest.guards", "'/sbk-no-such-top-level-folder' is not in the sandbox: the host's files are not visible here"],
        "listen": [True, f"[Errno {errno.EOPNOTSUPP}] socket.listen: the sandbox accepts no connections: it has no server "
                   "sockets (neither has Pyodide in a browser). It may fetch from the hosts of SandboxKernel.allow_net "
                   "with `await pyodide.http.pyfetch(url)`; allowed now: example.org"],
    }  # fmt: skip


def test_the_shell_is_refused_in_the_words_python_is(limits):
    """guards.write_refusal (what the shell's file system asks, pyodide_fs.ts) is check_path's refusal, word for word."""
    with pytest.raises(OSError) as caught:
        guards.check_path("/etc/zz", True)
    assert guards.write_refusal("/etc/zz") == caught.value.strerror
    assert caught.value.strerror.startswith("Read-only file system: '/etc/zz' is not in the sandbox")
    assert guards.write_refusal("/tmp/fine") == guards.write_refusal("/data/x.csv") == ""  # let through
    assert guards.write_refusal("relative") == ""  # the shell gives absolute paths


def test_hints_name_settings_as_the_kernels_launcher_writes_them(limits, monkeypatch):
    """Started by `sandbox-kernel run`: its flags, and --SandboxKernel.name=value for the rest; else the settings."""
    assert guards.assigned("working_folder", "ro") == "SandboxKernel.working_folder = 'ro'"
    monkeypatch.setattr(limits, "names", {"mounts": "--mount", "working_folder": "--working-folder"})
    monkeypatch.setattr(limits, "other", "--SandboxKernel.{name}")
    assert guards.assigned("working_folder", "ro") == "--working-folder ro"
    assert guards.assigned("mounts", ["host_folder:/data"]) == "--mount host_folder:/data"
    assert guards.assigned("project_folder", "..") == "--SandboxKernel.project_folder='..'"
    assert guards.roots_text().startswith("Host folders visible here (--mount): ")
