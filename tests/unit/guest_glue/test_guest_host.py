"""The guest's wrappers over the worker's JS functions (sandbox_guest._host), against a fake host."""

from __future__ import annotations

import ast
import inspect
import sys

import pytest
from sandbox_guest import _host

from guest_glue.fake_host import GUEST_DIR, INTERRUPT, FakeHost

OUT, ERR = _host.STDOUT, _host.STDERR


def test_attach_binds_the_module_the_worker_registered(host, monkeypatch):
    other = FakeHost()
    monkeypatch.setitem(sys.modules, "_sandbox_host", other)
    _host.attach()  # after a restart from the snapshot: the new worker's functions
    _host.emit({"type": "x"})
    assert other.events() == [{"type": "x"}]
    assert host.events() == []


def test_a_line_printed_in_pieces_is_one_write(host):
    _host.write(OUT, "a")
    _host.write(OUT, " b")
    assert host.writes() == []  # held back until the line ends
    _host.write(OUT, "\n")
    assert host.writes() == [(OUT, "a b\n", 0)]


def test_held_text_goes_first_when_the_stream_or_request_changes(host):
    _host.write(OUT, "out")
    _host.write(ERR, "err")
    token = _host.REQUEST.set(7)
    try:
        _host.write(ERR, "later")
    finally:
        _host.REQUEST.reset(token)
    _host.flush_streams()
    assert host.writes() == [(OUT, "out", 0), (ERR, "err", 0), (ERR, "later", 7)]


def test_long_or_many_fragments_are_sent_without_waiting_for_a_newline(host):
    _host.write(OUT, "x" * (_host.FLUSH_AT + 1))
    assert host.writes() == [(OUT, "x" * (_host.FLUSH_AT + 1), 0)]
    for _ in range(65):
        _host.write(OUT, "y")
    assert host.writes()[1:] == [(OUT, "y" * 65, 0)]


def test_emit_sends_held_text_first_and_tags_the_request(host):
    _host.write(OUT, "before")
    token = _host.REQUEST.set(3)
    try:
        _host.iopub("display_data", {"data": {"text/plain": "x"}})
    finally:
        _host.REQUEST.reset(token)
    assert host.log == [
        ("write", OUT, "before", 0),
        ("emit", {"type": "iopub", "msg_type": "display_data", "content": {"data": {"text/plain": "x"}}}, 3),
    ]


def test_emit_of_an_event_over_the_kernel_limit_raises_and_names_the_setting(host):
    host.max_event_bytes = 100
    with pytest.raises(ValueError, match=r"output too large .*SandboxKernel\.max_output_bytes"):
        _host.emit({"type": "iopub", "content": "z" * 200})


def test_emit_encodes_what_json_cannot(host):
    _host.emit({"type": "x", "raw": b"\x00\xff", "set": {1}, "tuple": (1, 2), "other": 1j})
    assert host.events() == [{"type": "x", "raw": "AP8=", "set": [1], "tuple": [1, 2], "other": "1j"}]


def test_send_blob_passes_bytes_unparsed_and_refuses_an_oversized_part(host):
    _host.send_blob(memoryview(b"\x00\x01 raw"))
    assert host.blobs() == [b"\x00\x01 raw"]
    host.max_event_bytes = 4
    with pytest.raises(ValueError, match="a part of 8 bytes is larger than the sandbox may send at once"):
        _host.send_blob(memoryview(b"12345678"))


def test_request_numbers_each_question_and_returns_the_answer(host):
    host.answers = [{"value": 1}, ["two"]]
    assert _host.request({"type": "ask"}) == {"value": 1}
    assert _host.request({"type": "ask"}) == ["two"]
    assert host.events() == [{"type": "ask", "n": 1}, {"type": "ask", "n": 2}]
    assert [e for e in host.log if e[0] == "wait"] == [("wait", 1), ("wait", 2)]


def test_request_interrupted_raises_keyboard_interrupt(host):
    host.answers = [INTERRUPT]
    with pytest.raises(KeyboardInterrupt, match="Interrupted by user"):
        _host.request({"type": "ask"})


def test_sleep_asks_the_host_in_milliseconds_and_flushes_first(host):
    _host.write(OUT, "tick")
    _host.sleep(0.25)
    _host.sleep(-3)
    _host.sleep(2)  # an int, as time.sleep takes
    assert host.log == [("write", OUT, "tick", 0), ("sleep", 250.0), ("sleep", 0.0), ("sleep", 2000.0)]


def test_an_interrupted_sleep_raises_what_looks_like_keyboard_interrupt(host):
    host.interrupt_sleep = True
    with pytest.raises(KeyboardInterrupt) as caught:
        _host.sleep(10)
    assert type(caught.value).__name__ == "KeyboardInterrupt"
    assert caught.value._render_traceback_()[-1] == "KeyboardInterrupt: "  # none of the glue's frames


def test_take_refusal_gives_the_host_reason_once(host):
    host.refusals = ["the file would exceed 1 MiB (SandboxKernel.mount_limits)"]
    assert _host.take_refusal() == "the file would exceed 1 MiB (SandboxKernel.mount_limits)"
    assert _host.take_refusal() is None


def test_take_refusal_before_attach_and_of_a_non_string(host, monkeypatch):
    monkeypatch.setattr(host, "take_refusal", lambda: 42)
    assert _host.take_refusal() is None
    monkeypatch.setattr(_host, "_js", None)
    assert _host.take_refusal() is None


def test_shell_limit_bytes_before_attach(host, monkeypatch):
    assert _host.shell_limit_bytes() == host.shell_limit_bytes
    monkeypatch.setattr(_host, "_js", None)
    assert _host.shell_limit_bytes() == 0  # as its neighbours: no AttributeError on None


def test_the_fake_host_has_every_function_the_stub_declares():
    """FakeHost stands for worker.ts's `host` object as host_ts/guest_stubs/_sandbox_host.pyi declares it."""
    stub = ast.parse((GUEST_DIR.parent / "guest_stubs" / "_sandbox_host.pyi").read_text())
    declared = {f.name: [a.arg for a in f.args.posonlyargs] for f in stub.body if isinstance(f, ast.FunctionDef)}
    assert set(declared) == {
        "write",
        "emit",
        "send_blob",
        "wait_reply",
        "take_refusal",
        "file_room",
        "files_full",
        "files_mib",
        "sleep",
        "shell",
    }
    for name, params in declared.items():
        fake = inspect.signature(getattr(FakeHost(), name))
        assert len(fake.parameters) == len(params), (name, fake, params)
