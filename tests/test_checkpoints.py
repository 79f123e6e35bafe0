"""Checkpoint, restore and fork of a live session: %checkpoint / %restore and the agent API, on real kernels."""

from __future__ import annotations

import copy
import dataclasses
import gc
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import execute, start_kernel, stop_kernel, value
from sandbox_kernel import Checkpoint, Sandbox
from sandbox_kernel.checkpoints.file import CheckpointError
from test_packages import Index, make_wheel

STATE = """
import json as j, os, sbk_demo
counter = 41
def bump():
    return counter + 1
class Box:
    def __init__(self, items):
        self.items = items
box = Box([1, 2])
alias = box.items
os.makedirs('/home/pyodide/data', exist_ok=True)
open('/home/pyodide/data/notes.txt', 'w').write('hello')
os.environ['MY_SETTING'] = 'on'
"""
DAMAGE = """
import shutil, site, sys
counter = 0
del box, j
os.remove('/home/pyodide/data/notes.txt')
shutil.rmtree(site.getsitepackages()[0] + '/sbk_demo')
del sys.modules['sbk_demo'], sbk_demo
os.environ.pop('MY_SETTING')
"""
CHECK = "(counter, bump(), box.items is alias, j.dumps(alias), open('data/notes.txt').read(), sbk_demo.VALUE, " \
    "os.environ['MY_SETTING'])"  # fmt: skip
