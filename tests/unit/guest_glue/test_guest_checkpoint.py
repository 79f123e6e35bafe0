"""Checkpoints made and applied in the guest (sandbox_guest.checkpoint), on a temporary folder standing for "/"."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
from sandbox_guest import checkpoint

from guest_glue.fake_host import FakeUint8Array


def shout(text: str) -> str:
    return text.upper()


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A sandbox's own files under tmp_path (home, tmp, site-packages and a mount), its environment and sys.path."""
    home = tmp_path / "home" / "pyodide"
    (home / "sub").mkdir(parents=True)
    (home / "notes.txt").write_text("my notes")
    (home / "sub" / "data.bin").write_bytes(bytes(range(256)) * 8)
    (home / "mnt").mkdir()
    (home / "mnt" / "host-file.txt").write_text("the user's own file, mounted")
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / "scratch").write_text("scratch")
    site = tmp_path / "site-packages"
    (site / "sbk_installed").mkdir(parents=True)
    (site / "sbk_installed" / "__init__.py").write_text("VALUE = 42\n")
    roots = [str(tmp_path / "home"), str(tmp_path / "tmp"), str(site)]
    monkeypatch.setattr(checkpoint, "_roots", lambda: roots)
    monkeypatch.chdir(home)
    monkeypatch.setattr(os, "environ", {**os.environ, "SBK_SETTING": "before"})
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    return types.SimpleNamespace(root=tmp_path, home=home, site=site, mount=str(home / "mnt"))


def user_namespace() -> tuple[dict, dict]:
    shared = [1, 2]
    user_ns = {
        "number": 7, "text": "x", "shout": shout, "both": shared, "again": shared, "jsonlib": json,
        "stream": (n for n in range(3)), "_": 5, "__": 4, "_3": 9, "_i2": "x = 1", "_ii": "", "__name__": "__main__",
        "__builtin__": object(), "In": ["", "x = 1"], "device": object(),
    }  # fmt: skip
    hidden = {"In": user_ns["In"], "device": user_ns["device"]}
    return user_ns, hidden


def test_user_names_leave_out_ipython_dunders_and_the_output_cache():
    user_ns, hidden = user_namespace()
    assert checkpoint._user_names(user_ns, hidden) == ["number", "text", "shout", "both", "again", "jsonlib", "stream"]


def test_roots_are_the_sandboxs_own_folders_and_site_packages(monkeypatch):
    monkeypatch.setattr(
        os, "listdir", lambda path: ["tmp", "dev", "home", "lib", "proc", "data"] if path == "/" else []
    )
    monkeypatch.setattr(checkpoint.site, "getsitepackages", lambda: ["/lib/python3.14/site-packages"])
    assert checkpoint._roots() == ["/data", "/home", "/tmp", "/lib/python3.14/site-packages"]


def capture(host, sandbox, part_bytes=100):
    user_ns, hidden = user_namespace()
    summary = checkpoint.capture({"exclude": [sandbox.mount], "part_bytes": part_bytes}, user_ns, hidden)
    return summary, host.blobs()


def test_capture_sends_header_namespace_and_files_in_parts(host, sandbox):
    summary, parts = capture(host, sandbox)
    assert all(0 < len(p) <= 100 for p in parts)
    blob = b"".join(parts)
    head, _, rest = blob.partition(b"\n")
    header = json.loads(head)
    assert header["format"] == checkpoint.FORMAT
    assert header["sections"]["namespace"] + header["sections"]["files"] == len(rest)
    assert header["modules"] == {"jsonlib": "json"}
    assert header["cwd"] == str(sandbox.home)
    assert header["environ"]["SBK_SETTING"] == "before"
    assert header["sys_path"][0] == str(sandbox.site)
    assert summary == {
        "status": "ok",
        "bytes": len(blob),
        "variables": ["again", "both", "jsonlib", "number", "shout", "text"],
        "variable_count": 6,
        "files": 4,  # notes, data.bin, scratch, the package's __init__.py: not the mounted file
        "not_kept": {"stream": "TypeError: cannot pickle 'generator' object"},
    }


def test_a_part_over_the_kernel_limit_fails_the_capture(host, sandbox):
    host.max_event_bytes = 50
    with pytest.raises(ValueError, match="a part of 100 bytes is larger than the sandbox may send at once"):
        capture(host, sandbox, part_bytes=100)


