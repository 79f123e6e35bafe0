"""enterprise_gateway/launch_container.py, the launcher EG's DockerProcessProxy runs, and the container kernelspec
that runs it: what reaches the container is the kernelspec's (image, user, command, confinement, limits), a client's
KERNEL_* values arrive only as data, and what cannot be used is refused with the reason."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_kernel.enterprise_gateway import arguments, kernelspecs, launch_container, ssh_gate
from sandbox_kernel.enterprise_gateway.launch_container import Refused, container_options

IMAGE = "registry.example/sandbox-kernel:1.0"
ID = "3f2b8c1e-0000-4000-8000-000000000001"


def args(*extra: str) -> argparse.Namespace:
    return launch_container.parse(["--kernel-id", ID, "--image", IMAGE, *extra, "--", "launch-eg", "--kernel-id", ID])


def test_the_container_is_the_kernelspecs_and_a_clients_values_are_only_data():
    environ = {"KERNEL_USERNAME": "ann", "KERNEL_NOTE": "$(id)`id`", "KERNEL_UID": "0", "KERNEL_GID": "0",
               "KERNEL_WORKING_DIR": "/etc", "KERNEL_IMAGE": IMAGE, "EG_DOCKER_NETWORK": "podman",
               "DOCKER_HOST": "unix:///run/podman.sock", "EG_AUTH_TOKEN": "secret", "PATH": "/usr/bin"}  # fmt: skip
    options = container_options(args("--ulimit", "nofile=4096", "--memory-mb", "1536", "--home-mb=256"), environ)
    assert options["command"] == ["launch-eg", "--kernel-id", ID]
    assert options["environment"] == {"KERNEL_USERNAME": "ann", "KERNEL_NOTE": "$(id)`id`", "KERNEL_ID": ID}
    assert options["user"] == "1000:1000" and "working_dir" not in options  # never KERNEL_UID's, nor its folder
    assert options["network"] == "podman" and options["labels"]["kernel_id"] == ID  # type: ignore[index]
    assert (options["read_only"], options["cap_drop"]) == (True, ["ALL"])
    assert options["security_opt"] == ["no-new-privileges"]
    assert options["tmpfs"] == {"/home/sandbox": "rw,size=256m", "/tmp": "rw,size=512m"} and options["auto_remove"]
    assert options["ulimits"] == [{"Name": "nofile", "Soft": 4096, "Hard": 4096}]
    assert (options["mem_limit"], options["memswap_limit"]) == ("2304m", "2304m")  # the kernel's + both tmpfs
    assert (options["nano_cpus"], options["pids_limit"]) == (1_000_000_000, 4096)
    assert not {"ports", "privileged", "volumes", "cap_add", "entrypoint"} & set(options)


def test_a_clients_other_image_and_bad_arguments_are_refused_saying_why():
    with pytest.raises(Refused, match=f"KERNEL_IMAGE 'busybox' was refused: this kernelspec runs {IMAGE} only"):
        container_options(args(), {"KERNEL_IMAGE": "busybox"})
    refusals = {
        "--ulimit=core=0": "--ulimit 'core=0': nofile=N or nproc=N",
        "--tmpfs-options=rw,exec,suid": "--tmpfs-options 'rw,exec,suid': among rw, U, noexec",
        "--security-opt=seccomp=unconfined": "--security-opt 'seccomp=unconfined': apparmor=NAME",
        "--checkpoint-key=key": "--checkpoint-key 'key': an absolute path",
        "--memory-mb=0": "--memory-mb 0: 256 to",
    }
    for option, said in refusals.items():
        with pytest.raises(Refused, match=re.escape(said)):
            container_options(args(option), {})
    for network in ("host", "none", "container:eg", "ns:/proc/1/ns/net"):
        with pytest.raises(Refused, match=f"EG_DOCKER_NETWORK '{re.escape(network)}': a network of the engine's own"):
            container_options(args(), {"EG_DOCKER_NETWORK": network})
    bad = launch_container.parse(["--kernel-id", "../x", "--image", IMAGE, "--", "launch-eg"])
    with pytest.raises(Refused, match=r"kernel id '../x': letters, digits and \. _ -"):
        container_options(bad, {})


def test_an_option_abbreviated_or_given_twice_is_not_taken(capsys):
    for argv in (["--kernel-id", ID, "--im=evil", "--", "x"], ["--kernel-id", ID, "--image=a", "--image=b", "--", "x"]):
        with pytest.raises(SystemExit) as stopped:
            launch_container.parse(argv)
        assert stopped.value.code == 2
    said = capsys.readouterr().err
    assert "the following arguments are required: --image" in said and "--image is given more than once" in said
    assert launch_container.parse(["--kernel-id", ID, "--image=a", "--", "--image=b"]).command == ["--image=b"]


def test_the_checkpoint_key_is_mounted_read_only_where_the_kernel_reads_it():
    options = container_options(args("--checkpoint-key", "/srv/eg/checkpoint.key"), {})
    where = launch_container.KEY_IN_CONTAINER
    assert options["volumes"] == {"/srv/eg/checkpoint.key": {"bind": where, "mode": "ro"}}
    assert options["environment"]["SANDBOX_KERNEL_CHECKPOINT_KEY"] == where  # type: ignore[index]
    assert where == f"{kernelspecs.KEY_FOLDER}/{kernelspecs.KEY_FILE}"


def test_the_launchers_constants_are_the_packages():
    """The script cannot import the package (it runs with EG's Python), so its copies are checked here."""
    assert launch_container.HOME == kernelspecs.IMAGE_HOME
    assert launch_container.USER == f"{kernelspecs.IMAGE_UID}:{kernelspecs.IMAGE_UID}"
    assert launch_container.KERNEL_ID.pattern == arguments.KERNEL_ID.pattern
    assert launch_container.PASSED.pattern == ssh_gate.PASSED_ENV.pattern
    assert container_options(args(), {"KERNEL_lower": "x", "KERNEL_OK_1": "y"})["environment"] == {
        "KERNEL_OK_1": "y", "KERNEL_ID": ID}  # fmt: skip


def test_a_refusal_exits_1_with_one_line_before_any_engine_is_asked():
    script = Path(launch_container.__file__)
    done = subprocess.run([sys.executable, "-I", str(script), "--kernel-id", ID, "--image", IMAGE, "--", "launch-eg"],
                          env={"KERNEL_IMAGE": "busybox", "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    said = f"launch_container.py: kernel {ID}: KERNEL_IMAGE 'busybox' was refused: this kernelspec runs {IMAGE} only\n"
    assert done.stderr == said


def test_the_kernelspec_runs_the_script_with_the_launchers_words_after_the_separator(tmp_path):
    settings = kernelspecs.PodSettings(image=IMAGE, memory_limit_mb=2048)
    folder = kernelspecs.write_container_kernelspec(tmp_path, settings, python="/opt/eg/bin/python",
                                                    checkpoint_key="/srv/key")  # fmt: skip
    script = folder / "scripts" / "launch_container.py"
    assert script.read_text() == Path(launch_container.__file__).read_text()
    spec = json.loads((folder / "kernel.json").read_text())
    argv = spec["argv"]
    assert argv[:4] == ["/opt/eg/bin/python", "-I", str(script), "--kernel-id={kernel_id}"]
    parsed = launch_container.parse(argv[3:])
    assert (parsed.image, parsed.memory_mb, parsed.checkpoint_key, parsed.cpus) == (IMAGE, 2560, "/srv/key", 1.0)
    assert parsed.home_mb == settings.max_checkpoints * kernelspecs.CHECKPOINT_MB + 256  # as the pod's home
    assert parsed.ulimit == ["nofile=4096", "nproc=4096"] and parsed.tmpfs_options == "rw,U"
    assert parsed.command == [*kernelspecs.launcher_arguments(kernelspecs.EG_VALUES), "--ip", "route",
                              *settings.kernel_settings()]  # fmt: skip
    proxy = spec["metadata"]["process_proxy"]
    assert proxy == {"class_name": kernelspecs.DOCKER_PROXY, "config": {"image_name": IMAGE}}


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"script": "kernels/x/launch_container.py"}, "script 'kernels/x/launch_container.py': an absolute path"),
        ({"python": "venv/bin/python"}, "python 'venv/bin/python': an absolute path, or a name on EG's PATH"),
        ({"checkpoint_key": "key"}, "checkpoint_key 'key': an absolute path"),
        ({"python": "/opt/{prefix}/python"}, "no { or }"),
        ({"ulimits": ("core=0",)}, "--ulimit 'core=0'"),
        ({"tmpfs_options": "rw,exec"}, "--tmpfs-options 'rw,exec'"),
        ({"security_opts": ("seccomp=unconfined",)}, "--security-opt 'seccomp=unconfined'"),
        ({"settings": kernelspecs.PodSettings(image="not an image")}, "image 'not an image'"),
    ],
)
def test_the_kernelspec_refuses_what_a_launch_could_not_use(options, said):
    """A relative path would be looked up in the folder EG starts the launcher in, which a client's `path` picks."""
    given = {"settings": kernelspecs.PodSettings(image=IMAGE), "script": "/eg/launch_container.py", **options}
    with pytest.raises(ValueError, match=re.escape(said)):
        kernelspecs.container_kernel_json(**given)


