"""Unit tests of pure logic: history queries, framing, allow-lists, mounts."""

from __future__ import annotations

import asyncio
import re
import struct

import pytest

from sandbox_kernel.jupyter.history import History
from sandbox_kernel.protocol import frames


def make_history() -> History:
    history = History(session=7)
    for line, source in enumerate(["a = 1", "print(a)", "a = 1", "b = a + 1", "print(b)"], start=1):
        history.add(line, source)
    return history


def test_history_tail_range_search():
    history = make_history()
    assert history.query("tail", n=2) == [[7, 4, "b = a + 1"], [7, 5, "print(b)"]]
    assert [h[2] for h in history.query("tail", n=10, unique=True)] == ["print(a)", "a = 1", "b = a + 1", "print(b)"]
    assert history.query("range", session=7, start=2, stop=4) == [[7, 2, "print(a)"], [7, 3, "a = 1"]]
    assert history.query("range", session=0, start=5, stop=6) == [[7, 5, "print(b)"]]
    assert [h[2] for h in history.query("search", pattern="print*")] == ["print(a)", "print(b)"]
    assert len(history.query("search", pattern="a = 1", unique=True)) == 1
    assert len(history.query("search", pattern="*", n=3)) == 3
    entry = history.entries[0]
    entry.output = "1"
    assert history.query("tail", n=5, output=True)[0] == [7, 1, ("a = 1", "1")]
    with pytest.raises(ValueError, match="tail, range or search"):
        history.query("sideways")


def read(data: bytes, limit: int) -> frames.Frame:
    async def go() -> frames.Frame:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await frames.read_frame(reader, limit)

    return asyncio.run(go())


def test_frames_round_trip_and_limits():
    frame = read(frames.encode_frame(frames.STDOUT, 9, b"hello"), 100)
    assert (frame.kind, frame.request_id, frame.payload) == (frames.STDOUT, 9, b"hello")
    with pytest.raises(frames.FrameError, match="exceeds the limit"):
        read(frames.encode_frame(frames.STDOUT, 1, b"x" * 101), 100)
    with pytest.raises(frames.FrameError, match="frame length 3 is shorter than its kind and request id"):
        read(struct.pack(">IBI", 3, frames.STDOUT, 1), 100)
    with pytest.raises(frames.FrameError, match="unknown frame kind"):
        read(frames.encode_frame(frames.REQUEST, 1, b"{}"), 100)  # the host never sends requests
    with pytest.raises(frames.FrameError, match="not a JSON object"):
        read(frames.encode_frame(frames.GUEST_EVENT, 1, b"[1]"), 100).json()
    with pytest.raises(frames.FrameError, match="invalid JSON"):
        read(frames.encode_frame(frames.GUEST_EVENT, 1, b"[" * 100000), 200000).json()


def test_allow_list_keeps_private_ranges_denied_except_listed_addresses():
    import ipaddress

    from sandbox_kernel.sandbox import netpolicy

    allowed, denied = netpolicy.deno_flags(["127.0.0.1:8000", "pypi.org:443"])
    assert allowed == ["127.0.0.1:8000", "pypi.org:443"]
    assert "localhost" in denied and "10.0.0.0/8" in denied and "[::1]" in denied
    v4 = [ipaddress.ip_network(d) for d in denied if d[0].isdigit()]
    assert not any(ipaddress.ip_address("127.0.0.1") in net for net in v4)
    assert any(ipaddress.ip_address("127.0.0.2") in net for net in v4)
    problems = netpolicy.private_resolutions(["api.test:443", "203.0.113.5"], resolve=lambda host: {"10.1.2.3"})
    assert problems == [
        "allow_net entry 'api.test:443' resolves to 10.1.2.3 (loopback or private): "
        "list the address itself (e.g. '10.1.2.3:443') to allow exactly that"
    ]


def test_mounts_refuse_escaping_symlinks(tmp_path):
    from sandbox_kernel.sandbox import mounts

    (tmp_path / "rw").mkdir()
    (tmp_path / "rw" / "inner.txt").write_text("x")
    (tmp_path / "rw" / "ok-link").symlink_to(tmp_path / "rw" / "inner.txt")
    (mount,) = mounts.parse_all([f"{tmp_path / 'rw'}:/out:rw"], tmp_path)
    assert mount.writable
    (tmp_path / "rw" / "escape").symlink_to("/etc/passwd")
    with pytest.raises(mounts.MountError, match="symlinks that lead outside it"):
        mounts.parse_all([f"{tmp_path / 'rw'}:/out:rw"], tmp_path)