EXPECTED = "(41, 42, True, '[1, 2]', 'hello', 'sbk_demo 1.0', 'on')"


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheels")
    server = Index(make_wheel(folder, "sbk_demo"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def saved(demo_index, tmp_path_factory) -> Path:
    """A checkpoint of STATE, with sbk_demo installed by %pip, saved to a file."""
    with Sandbox(allow_net=[f"127.0.0.1:{demo_index.port}"]) as sb:
        pip = sb.run(f"%pip install sbk-demo --index-url http://127.0.0.1:{demo_index.port}/simple")
        assert pip.ok, pip.to_llm()
        assert sb.run(STATE).ok
        cp = sb.checkpoint("base")
        assert cp.contents["variables"] == ["Box", "alias", "box", "bump", "counter", "j", "os", "sbk_demo"]
        assert cp.contents["variable_count"] == 8 and cp.contents["not_kept"] == {}
        assert sb.run(DAMAGE).ok
        assert sb.run("'counter' in dir() and counter").text == "0"
        sb.restore(cp)
        assert sb.run(CHECK).text == EXPECTED
        return cp.save(tmp_path_factory.mktemp("saved") / "base.sbkcp").path


def test_restore_brings_back_variables_modules_files_environment_and_packages(saved):
    # The fixture checked it in the session that made the checkpoint; here the file is loaded and verified.
    cp = Checkpoint.load(saved)
    assert cp.name == "base" and cp.summary().startswith("checkpoint 'base': 8 variables, ")


def test_a_checkpoint_file_restores_in_a_fresh_process_without_network(saved):
    # A new process and kernel, with no allow_net: sbk_demo can only come from the checkpoint's files.
    script = (
        "from sandbox_kernel import Checkpoint, Sandbox\n"
        f"with Sandbox.from_checkpoint(Checkpoint.load({str(saved)!r})) as sb:\n"
        f"    print(sb.run({CHECK!r}).text)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == EXPECTED, done.stderr[-2000:]


def test_fork_runs_two_sessions_that_diverge():
    with Sandbox() as sb:
        sb.run("steps = ['start']")
        with sb.fork() as other:
            sb.run("steps.append('left')")
            other.run("steps.append('right')")
            assert sb.run("steps").text == "['start', 'left']"
            assert other.run("steps").text == "['start', 'right']"
            assert sb.os_layers() == other.os_layers()  # the same settings


def test_a_checkpoint_name_that_is_not_one_word_is_refused_before_anything_reaches_the_guest():
    """The agent API puts the name into the line `%checkpoint NAME`: with a newline in it, the kernel would take the
    cell for the guest's (it did: the guest answered 'put %checkpoint alone in its cell')."""
    with Sandbox() as sb:
        sb.run("ran = []")
        for name in ("x\nran.append('guest code')", "\nran.append(1)", "x y", "../x", "-x", "a" * 65):
            with pytest.raises(CheckpointError, match="is not a checkpoint name: letters, digits"):
                sb.checkpoint(name)
        assert sb.run("print(ran)").stdout == "[]\n"
        assert sb.checkpoint("x.y-1_z").name == "x.y-1_z"


def test_an_agent_takes_any_number_of_checkpoints_and_each_is_deleted_once_dropped(tmp_path):
    """The agent's copies leave the kernel's folder (max_checkpoints counts the notebook's named ones) and are
    deleted when no Checkpoint refers to them; a saved copy stays."""
    with Sandbox(extra_arguments=["--SandboxKernel.max_checkpoints=2"]) as sb:
        taken = []
        for step in range(4):
            sb.run(f"step = {step}")
            taken.append(sb.checkpoint())
        folder = Path(sb.facts()["checkpoint_folder"])
        assert list(folder.iterdir()) == []
        sb.restore(taken[1])
        assert sb.run("step").text == "1"
        kept = taken[2].save(tmp_path / "kept.sbkcp")
        copies = [copy.deepcopy(taken[0]), dataclasses.replace(taken[3], name="renamed")]
        dropped = [cp.path for cp in taken[1:3]]
        assert all(p.exists() for p in dropped)
        del taken
        gc.collect()
        assert not any(p.exists() for p in dropped)
        sb.restore(Checkpoint.load(kept.path))
        assert sb.run("step").text == "2"
        sb.restore(copies[0])  # copies keep the file their original shared
        assert sb.run("step").text == "0"
        sb.restore(copies[1])
        assert sb.run("step").text == "3"


def test_a_tampered_checkpoint_is_refused_and_the_session_is_kept(saved, tmp_path):
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of the pickled state
    tampered = tmp_path / "tampered.sbkcp"
    tampered.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="do not match its seal"):
        Checkpoint.load(tampered)
    with Sandbox() as sb:
        sb.run("kept = 'yes'")
        forged = Checkpoint(tampered, "base", len(data), {})  # handed to the kernel without the client's check
        with pytest.raises(CheckpointError, match=r"CheckpointError: .*do not match its seal"):
            sb.restore(forged)
        assert sb.run("kept").text == "'yes'"  # refused before the sandbox was touched
        not_one = tmp_path / "notes.sbkcp"
        not_one.write_text("x = 1")
        with pytest.raises(CheckpointError, match="is not a sandbox-kernel checkpoint"):
            sb.restore(Checkpoint(not_one, "notes", 5, {}))


def test_restore_after_a_timeout_restart():
    with Sandbox(cell_timeout=1, extra_arguments=["--SandboxKernel.interrupt_grace=1"]) as sb:
        sb.run("total = 123")
        cp = sb.checkpoint()
        stuck = sb.run("while True:\n    try:\n        while True: pass\n    except KeyboardInterrupt:\n        pass")
        assert stuck.timed_out and stuck.restarted and stuck.error.ename == "SandboxTimeout"
        assert sb.run("'total' in dir()").text == "False"
        sb.restore(cp)
        assert sb.run("total").text == "123"


def checkpoint_folder(kc) -> Path:
    return Path(kc.kernel_info(reply=True, timeout=60)["content"]["sandbox_kernel"]["checkpoint_folder"])


def test_checkpoints_survive_kernel_restart_and_go_at_the_last_shutdown():
    """Kernel > Restart is a new kernel process with the same connection file: its checkpoints are still there."""
    km, kc = start_kernel()
    try:
        execute(kc, "total = 41\nnames = ['a']")
        assert execute(kc, "%checkpoint before").content["status"] == "ok"
        folder = checkpoint_folder(kc)
        pid = km.provisioner.pid
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=120)
        assert km.provisioner.pid != pid  # a new kernel process
        assert execute(kc, "'total' in dir()").of_type("execute_result")[0]["data"]["text/plain"] == "False"
        assert execute(kc, "%checkpoint").stream() == "Checkpoints: before\n"
        run = execute(kc, "%restore before")
        assert run.content["status"] == "ok", run.content
        assert value(execute(kc, "total + 1, names")) == "(42, ['a'])"
        assert checkpoint_folder(kc) == folder and (folder / "before.sbkcp").is_file()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        stop_kernel(km, kc)
    assert not folder.exists() and not list(folder.parent.glob(folder.name + "*"))  # removed at the last shutdown


def test_the_magics_in_a_notebook(kc):
    assert execute(kc, "%checkpoint").stream() == "No checkpoints yet.\n"
    execute(kc, "import math\nitems = [1]\nmaker = (i for i in range(3))")
    run = execute(kc, "# keep this\n%checkpoint first")
    assert run.content["status"] == "ok"
    assert run.stream().startswith("Checkpoint 'first': 2 variables, 0 files, ")
    assert "not kept: maker (TypeError: cannot pickle 'generator' object)" in run.stream()
    assert run.reply["metadata"]["sandbox_kernel"]["checkpoint"]["variables"] == ["items", "math"]
    execute(kc, "items.append(2)\ndel math")
    run = execute(kc, "%restore first")
    assert run.stream() == "Restored checkpoint 'first' in a fresh sandbox: 2 variables, 0 files.\n"
    assert execute(kc, "items, math.pi > 3, 'maker' in dir()").of_type("execute_result")[0]["data"]["text/plain"] == (
        "([1], True, False)"
    )
    assert execute(kc, "%checkpoint").stream() == "Checkpoints: first\n"
    unknown = execute(kc, "%restore second").content
    assert (unknown["ename"], unknown["evalue"]) == (
        "CheckpointError",
        "no checkpoint named 'second' (this kernel has first)",
    )
    mixed = execute(kc, "x = 1\n%checkpoint two").content
    assert mixed["ename"] == "UsageError" and "put %checkpoint alone in its cell" in mixed["evalue"]
    bad = execute(kc, "%checkpoint ../../etc/passwd").content
    assert bad["ename"] == "UsageError" and "is not a checkpoint name" in bad["evalue"]
    assert execute(kc, "%restore").content["evalue"].startswith("usage: %restore NAME")


def test_mounted_files_are_the_users_and_stay_as_they_are(tmp_path):
    (tmp_path / "shared.csv").write_text("before")
    with Sandbox(mounts=[f"{tmp_path}:/data:rw"]) as sb:
        sb.run("open('/tmp/own.txt', 'w').write('mine')")
        cp = sb.checkpoint()
        assert cp.contents["files"] == 1  # /tmp/own.txt, not the mount's file
        sb.run("open('/data/shared.csv', 'w').write('after')")
        sb.restore(cp)
        assert sb.run("open('/data/shared.csv').read(), open('/tmp/own.txt').read()").text == "('after', 'mine')"


def test_a_checkpoint_over_the_limit_is_refused_and_nothing_is_lost():
    with Sandbox(extra_arguments=["--SandboxKernel.max_checkpoint_bytes=1000000"]) as sb:
        sb.run("import os\nblob = os.urandom(2_000_000)")
        refused = sb.run("%checkpoint big")
        assert refused.error.ename == "CheckpointTooLarge"
        assert "SandboxKernel.max_checkpoint_bytes=1000000" in refused.error.evalue
        assert sb.run("len(blob)").text == "2000000"
        assert sb.run("%checkpoint").stdout == "No checkpoints yet.\n"


def test_checkpoint_data_sent_outside_a_checkpoint_is_dropped(kc):
    run = execute(kc, "import _sandbox_host\n_sandbox_host.send_blob(memoryview(b'x' * 100), 0)\n'still here'")
    assert run.of_type("execute_result")[0]["data"]["text/plain"] == "'still here'"
    assert "100 bytes of checkpoint data outside a checkpoint" in run.stream("stderr")


def test_a_guest_that_floods_a_checkpoint_is_cut_at_the_limit():
    flood = (
        "from sandbox_guest import checkpoint, _host\n"
        "def capture(req, user_ns, hidden):\n"
        "    for _ in range(300):\n"
        "        _host.send_blob(memoryview(bytes(1 << 20)))\n"
        "    return {'status': 'ok', 'bytes': 1, 'variables': [], 'variable_count': 0, 'files': 0, 'not_kept': {}}\n"
        "checkpoint.capture = capture"
    )
    with Sandbox(extra_arguments=["--SandboxKernel.max_checkpoint_bytes=50000000"]) as sb:
        assert sb.run(flood).ok
        refused = sb.run("%checkpoint flood")
        assert refused.error.ename == "CheckpointTooLarge"
        assert sb.run("1 + 1").text == "2"


def test_parts_fit_a_small_frame_limit_both_ways():
    # 5 MB of state with max_frame_bytes=2 MB: the parts are cut to fit the frames, out and back in.
    with Sandbox(extra_arguments=["--SandboxKernel.max_frame_bytes=2000000"]) as sb:
        sb.run("import os\nblob = os.urandom(5_000_000)\ndigest = hash(blob)")
        cp = sb.checkpoint()
        sb.run("del blob")
        sb.restore(cp)
        assert sb.run("len(blob), hash(blob) == digest").text == "(5000000, True)"
