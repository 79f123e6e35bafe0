"""The container image definition (deploy/container/): its syntax, by the official Dockerfile parser; what the image
must hold (the wheel, the baked cache, an unprivileged user, a generic entry point); its build script; and the
runtime settings docs/container.md gives, against the calls the OS layers make.

A real build and run is opt-in (no container engine in CI): build the image with deploy/container/build.sh, then
set SANDBOX_KERNEL_TEST_IMAGE to its tag (and SANDBOX_KERNEL_TEST_ENGINE_ARGS to any options your podman needs).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest

from sandbox_kernel import __version__
from sandbox_kernel.sandbox.oslayers.diagnose import NEEDED_SYSCALLS
from sandbox_kernel.sandbox.oslayers.seccomp_profile import allows_layers, needed

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "deploy" / "container"
DOC = (REPO / "docs" / "container.md").read_text()
CACHE = "/opt/sandbox-kernel/cache"
WHEEL = f"sandbox_kernel-{__version__}-py3-none-any.whl"


@pytest.fixture(scope="module")
def instructions() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(FOLDER / "Containerfile")))


def only(instructions: list[dockerfile.Command], cmd: str) -> dockerfile.Command:
    (found,) = [i for i in instructions if i.cmd == cmd]
    return found


def test_the_image_is_built_from_a_pinned_base_the_user_can_set(instructions):
    base_arg, from_ = instructions[0], only(instructions, "FROM")
    assert base_arg.cmd == "ARG" and base_arg.value[0].startswith("BASE=")
    base = base_arg.value[0].removeprefix("BASE=")
    # a tag that names Python and the Debian release (or a digest): never a moving `latest`
    assert re.fullmatch(r"docker\.io/library/python:3\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    assert from_.value == ("${BASE}",)


def test_the_image_installs_the_wheel_registers_the_kernel_and_bakes_the_cache(instructions):
    values = only(instructions, "ENV").value
    env = dict(zip(values[::2], values[1::2], strict=True))
    assert env["SANDBOX_KERNEL_CACHE"] == CACHE
    assert only(instructions, "COPY").value == ("sandbox_kernel-${VERSION}-py3-none-any.whl", "/tmp/")
    run = only(instructions, "RUN").value[0]
    steps = [step.strip() for step in run.split("&&")]
    assert "pip install /tmp/sandbox_kernel-${VERSION}-py3-none-any.whl" in steps
    assert "sandbox-kernel install --sys-prefix --no-fetch" in steps
    assert f"sandbox-kernel fetch --to {CACHE}" in steps
    assert steps.index(f"sandbox-kernel fetch --to {CACHE}") > steps.index(
        "sandbox-kernel install --sys-prefix --no-fetch"
    )


def test_kernels_run_as_an_unprivileged_user_through_a_generic_entry_point(instructions):
    user = only(instructions, "USER").value[0]
    assert user.split(":")[0] not in ("root", "0"), user
    (uid,) = [i.value[0] for i in instructions if i.cmd == "ARG" and i.value[0].startswith("UID=")]
    assert user == "${UID}:${UID}" and uid != "UID=0", uid
    assert only(instructions, "ENTRYPOINT").json and only(instructions, "ENTRYPOINT").value == ("sandbox-kernel",)
    assert only(instructions, "CMD").value == ("doctor",)
    assert instructions[-1].cmd in ("CMD", "ENTRYPOINT")


def test_build_sh_gives_the_engine_a_context_of_the_wheel_the_containerfile_copies(tmp_path):
    """build.sh with a stand-in engine that records what it was given: the Containerfile, VERSION, BASE, the tag,
    the caller's options, and a context folder that holds exactly the wheel of this version."""
    record = tmp_path / "record.json"
    engine = tmp_path / "engine"
    engine.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'context': sorted(os.listdir(sys.argv[-1]))}}, open({str(record)!r}, 'w'))\n"
    )
    engine.chmod(0o755)
    env = {**os.environ, "ENGINE": str(engine), "BASE": "localhost/base:1", "PYTHON": sys.executable}
    done = subprocess.run(
        [str(FOLDER / "build.sh"), "--network=host"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[:3] == ["build", "--file", str(FOLDER / "Containerfile")], argv
    for pair in (["--build-arg", f"VERSION={__version__}"], ["--build-arg", "BASE=localhost/base:1"],
                 ["--tag", f"sandbox-kernel:{__version__}"]):  # fmt: skip
        assert any(argv[i : i + 2] == pair for i in range(len(argv))), (pair, argv)
    assert "--network=host" in argv
    assert seen["context"] == [WHEEL], seen


def test_the_documented_runtime_settings_allow_every_call_the_layers_make():
    """docs/container.md gives the run options and the Kubernetes fields for the OS layers, and names every call the
    launcher makes (the one list a seccomp profile must allow: diagnose.NEEDED_SYSCALLS)."""
    for call in needed():
        assert f"`{call}`" in DOC, call
    for setting in (
        "sandbox-kernel seccomp-profile",
        "--security-opt seccomp=",
        "--security-opt apparmor=unconfined",
        "type: Localhost",
        "localhostProfile:",
        "appArmorProfile:",
        "type: Unconfined",
        f"SANDBOX_KERNEL_CACHE={CACHE}",
        "sandbox-kernel doctor",
    ):
        assert setting in DOC, setting
    assert set(NEEDED_SYSCALLS) == {"namespaces", "landlock", "seccomp"}


# ---- opt-in: a real image, run by podman ----------------------------------------------------------------------

IMAGE = os.environ.get("SANDBOX_KERNEL_TEST_IMAGE", "")
PODMAN_DEFAULT = Path("/usr/share/containers/seccomp.json")


def docker_like(profile: dict) -> dict:
    """`profile` with the launcher's calls allowed only to CAP_SYS_ADMIN and the Landlock calls unknown: the shape of
    Docker's and containerd's default profiles before Landlock."""
    made = copy.deepcopy(profile)
    rules = [{**r, "names": [n for n in r.get("names", []) if n not in needed()]} for r in made["syscalls"]]
    rules = [r for r in rules if r["names"]]
    rules.append({"names": list(NEEDED_SYSCALLS["namespaces"]), "action": "SCMP_ACT_ALLOW",
                  "includes": {"caps": ["CAP_SYS_ADMIN"]}})  # fmt: skip
    rules.append({"names": ["prctl", "seccomp"], "action": "SCMP_ACT_ALLOW"})
    made["syscalls"] = rules
    return made


@pytest.mark.skipif(not IMAGE or shutil.which("podman") is None, reason="opt-in: set SANDBOX_KERNEL_TEST_IMAGE")
def test_the_image_runs_offline_with_every_layer_and_says_what_a_default_profile_takes_away(tmp_path):
    engine = [
        "podman",
        "run",
        "--rm",
        "--network=none",
        *shlex.split(os.environ.get("SANDBOX_KERNEL_TEST_ENGINE_ARGS", "")),
    ]

    def run(*argv: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*engine, *options, IMAGE, *argv], capture_output=True, text=True, timeout=300)

    def layers_line(done: subprocess.CompletedProcess[str]) -> str:
        (line,) = [line for line in done.stdout.splitlines() if "os layers:" in line]
        return line

    full = "OS layers in force: namespaces (user, mount, ipc, uts, net, private root), landlock (ABI"
    assert full in layers_line(run()), run().stdout
    cell = run("run", "-c", "import sandbox_guest.api as a; print(6 * 7, a.STARTED_FROM_SNAPSHOT)")
    assert (cell.returncode, cell.stdout) == (0, "42 True\n"), cell.stderr
    if not PODMAN_DEFAULT.is_file():
        pytest.skip(f"no {PODMAN_DEFAULT} to derive a Docker-like profile from")
    strict = tmp_path / "docker-like.json"
    strict.write_text(json.dumps(docker_like(json.loads(PODMAN_DEFAULT.read_text()))))
    assert allows_layers(json.loads(strict.read_text()))  # it does refuse something
    degraded = layers_line(run(options=("--security-opt", f"seccomp={strict}")))
    assert degraded.startswith("[warn] os layers: OS layers in force: seccomp ("), degraded
    assert "missing: namespaces (unshare(CLONE_NEWUSER) failed with" in degraded and "seccomp-profile" in degraded
    fixed = tmp_path / "fixed.json"
    made = subprocess.run([*engine, "-v", f"{strict}:/base.json:ro", IMAGE, "seccomp-profile", "/base.json"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    fixed.write_text(made.stdout)
    assert full in layers_line(run(options=("--security-opt", f"seccomp={fixed}")))