def test_mount_limits_take_sizes_suffixes_growth_and_host_writes(tmp_path):
    from sandbox_kernel.sandbox import mounts

    limits = {
        "/out": {
            "suffixes": [".CSV"], "max_file_bytes": 10, "max_total_bytes": 100, "max_growth_bytes": 50,
            "host_writes": "any",
        }
    }  # fmt: skip
    (mount,) = mounts.parse_all([f"{tmp_path}:/out:rw"], tmp_path, limits)
    assert (mount.suffixes, mount.max_file_bytes, mount.max_total_bytes) == ((".csv",), 10, 100)
    assert (mount.max_growth_bytes, mount.host_writes) == (50, "any")
    (default,) = mounts.parse_all([f"{tmp_path}:/out:rw"], tmp_path)
    assert (default.max_growth_bytes, default.host_writes) == (1 << 30, "data")
    for bad, message in [
        ({"max_total_bytes": 0}, "['max_total_bytes'] must be a positive integer"),
        ({"max_file_bytes": True}, "['max_file_bytes'] must be a positive integer"),
        ({"max_growth_bytes": -1}, "['max_growth_bytes'] must be a positive integer"),
        ({"host_writes": True}, '[\'host_writes\'] must be "data" (only data files reach the host) or "any"'),
        ({"allow_tool_files": ["build"]}, "'allow_tool_files' was replaced by 'host_writes'"),
        ({"quota": 1}, "unknown keys ['quota']; use suffixes, max_file_bytes, max_total_bytes, max_growth_bytes"),
    ]:
        with pytest.raises(mounts.MountError, match=re.escape(message)):
            mounts.parse_all([f"{tmp_path}:/out:rw"], tmp_path, {"/out": bad})


def test_project_folder_holds_the_working_folder_in_its_place(tmp_path):
    from sandbox_kernel.jupyter import settings

    notebooks = tmp_path / "proj" / "notebooks"
    notebooks.mkdir(parents=True)
    chosen = settings.SandboxSettings(working_folder="rw", project_folder="..")
    resolved = settings.resolve(chosen, notebooks, [])
    assert resolved.problems == []
    assert resolved.working_folder == "/project/notebooks"
    assert [(m.guest, m.writable, m.host) for m in resolved.mounts] == [
        ("/project", False, (tmp_path / "proj").resolve()),
        ("/project/notebooks", True, notebooks.resolve()),
    ]  # the outer one first: the worker mounts them in this order
    assert settings.guest_config(chosen, resolved)["cwd"] == "/project/notebooks"
    plain = settings.resolve(settings.SandboxSettings(working_folder="ro"), notebooks, [])
    assert plain.working_folder == "/work" and [m.guest for m in plain.mounts] == ["/work"]
    assert settings.resolve(settings.SandboxSettings(), notebooks, []).working_folder is None
    # Other mounts still may not overlap it.
    overlapping = settings.SandboxSettings(working_folder="ro", project_folder="..", mounts=[f"{tmp_path}:/project/x"])
    assert "overlap" in settings.resolve(overlapping, notebooks, []).error


@pytest.mark.parametrize(
    ("working_folder", "project_folder", "message"),
    [
        ("ro", "notebooks", "which does not hold the working folder"),
        ("ro", ".", "which does not hold the working folder"),
        ("off", "..", "SandboxKernel.project_folder needs working_folder 'ro' or 'rw'"),
        ("ro", "/", "your home folder or the root folder"),
    ],
)
def test_a_project_folder_that_cannot_be_used_says_why(tmp_path, working_folder, project_folder, message):
    from sandbox_kernel.jupyter import settings

    (tmp_path / "notebooks").mkdir()
    chosen = settings.SandboxSettings(working_folder=working_folder, project_folder=project_folder)
    resolved = settings.resolve(chosen, tmp_path, [])
    assert message in resolved.error, resolved.error
    assert not any(m.guest == "/project" for m in resolved.mounts)


def test_pip_replays_forget_what_pip_uninstall_removed():
    from sandbox_kernel.jupyter.guest_services import PipReplays

    replays = PipReplays()
    replays.add(["Sbk_Demo==1.0", "six"], ["http://127.0.0.1:1/simple"])
    replays.add(["sbk-demo"], None)
    replays.forget(["sbk-demo"])
    assert replays.installs == [{"specs": ["six"], "index_urls": ["http://127.0.0.1:1/simple"]}]
    replays.forget(["six", "other"])
    assert replays.installs == []


def test_a_mount_error_names_mounts_also_for_a_host_path_with_a_colon(tmp_path):
    """settings.mount_error_setting reads a spec as mounts.parse does (the last two ':' split it): a host folder
    whose path has ':' still matches its error to SandboxKernel.mounts."""
    from sandbox_kernel.jupyter import settings

    host = tmp_path / "a:b"
    host.mkdir()
    (host / "out").symlink_to(tmp_path)  # leads outside the mounted folder: parse_all refuses it
    chosen = settings.SandboxSettings(mounts=[f"{host}:/data:ro"])
    problems = settings.resolve(chosen, tmp_path, [], with_skills=False).problems
    assert len(problems) == 1 and problems[0].startswith(
        f"SandboxKernel.mounts: mount /data: {str(host)!r} holds symlinks that lead outside it"
    )
    assert settings.mount_error_setting(chosen, "mount /data: anything") == "SandboxKernel.mounts"
    assert settings.mount_error_setting(chosen, "mount /b: anything") != "SandboxKernel.mounts"