def test_apply_brings_back_files_environment_folder_path_modules_and_variables(host, sandbox, monkeypatch):
    _, parts = capture(host, sandbox)
    (sandbox.home / "notes.txt").write_text("changed after the checkpoint")
    (sandbox.home / "sub" / "data.bin").unlink()
    (sandbox.home / "mnt" / "host-file.txt").write_text("changed on the host")
    os.environ["SBK_SETTING"] = "after"
    monkeypatch.chdir(sandbox.root)
    sys.path.remove(str(sandbox.site))
    sys.path.append(str(sandbox.site))
    user_ns = {"later": 1}
    summary = checkpoint.apply({"exclude": [sandbox.mount]}, user_ns, [FakeUint8Array(p) for p in parts])
    assert summary == {"status": "ok", "variable_count": 6, "files": 4, "not_restored": {}}
    assert (sandbox.home / "notes.txt").read_text() == "my notes"
    assert (sandbox.home / "sub" / "data.bin").read_bytes() == bytes(range(256)) * 8
    assert (sandbox.home / "mnt" / "host-file.txt").read_text() == "changed on the host"  # mounts are not restored
    assert os.environ["SBK_SETTING"] == "before"
    assert Path.cwd() == sandbox.home
    assert sys.path[0] == str(sandbox.site) and sys.path.count(str(sandbox.site)) == 1
    assert user_ns["jsonlib"] is json
    assert user_ns["shout"]("hi") == "HI"
    assert user_ns["both"] is user_ns["again"] == [1, 2]  # shared references survive
    assert (user_ns["number"], user_ns["text"], user_ns["later"]) == (7, "x", 1)
    assert "stream" not in user_ns


def test_apply_leaves_the_mounts_of_this_session_alone(host, sandbox):
    """A checkpoint taken with a folder that is now a mount (a fork with other mounts) does not write into it."""
    user_ns, hidden = user_namespace()
    assert checkpoint.capture({"exclude": []}, user_ns, hidden)["files"] == 5
    (sandbox.home / "mnt" / "host-file.txt").write_text("changed on the host")
    (sandbox.home / "notes.txt").unlink()
    summary = checkpoint.apply({"exclude": [sandbox.mount]}, {}, [FakeUint8Array(p) for p in host.blobs()])
    assert summary["files"] == 4
    assert (sandbox.home / "mnt" / "host-file.txt").read_text() == "changed on the host"
    assert (sandbox.home / "notes.txt").read_text() == "my notes"


def header_and_namespace(header: dict, values: dict) -> list[FakeUint8Array]:
    import io
    import pickle
    import tarfile

    namespace = pickle.dumps(values)
    files = io.BytesIO()
    with tarfile.open(fileobj=files, mode="w"):
        pass
    sections = {"namespace": len(namespace), "files": len(files.getvalue())}
    head = json.dumps({"sections": sections, **header}).encode() + b"\n"
    return [FakeUint8Array(head), FakeUint8Array(namespace + files.getvalue())]


def test_a_module_that_cannot_be_imported_again_is_named(sandbox):
    header = {"format": 1, "modules": {"gone": "sbk_no_such_module", "jsonlib": "json"}, "cwd": "/sbk/absent",
              "environ": {}, "sys_path": []}  # fmt: skip
    user_ns: dict = {}
    summary = checkpoint.apply({}, user_ns, header_and_namespace(header, {"kept": 1}))
    assert summary == {
        "status": "ok",
        "variable_count": 2,
        "files": 0,
        "not_restored": {"gone": "ModuleNotFoundError: No module named 'sbk_no_such_module'"},
    }
    assert user_ns == {"jsonlib": json, "kept": 1}
    assert Path.cwd() == sandbox.home  # a working folder that is gone is not entered


def test_a_checkpoint_of_another_format_is_refused(sandbox):
    parts = header_and_namespace({"format": 2, "modules": {}, "cwd": "/", "environ": {}, "sys_path": []}, {})
    with pytest.raises(ValueError, match=r"^checkpoint format 2 is not 1$"):
        checkpoint.apply({}, {}, parts)


def test_a_file_that_cannot_be_written_back_is_named_with_why(host, sandbox):
    _, parts = capture(host, sandbox)
    (sandbox.home / "sub" / "data.bin").unlink()
    (sandbox.home / "sub").rmdir()
    (sandbox.home / "sub").write_text("a file where the folder was")
    summary = checkpoint.apply({"exclude": [sandbox.mount]}, {}, [FakeUint8Array(p) for p in parts])
    failed = f"/{str(sandbox.home / 'sub' / 'data.bin').lstrip('/')}"
    assert list(summary["not_restored"]) == [failed]
    assert summary["not_restored"][failed].startswith("NotADirectoryError: ")
    assert summary["files"] == 3


def test_the_shells_command_folders_are_left_out_of_a_checkpoint():
    """Before: a checkpoint held the 176 command files of /usr/bin and /bin as the session's own files."""
    listed = json.loads((Path(__file__).parents[3] / "host_ts" / "shell_commands.json").read_text())
    assert {folder.split("/")[1] for folder in listed["folders"]} <= checkpoint.SYSTEM_ROOTS