def test_the_distributed_kernelspec_runs_sandbox_kernel_by_its_full_path():
    with pytest.raises(ValueError, match="command 'sandbox-kernel': the full path"):
        kernelspecs.distributed_kernel_json("sandbox-kernel", ["node1"])


def test_the_script_imports_only_the_standard_library_and_docker():
    """EG's Python has no sandbox_kernel: the script stands alone."""
    import ast

    tree = ast.parse(Path(launch_container.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - sys.stdlib_module_names == {"docker"}, names


STAND_IN_DOCKER = """
import json, os
LOG = os.environ["STAND_IN_LOG"]
def said(*words):
    with open(LOG, "a") as f:
        f.write(json.dumps(words) + "\\n")
class DockerException(Exception):
    pass
class Container:
    short_id = "c0ffee"
    def start(self):
        said("start")
        if os.environ.get("STAND_IN_FAIL"):
            raise DockerException("runc: error setting rlimit type 6\\nsecond line")
    def remove(self, force=False):
        said("remove", force)
class Containers:
    def create(self, image, **options):
        said("create", image, sorted(options))
        return Container()
class DockerClient:
    containers = Containers()
    @classmethod
    def from_env(cls):
        return cls()
"""


@pytest.mark.parametrize("fails", [False, True])
def test_a_container_that_cannot_start_is_removed_and_nothing_is_pulled(tmp_path, fails):
    """With a stand-in `docker` package: the container is created (create() never pulls) and started; one whose start
    fails is removed at once, and the engine's words come on one line."""
    package = tmp_path / "docker"
    package.mkdir()
    (package / "__init__.py").write_text(STAND_IN_DOCKER)
    (package / "errors.py").write_text("from docker import DockerException\n")
    (package / "types.py").write_text("def Ulimit(**fields):\n    return fields\n")
    log = tmp_path / "engine.log"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "STAND_IN_LOG": str(log),
           **({"STAND_IN_FAIL": "1"} if fails else {})}  # fmt: skip
    done = subprocess.run([sys.executable, str(Path(launch_container.__file__)), "--kernel-id", ID, "--image", IMAGE,
                           "--ulimit=nofile=4096", "--", "launch-eg"], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0][:2] == ["create", IMAGE] and "auto_remove" in calls[0][2]
    if fails:
        assert calls[1:] == [["start"], ["remove", True]]
        assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
        assert (
            "the engine did not start registry.example/sandbox-kernel:1.0: 'runc: error setting rlimit type 6\\nsecond line'"
            in done.stderr
        )
    else:
        assert calls[1:] == [["start"]]
        assert (done.returncode, done.stderr) == (0, f"launch_container.py: kernel {ID}: container c0ffee started\n")
