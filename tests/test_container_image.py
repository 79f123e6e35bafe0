"""The container image definition (deploy/container/): its syntax, by the official Dockerfile parser; what the image
must hold (the wheel, the baked cache, an unprivileged user, a generic entry point); its build script; and the
runtime settings docs/container.md gives, against the calls the OS layers make.

Where podman and mmdebstrap are installed and the tests run as root (as .ci/run makes CI), the image is built for
real, as docs/container.md says, from a base made from Debian's archive for each suite in
SANDBOX_KERNEL_TEST_IMAGE_BASES ("bookworm trixie"; empty: none), then run. Or set SANDBOX_KERNEL_TEST_IMAGE to an
image's tag to run that one instead (and SANDBOX_KERNEL_TEST_ENGINE_ARGS to the options your podman needs).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import dockerfile
import pytest
from packaging.utils import canonicalize_name

from sandbox_kernel import __version__
from sandbox_kernel.sandbox.oslayers.diagnose import NEEDED_SYSCALLS
from sandbox_kernel.sandbox.oslayers.seccomp_profile import allows_layers, needed
from sandbox_kernel.sandbox.oslayers.seccomp_profile import main as seccomp_profile_main

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
    assert only(instructions, "COPY").value == (
        "sandbox_kernel-${VERSION}-py3-none-any.whl",
        "constraints.txt",
        "/tmp/",
    )
    run = only(instructions, "RUN").value[0]
    steps = [step.strip() for step in run.split("&&")]
    assert "pip install --constraint /tmp/constraints.txt /tmp/sandbox_kernel-${VERSION}-py3-none-any.whl" in steps
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
    the caller's options, and a context folder that holds exactly the wheel of this version (removed afterwards)."""
    record = tmp_path / "record.json"
    engine = tmp_path / "engine"
    engine.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'context': sorted(os.listdir(sys.argv[-1]))}}, open({str(record)!r}, 'w'))\n"
        "sys.exit(3)\n"  # a failed build: its status is build.sh's, and the context goes all the same
    )
    engine.chmod(0o755)
    env = {**os.environ, "ENGINE": str(engine), "BASE": "localhost/base:1", "PYTHON": sys.executable}
    done = subprocess.run(
        [str(FOLDER / "build.sh"), "--network=host"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr
    seen = json.loads(record.read_text())
    assert not Path(seen["argv"][-1]).exists(), "the context folder is removed when the build ends"
    argv = seen["argv"]
    assert argv[:3] == ["build", "--file", str(FOLDER / "Containerfile")], argv
    for pair in (["--build-arg", f"VERSION={__version__}"], ["--build-arg", "BASE=localhost/base:1"],
                 ["--tag", f"sandbox-kernel:{__version__}"]):  # fmt: skip
        assert any(argv[i : i + 2] == pair for i in range(len(argv))), (pair, argv)
    assert "--network=host" in argv
    assert seen["context"] == ["constraints.txt", WHEEL], seen


def load_script(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_image_pins_every_run_time_package_to_a_version_its_requirements_allow():
    """constraints.txt (made by constraints.py from a tested environment) pins sandbox-kernel's requirements and, for
    every pinned version installed here, that package's requirements, each to a version the requirement accepts."""
    script = load_script(FOLDER / "constraints.py")
    lines = (FOLDER / "constraints.txt").read_text().splitlines()
    assert lines[0].startswith("# Made by deploy/container/constraints.py")
    pinned = dict(line.split("==") for line in lines[1:] if not line.startswith("#"))
    left_out = {line[2:].split(script.NOT_PINNED)[0] for line in lines[1:] if script.NOT_PINNED in line}
    assert all(name == canonicalize_name(name) for name in pinned)
    checked = ["sandbox-kernel"] + [name for name, version in pinned.items() if metadata.version(name) == version]
    assert len(checked) > len(pinned) / 2, "most pins are this environment's versions: their requirements are known"
    for parent in checked:
        for req in script.requirements(parent):
            name = canonicalize_name(req.name)
            if name in script.UNPINNED or name in left_out:
                continue
            assert name in pinned, f"{parent} requires {req}, which constraints.txt does not pin"
            assert req.specifier.contains(pinned[name], prereleases=True), f"{name}=={pinned[name]}, {parent}: {req}"


def test_every_pin_installs_on_each_documented_base_python():
    """A pin whose version needs a newer Python than a base's (soupsieve 4.1.3: >= 3.11.5, bookworm has 3.11.2)
    made pip fail there with ResolutionImpossible; such a package is left to pip, with the comment saying why."""
    script = load_script(FOLDER / "constraints.py")
    for base in script.BASE_PYTHONS:
        assert base in DOC, f"docs/container.md does not name {base}"
    lines = (FOLDER / "constraints.txt").read_text().splitlines()
    pinned = dict(line.split("==") for line in lines[1:] if not line.startswith("#"))
    checked = [name for name, version in pinned.items() if metadata.version(name) == version]
    assert len(checked) > len(pinned) / 2
    for name in checked:
        needs, excluded = script.bases_excluded(name)
        assert not excluded, f"{name}=={pinned[name]} needs Python {needs}: it would not install on {excluded}"


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
BASES = os.environ.get("SANDBOX_KERNEL_TEST_IMAGE_BASES", "bookworm trixie").split()
PYTHON_OF = {"bookworm": "3.11", "trixie": "3.13"}  # each suite's python3
PODMAN_DEFAULT = Path("/usr/share/containers/seccomp.json")


def engine_options() -> list[str]:
    """The options podman needs here: SANDBOX_KERNEL_TEST_ENGINE_ARGS if set, else open-file and process limits of
    4096, or this process's own if lower (podman's defaults for root exceed a container's, and runc then fails with
    `error setting rlimit type 6` or `7`; here, nproc above 32768 did too, under a hard limit of 96362)."""
    if "SANDBOX_KERNEL_TEST_ENGINE_ARGS" in os.environ:
        return shlex.split(os.environ["SANDBOX_KERNEL_TEST_ENGINE_ARGS"])
    import resource

    limits = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}
    hard = {name: resource.getrlimit(which)[1] for name, which in limits.items()}
    within = {name: 4096 if n == resource.RLIM_INFINITY else min(n, 4096) for name, n in hard.items()}
    return [f"--ulimit={name}={n}:{n}" for name, n in within.items()]


def why_no_build() -> str:
    """Why this machine cannot build the image for the tests ('' if it can)."""
    missing = [p for p in ("podman", "mmdebstrap") if shutil.which(p) is None]
    if missing:
        return (
            f"no {' or '.join(missing)} (Debian: apt-get install podman mmdebstrap), and no SANDBOX_KERNEL_TEST_IMAGE"
        )
    if os.geteuid() != 0:
        return "building the image needs root here (as .ci/run runs); or set SANDBOX_KERNEL_TEST_IMAGE"
    return ""


def run_or_fail(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, f"{argv[0]} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module", params=[IMAGE] if IMAGE else [f"built on {suite}" for suite in BASES] or ["none"])
def image(request: pytest.FixtureRequest) -> Iterator[str]:
    """The image under test: SANDBOX_KERNEL_TEST_IMAGE, or one built here by the documented recipe (a base from
    Debian's archive by debian-base.sh, then build.sh) and removed afterwards."""
    if IMAGE:
        if shutil.which("podman") is None:
            pytest.skip("SANDBOX_KERNEL_TEST_IMAGE is set, but podman is not installed")
        yield IMAGE
        return
    if request.param == "none" or (reason := why_no_build()):
        pytest.skip(reason or "SANDBOX_KERNEL_TEST_IMAGE_BASES is empty")
    suite = request.param.removeprefix("built on ")
    base, tag = f"localhost/sandbox-kernel-test-base:{suite}", f"localhost/sandbox-kernel-test:{suite}"
    try:
        assert run_or_fail([str(FOLDER / "debian-base.sh"), suite, base]).split() == [base]
        options = ["--network=host", *(o for o in engine_options() if o.startswith("--ulimit"))]
        certificates = os.environ.get("SSL_CERT_FILE", "")
        if certificates and Path(certificates).is_file():  # a proxy that inspects TLS: its CA, as the docs say
            options.append(f"--secret=id=ca,src={certificates}")
        run_or_fail([str(FOLDER / "build.sh"), *options],
                    env={**os.environ, "BASE": base, "TAG": tag, "PYTHON": sys.executable})  # fmt: skip
        yield tag
    finally:
        subprocess.run(["podman", "rmi", "--force", tag, base], capture_output=True, timeout=300)


def test_the_image_is_built_on_its_bases_python(image):
    """The image's environment runs on the base's own python3 (bookworm 3.11, trixie 3.13), so the pins fit it."""
    done = subprocess.run(["podman", "run", "--rm", "--network=none", *engine_options(), "--entrypoint",
                           "/opt/sandbox-kernel/venv/bin/python", image, "-c", "import sys; print(sys.version)"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    suite = image.rpartition(":")[2]
    if IMAGE and suite not in PYTHON_OF:
        pytest.skip(f"{image} names no suite of {sorted(PYTHON_OF)}")
    assert done.stdout.startswith(PYTHON_OF[suite] + "."), done.stdout


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


def test_the_image_runs_offline_with_every_layer_and_says_what_a_default_profile_takes_away(image, tmp_path):
    engine = ["podman", "run", "--rm", "--network=none", *engine_options()]

    def run(*argv: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*engine, *options, image, *argv], capture_output=True, text=True, timeout=300)

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
    made = subprocess.run([*engine, "-v", f"{strict}:/base.json:ro", image, "seccomp-profile", "/base.json"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    fixed.write_text(made.stdout)
    assert full in layers_line(run(options=("--security-opt", f"seccomp={fixed}")))


TAKE = """
from sandbox_kernel import Sandbox
with Sandbox() as sb:
    sb.run("x = 6 * 7")
    print(sorted(sb.os_layers()["layers"]), sb.os_layers()["missing"], flush=True)
    sb.checkpoint("cp").save("/out/cp.sbkcp")
"""
GIVE = """
from sandbox_kernel import Checkpoint, Sandbox
with Sandbox.from_checkpoint(Checkpoint.load("/out/cp.sbkcp")) as sb:
    print(sb.run("print(x)").stdout, end="")
"""


def pod_of_the_template() -> dict:
    """The Kubernetes kernelspec's pod, rendered as EG's launch_kubernetes.py renders it (jinja2, trim_blocks)."""
    import jinja2
    import yaml

    from sandbox_kernel.enterprise_gateway import kernelspecs

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["yaml_safe"] = json.dumps
    text = env.from_string(kernelspecs.pod_template()).render(kernel_id="k", kernel_pod_name="p")
    return yaml.safe_load(text)


def test_as_the_pod_template_runs_it_every_layer_holds_and_a_checkpoint_moves_between_containers(image, tmp_path):
    """The image run as the pod template runs it (its user, a read-only root with the template's emptyDirs, no
    capabilities, no new privileges, a seccomp profile made by seccomp-profile, the checkpoint key's Secret as a file):
    every OS layer is in force; a checkpoint taken in one container is restored in another that has the same key,
    and refused by one with another key."""
    from sandbox_kernel.enterprise_gateway import kernelspecs

    if not PODMAN_DEFAULT.is_file():
        pytest.skip(f"no {PODMAN_DEFAULT} to make the seccomp profile from")
    pod = pod_of_the_template()
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    user = pod["spec"]["securityContext"]["runAsUser"], pod["spec"]["securityContext"]["runAsGroup"]
    key_path = {e["name"]: e.get("value") for e in container["env"]}["SANDBOX_KERNEL_CHECKPOINT_KEY"]
    empty = [m["mountPath"] for m in container["volumeMounts"] if "emptyDir" in
             {v["name"]: v for v in pod["spec"]["volumes"]}[m["name"]]]  # fmt: skip
    assert sorted(empty) == sorted([kernelspecs.IMAGE_HOME, "/tmp"])
    profile = tmp_path / "seccomp.json"
    profile.write_text(seccomp_profile_main(str(PODMAN_DEFAULT)))
    (tmp_path / "out").mkdir()
    (tmp_path / "out").chmod(0o777)  # the container's user writes the checkpoint there
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "take.py").write_text(TAKE)
    (tmp_path / "scripts" / "give.py").write_text(GIVE)
    for name in ("key", "other-key"):
        (tmp_path / name).write_bytes(os.urandom(32))
        (tmp_path / name).chmod(0o444)  # the Secret's 0440 with the pod's fsGroup: readable by the kernel's group

    def run(script: str, key: str) -> subprocess.CompletedProcess[str]:
        volumes = []
        for path in empty:  # a fresh emptyDir each time: 0777, as the kubelet makes one
            folder = tmp_path / f"empty-{script}-{key}{path.replace('/', '-')}"
            folder.mkdir()
            folder.chmod(0o777)
            volumes += ["-v", f"{folder}:{path}"]
        argv = [
            "podman", "run", "--rm", "--network=none", *engine_options(),
            "--read-only", f"--user={user[0]}:{user[1]}", "--cap-drop=ALL", "--security-opt=no-new-privileges",
            f"--security-opt=seccomp={profile}", *volumes, "-v", f"{tmp_path / key}:{key_path}:ro",
            "-e", f"SANDBOX_KERNEL_CHECKPOINT_KEY={key_path}", "-v", f"{tmp_path / 'out'}:/out",
            "-v", f"{tmp_path / 'scripts'}:/scripts:ro", "--entrypoint", "/opt/sandbox-kernel/venv/bin/python",
            image, f"/scripts/{script}",
        ]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)

    taken = run("take.py", "key")
    assert taken.returncode == 0, taken.stderr[-3000:]
    assert taken.stdout == "['landlock', 'namespaces', 'no_new_privs', 'seccomp'] {}\n", taken.stdout
    given = run("give.py", "key")
    assert (given.returncode, given.stdout) == (0, "42\n"), given.stderr[-3000:]
    refused = run("give.py", "other-key")
    assert refused.returncode != 0 and "its contents do not match its seal (HMAC-SHA256)" in refused.stderr


# ---- the image as Enterprise Gateway's DockerProcessProxy starts it, through podman's Docker API ----------------


def reachable_address() -> str:
    """This machine's address on its default route: a kernel's container reaches EG's response port there."""
    from sandbox_kernel.enterprise_gateway.arguments import LaunchArgumentError, route_address

    try:
        return route_address("192.0.2.1", 9)  # TEST-NET-1: routed by the default route, nothing is sent
    except LaunchArgumentError as exc:
        pytest.skip(f"no default route for the containers to reach EG on: {exc}")


def image_env(image: str) -> list[str]:
    done = subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)[0]["Config"]["Env"])


def containers_of(kernel_id: str) -> list[dict]:
    done = subprocess.run(["podman", "ps", "--all", "--format=json", f"--filter=label=kernel_id={kernel_id}"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout or "[]")


def test_enterprise_gateways_docker_proxy_runs_the_image_through_podmans_docker_api(image, tmp_path):
    """EG 3.3.0's DockerProcessProxy, pointed at podman's Docker API, starts a kernel from the container kernelspec:
    a cell runs with every OS layer in force, in a container with the kernelspec's image, user and confinement and
    EG's kernel_id label, removed at shutdown; a client's KERNEL_* value arrives as data and none of EG's own
    environment does; a checkpoint moves to another kernel's container (the kernelspec's checkpoint key); a
    client's KERNEL_IMAGE is refused within seconds, with the reason in EG's log."""
    import eg_server
    from podman_api import podman_api
    from sandbox_kernel.client.gateway_rest import GatewayError
    from sandbox_kernel.client.sync_sandbox import Sandbox
    from sandbox_kernel.enterprise_gateway import kernelspecs, launch_container

    eg = eg_server.installed()
    ulimits = tuple(o.removeprefix("--ulimit=").split(":")[0] for o in engine_options() if o.startswith("--ulimit="))

    key = tmp_path / "checkpoint.key"
    key.write_bytes(os.urandom(32))
    os.chown(key, 1000, 1000)  # the image's user's alone, as the docs say (the tests run as root)
    key.chmod(0o400)

    def write(kernels: Path) -> str:
        settings = kernelspecs.PodSettings(image=image)
        kernelspecs.write_container_kernelspec(kernels, settings, python=str(eg.python), ulimits=ulimits,
                                               checkpoint_key=str(key))  # fmt: skip
        return kernelspecs.CONTAINER_NAME

    response_ip = reachable_address()
    with podman_api(tmp_path / "podman") as docker_host:
        env = {"DOCKER_HOST": docker_host, "EG_DOCKER_NETWORK": "podman"}
        with eg_server.enterprise_gateway(tmp_path / "eg", eg, env=env, response_ip=response_ip,
                                          write_kernelspec=write) as gateway:  # fmt: skip
            hostile = "$(touch /tmp/ran)`id`;x"
            options = gateway.client_options()
            options["gateway_env"] = {**options["gateway_env"], "KERNEL_NOTE": hostile, "KERNEL_UID": "1234"}
            with Sandbox(**options) as sb:
                kernel_id = sb._async.kernel.kernel_id  # type: ignore[union-attr]
                assert sb.run("x = 6 * 7\nprint(x)").stdout == "42\n"
                checkpoint = sb.checkpoint()
                layers = sb.os_layers()
                assert sorted(layers["layers"]) == ["landlock", "namespaces", "no_new_privs", "seccomp"], layers
                (container,) = containers_of(kernel_id)
                assert container["Image"].endswith(image.removeprefix("localhost/")), container
                inspect = json.loads(subprocess.run(["podman", "inspect", container["Id"]], capture_output=True,
                                                    text=True, timeout=60).stdout)[0]  # fmt: skip
                assert inspect["Config"]["User"] == "1000:1000", inspect["Config"][
                    "User"
                ]  # the image's, not KERNEL_UID
                assert inspect["HostConfig"]["ReadonlyRootfs"] is True
                assert inspect["HostConfig"]["CapDrop"] and not inspect["HostConfig"]["CapAdd"]
                assert "no-new-privileges" in " ".join(inspect["HostConfig"]["SecurityOpt"] or [])
                assert inspect["Config"]["Cmd"][0] == "launch-eg", inspect["Config"]["Cmd"]
                passed = dict(item.split("=", 1) for item in inspect["Config"]["Env"])
                assert passed["KERNEL_NOTE"] == hostile  # a client's value, as data
                of_image = {item.split("=", 1)[0] for item in image_env(image)}
                added = {name for name in passed if name not in of_image} - {"SANDBOX_KERNEL_CHECKPOINT_KEY"}
                # EG's launch_docker.py would pass all of EG's environment (DOCKER_HOST, EG_*, JUPYTER_*, ...)
                engines = {"container", "HOSTNAME", "HOME", "TERM"}  # what podman sets in every container
                assert {name for name in added if not name.startswith("KERNEL_")} <= engines, sorted(added)
                assert "KERNEL_UID" not in passed and "DOCKER_HOST" not in passed
                host = inspect["HostConfig"]
                assert host["Memory"] == host["MemorySwap"] == (1024 + 512 + 4 * 512 + 256 + 512) * 2**20
                assert "size=2304m" in host["Tmpfs"]["/home/sandbox"] and "size=512m" in host["Tmpfs"]["/tmp"]
                assert not host["PortBindings"]
                assert [m["Destination"] for m in inspect["Mounts"]] == [launch_container.KEY_IN_CONTAINER]
                assert list(inspect["NetworkSettings"]["Networks"]) == ["podman"]
            with Sandbox.from_checkpoint(checkpoint, **gateway.client_options()) as restored:  # another container
                assert restored.run("print(x)").stdout == "42\n"
            assert containers_of(kernel_id) == [], "the kernel's container is removed at its shutdown"
            options["gateway_env"] = {
                **gateway.client_options()["gateway_env"],
                "KERNEL_IMAGE": "docker.io/library/busybox",
            }
            t0 = time.monotonic()
            with pytest.raises(GatewayError) as refused:
                with Sandbox(**options) as never:
                    never.run("1")
            assert time.monotonic() - t0 < 30, "EG answers once the launcher exits (its launch timeout is 180 s)"
            # EG 3.3.0 tells the client only to read its log (the launcher exited before any container existed)
            found = re.search(r"Error occurred during launch of KernelID: ([0-9a-f-]{36})\.", str(refused.value))
            assert found, refused.value
            said = f"launch_container.py: kernel {found[1]}: KERNEL_IMAGE 'docker.io/library/busybox' was refused: "
            assert said + f"this kernelspec runs {image} only" in gateway.log(), gateway.log()[-3000:]
