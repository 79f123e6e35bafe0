"""The agent API on kernels behind a real Jupyter Kernel Gateway and a real Enterprise Gateway (127.0.0.1, auth
token, list_kernels): every operation goes over the gateway's REST API and websocket, with the gateway machine's
settings. Each test runs against both (bench/kernel_gateway.py, tests/eg_server.py); EG runs this kernel through
`sandbox-kernel launch-eg` by its DistributedProcessProxy, so its interrupts reach the kernel through the
launcher's comm port, and its restarts start a new launcher and kernel on new ports."""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from eg_server import KERNEL_USERNAME, EnterpriseGateway, enterprise_gateway, installed
from kernel_gateway import KernelGateway, free_port, kernel_gateway
from sandbox_kernel import Checkpoint
from sandbox_kernel.checkpoints.file import CheckpointError
from sandbox_kernel.checkpoints.parts import PART_BYTES
from sandbox_kernel.client.agent import AsyncSandbox, GatewayError, KernelDied
from sandbox_kernel.client.approvals import ApprovalRequest
from sandbox_kernel.client.sync_sandbox import Sandbox

CELL_TIMEOUT = 6.0  # the gateway's SandboxKernel.cell_timeout
WHERE_SKILL = '''
import os


class WhereSkill:
    """Says where it runs."""

    def where(self, label: str) -> dict:
        """The process, the gateway's mark and the user Enterprise Gateway started the kernel for."""
        return {
            "label": label,
            "pid": os.getpid(),
            "mark": os.environ.get("GATEWAY_MARK"),
            "user": os.environ.get("KERNEL_USERNAME"),
        }
'''


@pytest.fixture(scope="module", params=["kernel-gateway", "enterprise-gateway"])
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGateway]:
    """Gateway A, a Kernel Gateway or an Enterprise Gateway: a cell time limit, a writable mount, an 'ask' skill;
    its environment has GATEWAY_MARK."""
    folder = tmp_path_factory.mktemp(f"gateway-a-{request.param}")
    (folder / "data").mkdir()
    (folder / "skills").mkdir()
    (folder / "skills" / "where_skill.py").write_text(WHERE_SKILL)
    config = (
        f"c.SandboxKernel.cell_timeout = {CELL_TIMEOUT}\n"
        f"c.SandboxKernel.mounts = ['{folder / 'data'}:/data:rw']\n"
        f"c.SandboxKernel.skills_path = '{folder / 'skills'}'\n"
        "c.SandboxKernel.skill_policy = {'WhereSkill.where': 'ask'}\n"
        "c.SandboxKernel.spare_sandbox = False\n"
    )
    env = {"GATEWAY_MARK": "on-gateway-a"}
    if request.param == "kernel-gateway":
        with kernel_gateway(folder, config, env) as running:
            yield running
    else:
        with enterprise_gateway(folder, installed(), config, env) as eg:
            yield eg


@pytest.fixture(scope="module")
def other_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelGateway]:
    """Kernel Gateway B: other settings, and another checkpoint key (as on another machine)."""
    folder = tmp_path_factory.mktemp("gateway-b")
    config = "c.SandboxKernel.cell_timeout = 42\nc.SandboxKernel.spare_sandbox = False\n"
    env = {"SANDBOX_KERNEL_CHECKPOINT_KEY": str(folder / "other.key")}
    with kernel_gateway(folder, config, env) as running:
        yield running


