"""Fixtures for unit tests of the guest glue (host_ts/guest/sandbox_guest) under plain CPython, without Deno.

`host`: a FakeHost bound as the worker's `_sandbox_host`; `fake_pyodide`: fake Pyodide modules in sys.modules
(both undone after the test). `guest`, `fresh_guest`: the glue booted for real (IPython shell, streams, builtins)
in a child process, served one kernel request at a time: booting changes process-wide state (sys.stdout,
builtins, audit hooks) that must not leak into the other tests.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from guest_glue.fake_host import GUEST_DIR, FakeHost, FakePyodide, fake_cloudpickle

if str(GUEST_DIR) not in sys.path:
    sys.path.insert(0, str(GUEST_DIR))
from sandbox_guest import _host

try:  # checkpoint.py imports cloudpickle (a guest wheel); where it is not installed, plain pickle stands in
    import cloudpickle  # noqa: F401
except ImportError:
    sys.modules["cloudpickle"] = fake_cloudpickle()
    try:
        from sandbox_guest import checkpoint  # noqa: F401
    finally:
        del sys.modules["cloudpickle"]

REPLY_TIMEOUT = 30.0


@pytest.fixture
def fake_pyodide(monkeypatch: pytest.MonkeyPatch) -> FakePyodide:
    fake = FakePyodide()
    for name, module in fake.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHost]:
    """A fresh FakeHost behind `_host`, with no held-back stream text and request numbers from 1."""
    fake = FakeHost()
    monkeypatch.setitem(sys.modules, "_sandbox_host", fake)
    monkeypatch.setattr(_host, "_js", None)
    _host.attach()
    monkeypatch.setattr(_host, "_pending", [])
    monkeypatch.setattr(_host, "_pending_kind", _host.STDOUT)
    monkeypatch.setattr(_host, "_pending_request", 0)
    monkeypatch.setattr(_host, "_numbers", itertools.count(1))
    token = _host.REQUEST.set(0)
    yield fake
    _host.REQUEST.reset(token)


class Guest:
    """The glue in a child process (fake_worker.py): `handle` serves one kernel request, as worker.ts does."""

    def __init__(self, cwd: Path) -> None:
        self._next_id = 0
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("fake_worker.py")), str(GUEST_DIR)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        self.facts = self._read()["facts"]

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], REPLY_TIMEOUT)
        line = self._process.stdout.readline() if ready else ""
        if not line:
            self._process.kill()
            _, err = self._process.communicate(timeout=REPLY_TIMEOUT)
            raise AssertionError(f"the fake worker did not answer within {REPLY_TIMEOUT} s:\n{err[-4000:]}")
        return json.loads(line)

    def command(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(command) + "\n")
        self._process.stdin.flush()
        answer = self._read()
        if "crash" in answer:
            raise AssertionError(f"the fake worker failed: {answer['crash']}")
        return answer

    def setup(self, code: str) -> None:
        """Run test set-up code in the worker (e.g. point the checkpoint at a temporary folder)."""
        self.command({"setup": code})

    def handle(self, request: dict[str, Any], answers: list[Any] | None = None, **options: Any) -> Served:
        """Serve `request` (its own request id); `answers`: the kernel's answers to the glue's questions."""
        self._next_id += 1
        answer = self.command({"request": request, "id": self._next_id, "answers": answers or [], **options})
        return Served(answer["reply"], answer["log"], self._next_id)

    def execute(self, code: str, answers: list[Any] | None = None, **fields: Any) -> Served:
        return self.handle({"op": "execute", "code": code, "silent": False, "store_history": True, **fields}, answers)

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=REPLY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=REPLY_TIMEOUT)
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()


class Served:
    """One request's reply (parsed) and what the glue sent the host while serving it."""

    def __init__(self, reply: dict[str, Any], log: list[list[Any]], request_id: int) -> None:
        self.reply = reply
        self.log = log
        self.request_id = request_id

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        return [e[1] for e in self.log if e[0] == "emit" and (type_ is None or e[1].get("type") == type_)]

    def iopub(self, msg_type: str) -> list[dict[str, Any]]:
        return [e["content"] for e in self.events("iopub") if e["msg_type"] == msg_type]

    def asked(self, type_: str) -> list[dict[str, Any]]:
        """The questions of `type_` put to the kernel, without their numbers (FakeHost checks those)."""
        questions = self.events(type_)
        assert all(isinstance(q["n"], int) for q in questions), questions
        return [{k: v for k, v in q.items() if k != "n"} for q in questions]

    def text(self, kind: int = 1) -> str:
        return "".join(e[2] for e in self.log if e[0] == "write" and e[1] == kind)

    def requests_of_writes(self) -> set[int]:
        return {e[3] for e in self.log if e[0] == "write"}


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    """One booted glue for a test module (booting costs ~0.4 s): its tests use names of their own."""
    worker = Guest(tmp_path_factory.mktemp("guest"))
    try:
        yield worker
    finally:
        worker.close()


@pytest.fixture
def fresh_guest(tmp_path: Path) -> Iterator[Guest]:
    """A glue of the test's own, for tests that configure or patch it."""
    worker = Guest(tmp_path)
    try:
        yield worker
    finally:
        worker.close()