class Answers:
    """The approver and the input of the module's sandbox, with what they were asked."""

    def __init__(self) -> None:
        self.approvals: list[ApprovalRequest] = []
        self.prompts: list[str] = []

    def approve(self, request: ApprovalRequest) -> bool:
        self.approvals.append(request)
        return request.args != ["refuse me"]

    def input(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return "typed"


@pytest.fixture(scope="module")
def answers() -> Answers:
    return Answers()


@pytest.fixture(scope="module")
def sb(gateway: KernelGateway, answers: Answers) -> Iterator[Sandbox]:
    with Sandbox(**gateway.client_options(), approver=answers.approve, input=answers.input) as sandbox:
        yield sandbox


def on_gateway(sb: Sandbox) -> str:
    """The id of the gateway's kernel a sandbox drives."""
    return sb._async.kernel.kernel_id  # type: ignore[union-attr]


def test_output_errors_and_the_settings_of_the_gateway_machine(sb: Sandbox, gateway: KernelGateway) -> None:
    r = sb.run("import sys\nprint('hello from', sys.platform)\n6 * 7")
    assert (r.stdout, r.text, r.error) == ("hello from emscripten\n", "42", None)
    r = sb.run("1 / 0")
    assert r.error is not None and r.error.ename == "ZeroDivisionError" and "division by zero" in r.error.traceback
    assert [k["id"] for k in gateway.request("GET", "/api/kernels")] == [on_gateway(sb)]
    facts = sb.facts()
    settings = facts["settings"]
    assert settings["cell_timeout"] == CELL_TIMEOUT and settings["spare_sandbox"] is False
    assert settings["mounts"] is True and settings["skills_path"] is True  # set, but the host's paths stay there
    assert [(m["guest"], m["writable"]) for m in facts["mounts"]] == [("/data", True)]
    assert str(gateway.folder) not in repr(facts)


def test_a_cells_output_arrives_whole_past_the_gateways_default_rate_limit(sb: Sandbox) -> None:
    """4 MB of stdout in about a second: Jupyter Server's default IOPub limit (1 MB/s over 3 s) would drop most of
    it; docs/gateway.md turns that limit off (the kernel bounds a cell's output with max_output_bytes)."""
    r = sb.run("for i in range(40000):\n    print('x' * 99)")
    assert len(r.stdout) == 4_000_000 and r.stderr == "", r.stderr[:200]


def test_a_client_timeout_interrupts_the_cell(sb: Sandbox, gateway: KernelGateway) -> None:
    started = time.monotonic()
    r = sb.run("import time\nwhile True:\n    time.sleep(0.05)", timeout=1)
    took = time.monotonic() - started
    assert r.error is not None and r.error.ename == "KeyboardInterrupt" and not r.timed_out, r
    assert 1 <= took < 1 + 5, took  # interrupted through the gateway's REST API, a few ms after the timeout
    if isinstance(gateway, EnterpriseGateway):  # EG sent it to the launcher's comm port, which signalled the kernel
        assert "comm port: interrupt requested" in gateway.kernel_log(on_gateway(sb)), gateway.story(on_gateway(sb))
    assert sb.run("'still here'").text == "'still here'"


def test_the_gateways_cell_timeout_stops_a_runaway_cell(sb: Sandbox) -> None:
    started = time.monotonic()
    r = sb.run("while True:\n    pass")
    took = time.monotonic() - started
    assert r.timed_out and r.error is not None, r
    assert CELL_TIMEOUT - 0.5 < took < CELL_TIMEOUT + 3 + 10, took  # interrupt_grace 3 s, slack for a loaded machine


def test_input_is_answered_by_the_input_callable(sb: Sandbox, answers: Answers) -> None:
    r = sb.run("name = input('who? ')\nprint('hello', name)")
    assert r.stdout.endswith("hello typed\n") and answers.prompts[-1] == "who? "


def test_an_ask_skill_runs_on_the_gateway_machine_once_approved(
    sb: Sandbox, answers: Answers, gateway: KernelGateway
) -> None:
    r = sb.run("device.WhereSkill.where('approve me')")
    assert r.error is None, r.error
    found = eval(r.text or "")  # a dict of plain values, made by the skill
    assert found["label"] == "approve me" and found["mark"] == "on-gateway-a"  # the gateway's environment
    assert found["pid"] in gateway.kernel_pids(on_gateway(sb)) and found["pid"] != os.getpid()
    if isinstance(gateway, EnterpriseGateway):  # the kernel's process, which the launcher started for the user
        assert found["user"] == KERNEL_USERNAME and found["pid"] not in gateway.launcher_pids(on_gateway(sb))
    assert answers.approvals[-1].call == "WhereSkill.where('approve me')"
    refused = sb.run("device.WhereSkill.where('refuse me')")
    assert refused.error is not None and refused.error.ename == "SkillRefused"


def test_checkpoint_restore_fork_and_a_saved_copy_move_over_the_protocol(
    sb: Sandbox, gateway: KernelGateway, tmp_path: Path
) -> None:
    sb.run("data = {'rows': list(range(10))}\nopen('/tmp/note.txt', 'w').write('kept')")
    cp = sb.checkpoint()
    assert "data" in cp.contents["variables"] and not cp.path.is_relative_to(gateway.folder)
    assert sb.run("%checkpoint").stdout == "No checkpoints yet.\n"  # the kernel's copy was dropped once taken
    sb.run("data.clear()\nimport os\nos.remove('/tmp/note.txt')")
    sb.restore(cp)
    assert sb.run("len(data['rows']), open('/tmp/note.txt').read()").text == "(10, 'kept')"
    assert sb.run("%checkpoint").stdout == "No checkpoints yet.\n"  # nor does the file given back stay there
    with sb.fork() as other:
        assert on_gateway(other) != on_gateway(sb)
        assert other.run("max(data['rows'])").text == "9"
    saved = cp.save(tmp_path / "before.sbkcp")
    loaded = Checkpoint.load(saved.path, verify=False)  # sealed under the gateway's key: its kernels check it
    with Sandbox.from_checkpoint(loaded, **gateway.client_options()) as later:
        assert later.run("sum(data['rows'])").text == "45"


def test_a_state_larger_than_a_part_moves_in_parts_unchanged(sb: Sandbox) -> None:
    size = 3 * PART_BYTES + 12345
    digest = sb.run(f"import os, hashlib\nblob = os.urandom({size})\nhashlib.sha256(blob).hexdigest()").text
    cp = sb.checkpoint()
    assert cp.size > 3 * PART_BYTES
    sb.run("blob = b''")
    sb.restore(cp)
    assert sb.run("len(blob), hashlib.sha256(blob).hexdigest()").text == f"({size}, {digest})"
    sb.run("del blob")


def test_a_checkpoint_changed_on_the_client_is_refused_by_the_kernel(sb: Sandbox, tmp_path: Path) -> None:
    sb.run("kept = 'before'")
    cp = sb.checkpoint()
    data = bytearray(cp.path.read_bytes())
    data[40] ^= 0x01  # one bit of the payload (the guest's pickles)
    changed = tmp_path / "changed.sbkcp"
    changed.write_bytes(bytes(data))
    sb.run("kept = 'after'")
    with pytest.raises(CheckpointError, match="do not match its seal"):
        sb.restore(Checkpoint.load(changed, verify=False))
    assert sb.run("kept").text == "'after'"  # refused before the running sandbox was touched
    with pytest.raises(CheckpointError, match="do not match its seal"):
        Checkpoint.load(changed)  # here too, where the key is the same (one machine, one user)


def test_a_checkpoint_needs_the_key_of_the_kernel_that_restores_it(sb: Sandbox, other_gateway: KernelGateway) -> None:
    sb.run("moved = 1")
    cp = sb.checkpoint()
    with Sandbox(**other_gateway.client_options()) as elsewhere:
        with pytest.raises(CheckpointError, match=r"saved under another checkpoint key than .*other\.key"):
            elsewhere.restore(cp)
        assert elsewhere.run("'moved' in dir()").text == "False"


def test_upload_and_download_in_a_mount_of_the_gateway_machine(
    sb: Sandbox, gateway: KernelGateway, tmp_path: Path
) -> None:
    payload = os.urandom(3_000_000)
    # A host mount takes data files only (host_ts/host_writes.json): an upload is a write of the sandbox like any other.
    (tmp_path / "up.npy").write_bytes(payload)
    assert sb.upload(tmp_path / "up.npy", "/data/sub/up.npy") == len(payload)
    assert (gateway.folder / "data" / "sub" / "up.npy").read_bytes() == payload  # the gateway machine's folder
    assert sb.download("/data/sub/up.npy") == payload
    with pytest.raises(OSError, match="more than the 10 allowed"):
        sb.download("/data/sub/up.npy", max_bytes=10)


def test_restart_gives_a_fresh_kernel_on_the_gateway(sb: Sandbox) -> None:
    sb.run("gone_after_restart = 1")
    sb.restart()
    assert sb.run("'gone_after_restart' in dir()").text == "False"
    assert sb.facts()["settings"]["cell_timeout"] == CELL_TIMEOUT


def killed_while_running(sb: Sandbox, pids: Callable[[], list[int]]) -> float:
    """Seconds from SIGKILL to `pids()` (once a cell prints) to the KernelDied that ends the cell's run()."""
    killed: list[float] = []

    def kill(text: str) -> None:
        if not killed:
            killed.append(time.monotonic())
            for pid in pids():
                os.kill(pid, signal.SIGKILL)

    with pytest.raises(KernelDied, match=r"restarted: its process died.*restart\(\) starts a fresh one"):
        sb.run("import time\nprint('running', flush=True)\nwhile True:\n    time.sleep(0.05)", on_stdout=kill)
    return time.monotonic() - killed[0]


def test_a_kernel_that_dies_ends_the_waiting_call_with_kernel_died(gateway: KernelGateway) -> None:
    """Killed: the gateway restarts it without the state, and the waiting call (and the next) raise KernelDied
    within seconds; restart() then gives a working sandbox. Through EG, a launcher killed (a pod gone) is the
    same. Shut down by someone else: the same."""
    with Sandbox(**gateway.client_options()) as sb:
        victims = [lambda: gateway.kernel_pids(on_gateway(sb))]
        if isinstance(gateway, EnterpriseGateway):
            victims.append(lambda: gateway.launcher_pids(on_gateway(sb)))
        for pids in victims:
            assert len(pids()) == 1
            assert killed_while_running(sb, pids) < 15  # EG and KG look every 3 s; slack for a loaded machine
            with pytest.raises(KernelDied):
                sb.run("1 + 1")
            sb.restart()
            assert sb.run("1 + 1").text == "2"
        gateway.request("DELETE", f"/api/kernels/{on_gateway(sb)}")  # shut down by another client of the gateway
        started = time.monotonic()
        with pytest.raises(KernelDied, match="no longer has kernel"):
            sb.run("1 + 1")
        assert time.monotonic() - started < 2 + 10  # looked up every 2 s while a call waits
        with pytest.raises(KernelDied, match="no longer has kernel"):
            sb.interrupt()  # not the gateway's refusal of an interrupt for a kernel it does not have
        sb.restart()  # a kernel the gateway no longer has: a new one
        assert sb.run("2 + 2").text == "4"


def test_two_sandboxes_on_two_gateways_in_one_process(gateway: KernelGateway, other_gateway: KernelGateway) -> None:
    async def main() -> list[tuple[str, float]]:
        a = AsyncSandbox(**gateway.client_options())
        b = AsyncSandbox(**other_gateway.client_options())
        async with a, b:
            await asyncio.gather(a.run("who = 'a'"), b.run("who = 'b'"))
            slow = "import time\ntime.sleep(1)\nwho"
            results = await asyncio.gather(a.run(slow), b.run(slow))
            facts = await asyncio.gather(a.facts(), b.facts())
            return [(r.text or "", f["settings"]["cell_timeout"]) for r, f in zip(results, facts, strict=True)]

    assert asyncio.run(main()) == [("'a'", CELL_TIMEOUT), ("'b'", 42.0)]


def test_gateway_errors_name_the_url_and_the_status_never_the_token(gateway: KernelGateway) -> None:
    kernels_before = gateway.request("GET", "/api/kernels")
    wrong = "wrong-" + gateway.token
    with pytest.raises(GatewayError) as caught:
        Sandbox(**{**gateway.client_options(), "gateway_token": wrong}).start()
    assert caught.value.status == 401 and f"the gateway at {gateway.url} refused POST /api/kernels: HTTP 401" in str(
        caught.value
    )
    assert "gateway_token" in str(caught.value) and wrong not in str(caught.value)
    with pytest.raises(
        GatewayError,
        match=rf"has no kernel named 'nope' \(POST /api/kernels: HTTP 500\); it has .*'{gateway.kernel_name}'",
    ):
        Sandbox(**{**gateway.client_options(), "kernel_name": "nope"}).start()
    nothing_there = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(
        GatewayError, match=f"cannot reach the gateway at {nothing_there} \\(POST /api/kernels\\)"
    ) as caught:
        Sandbox(**{**gateway.client_options(), "gateway_url": nothing_there}).start()
    assert caught.value.status is None and gateway.token not in str(caught.value)
    assert [k["id"] for k in gateway.request("GET", "/api/kernels")] == [k["id"] for k in kernels_before]


def test_enterprise_gateway_refuses_a_user_it_does_not_authorize_and_the_error_says_to_give_kernel_username(
    gateway: KernelGateway,
) -> None:
    """EG starts kernels only for a KERNEL_USERNAME it authorizes; without one it takes its own user (refused here,
    as root is by default). The client passes EG's words on, and says how to give one."""
    if not isinstance(gateway, EnterpriseGateway):
        pytest.skip("Enterprise Gateway's own check")
    options = {key: value for key, value in gateway.client_options().items() if key != "gateway_env"}
    with pytest.raises(GatewayError) as caught:
        Sandbox(**options).start()
    assert caught.value.status == 403, caught.value
    assert f"User '{getpass.getuser()}' is not authorized to start kernel" in str(caught.value)
    assert "give one with gateway_env={'KERNEL_USERNAME': NAME}" in str(caught.value)
