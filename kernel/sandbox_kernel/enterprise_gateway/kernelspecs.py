"""Enterprise Gateway's kernelspecs for this kernel: the one place that spells the launcher's words and the pod.

- Kubernetes (`KubernetesProcessProxy`): kernel.json (`kubernetes_kernel_json`) runs EG's own
  `launch_kubernetes.py`, which renders the kernelspec's `scripts/kernel-pod.yaml.j2` (`pod_template`) into the
  kernel's pod; the pod runs `sandbox-kernel launch-eg` with POD_VALUES, which Kubernetes fills from the pod's
  environment (launch_kubernetes.py puts KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY and PORT_RANGE there). What EG's
  clients may not choose (namespace, image, service account, user, resources) is written into the template from
  PodSettings, never taken from their KERNEL_* variables. deploy/enterprise-gateway/kernelspec.py writes both files
  (with an operator's own PodSettings); the repository keeps them made with the defaults, which a test checks.
- A container engine on EG's host (`DockerProcessProxy`: Docker, or podman's Docker API): kernel.json
  (`container_kernel_json`) runs launch_container.py (beside it in scripts/, with EG's Python), which starts the
  image with the container's command and confinement written here; `write_container_kernelspec` writes both.
- Hosts reached by EG directly or over SSH (`DistributedProcessProxy`): the kernelspec's argv is the launcher
  itself (the `sandbox-kernel` command, then EG_VALUES, which EG substitutes); on each SSH host, EG's key runs
  only `sandbox-kernel eg-ssh` (ssh_gate.py).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from string import Template

from sandbox_kernel import __version__
from sandbox_kernel.enterprise_gateway import arguments, launch_container
from sandbox_kernel.jupyter.kernelspec import DISPLAY_NAME, kernel_json

IMAGE = f"sandbox-kernel:{__version__}"  # the kernel's container image (deploy/container/)
KERNELSPECS_IMAGE = (
    f"sandbox-kernel-eg-kernelspecs:{__version__}"  # deploy/enterprise-gateway/Containerfile.kernelspecs
)
IMAGE_COMMAND = "/opt/sandbox-kernel/venv/bin/sandbox-kernel"  # `sandbox-kernel` in that image, by its full path
IMAGE_UID = 1000  # the image's user `sandbox` (deploy/container/Containerfile's UID), and its group
IMAGE_HOME = "/home/sandbox"
KUBERNETES_NAME = "pyodide-sandbox_kubernetes"
DISTRIBUTED_NAME = "pyodide-sandbox_distributed"
CONTAINER_NAME = "pyodide-sandbox_container"
EG_KERNELS = "/usr/local/share/jupyter/kernels"  # where EG's image and its Helm chart keep kernelspecs
KUBERNETES_PROXY = "enterprise_gateway.services.processproxies.k8s.KubernetesProcessProxy"
DISTRIBUTED_PROXY = "enterprise_gateway.services.processproxies.distributed.DistributedProcessProxy"
DOCKER_PROXY = "enterprise_gateway.services.processproxies.docker_swarm.DockerProcessProxy"
KEY_FOLDER = "/etc/sandbox-kernel/checkpoint-key"  # where the pod mounts the checkpoint key's Secret
KEY_FILE = "checkpoint.key"  # the key of that Secret, and the file name
CHECKPOINT_MB = 512  # SandboxKernel.max_checkpoint_bytes' default, in MiB: what one checkpoint file may hold
UNCONFINED = "Unconfined"  # PodSettings.seccomp_profile without a profile on the nodes (the documented fallback)
# The pod's own IP (the downward API's status.podIP), the address EG's KubernetesProcessProxy connects to: the
# kernel's ports listen there and on no other address. Not a KERNEL_* name: EG's clients cannot set it.
POD_IP_ENV = "SANDBOX_KERNEL_POD_IP"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})  # remote_hosts EG runs the launcher on, reached on loopback

_IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")  # registry/path:tag@digest, nothing YAML/Jinja
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_DNS_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
_PROFILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,200}")
_SHELL_INERT = re.compile(r"[A-Za-z0-9_./:=@%+{}-]+")  # a word bash leaves as it is: no quote, space, $, ;, glob or
# comma ({} only for EG's placeholders, which bash expands only around a comma or `..`, and EG replaces first)


@dataclass(frozen=True)
class LaunchValues:
    """The four values EG gives a launcher, as they are written where the launcher's words are."""

    kernel_id: str
    response_address: str
    public_key: str
    port_range: str


EG_VALUES = LaunchValues("{kernel_id}", "{response_address}", "{public_key}", "{port_range}")  # EG substitutes
POD_VALUES = LaunchValues("$(KERNEL_ID)", "$(RESPONSE_ADDRESS)", "$(PUBLIC_KEY)", "$(PORT_RANGE)")  # Kubernetes does


def launcher_arguments(values: LaunchValues) -> list[str]:
    """The words after `sandbox-kernel`: the launcher and EG's four values."""
    return [
        "launch-eg",
        "--kernel-id",
        values.kernel_id,
        "--response-address",
        values.response_address,
        "--public-key",
        values.public_key,
        "--port-range",
        values.port_range,
    ]


@dataclass(frozen=True)
class PodSettings:
    """The operator's choices for the kernel's pod, which EG's clients cannot change."""

    image: str = IMAGE
    namespace: str = "enterprise-gateway"  # EG's own (the chart's shareGatewayNamespace), where network-policy.yaml is
    service_account: str = "default"  # the pod gets no token of it (automountServiceAccountToken: false)
    seccomp_profile: str = "sandbox-kernel-seccomp.json"  # under the kubelet's seccomp folder; or UNCONFINED
    key_secret: str = "sandbox-kernel-checkpoint-key"  # the Secret holding the checkpoint key (KEY_FILE)
    memory_limit_mb: int = 1024  # SandboxKernel.memory_limit_mb; the pod's memory limit is this + 512 MiB
    max_checkpoints: int = 4  # SandboxKernel.max_checkpoints; the pod's home holds that many of CHECKPOINT_MB

    def problems(self) -> list[str]:
        """What is wrong with these settings, each with what is allowed."""
        found = []
        if not _IMAGE_REF.fullmatch(self.image):
            found.append(f"image {self.image!r:.100}: an image reference (registry/name:tag or @sha256:...)")
        if not _DNS_LABEL.fullmatch(self.namespace):
            found.append(f"namespace {self.namespace!r:.100}: a Kubernetes namespace name (a DNS label)")
        for name, value in (("service account", self.service_account), ("secret", self.key_secret)):
            if not _DNS_NAME.fullmatch(value):
                found.append(f"{name} {value!r:.100}: a Kubernetes object name (lower-case DNS name)")
        if self.seccomp_profile != UNCONFINED and (
            not _PROFILE.fullmatch(self.seccomp_profile) or ".." in self.seccomp_profile
        ):
            found.append(
                f"seccomp profile {self.seccomp_profile!r:.100}: a file name under the kubelet's seccomp folder, "
                f"or {UNCONFINED!r}"
            )
        if not 256 <= self.memory_limit_mb <= 65536:
            found.append(f"memory_limit_mb {self.memory_limit_mb}: 256 to 65536")
        if not 1 <= self.max_checkpoints <= 100:
            found.append(f"max_checkpoints {self.max_checkpoints}: 1 to 100")
        return found

    def kernel_settings(self) -> list[str]:
        """The kernel's settings on the pod's command line: the OS layers required, and the two the pod is sized by."""
        return [
            "--SandboxKernel.os_sandbox=required",
            f"--SandboxKernel.memory_limit_mb={self.memory_limit_mb}",
            f"--SandboxKernel.max_checkpoints={self.max_checkpoints}",
        ]


def _base(program: str, display_name: str, process_proxy: dict[str, object]) -> dict[str, object]:
    """This kernel's kernel.json (its language, interrupt mode, env) with EG's process proxy and a name; the caller
    writes its argv (`program` only fills the one it replaces)."""
    spec = kernel_json(program)
    metadata = dict(spec.get("metadata") or {})  # type: ignore[call-overload]
    # EG starts kernels through its process proxy, in an environment without this package: no pooled provisioner.
    metadata.pop("kernel_provisioner", None)
    metadata["process_proxy"] = process_proxy
    spec.update(display_name=display_name, metadata=metadata)
    return spec


def kubernetes_kernel_json(image: str = IMAGE) -> dict[str, object]:
    """The kernel.json EG's pod runs: EG's launch_kubernetes.py (beside it in scripts/) makes the kernel's pod.
    `image_name` is what EG's kernel image puller pulls onto each node (the pod template names the same image)."""
    spec = _base(
        "python", f"{DISPLAY_NAME} on Kubernetes", {"class_name": KUBERNETES_PROXY, "config": {"image_name": image}}
    )
    script = f"{EG_KERNELS}/{KUBERNETES_NAME}/scripts/launch_kubernetes.py"
    spec["argv"] = ["python", script, *launcher_arguments(EG_VALUES)[1:]]  # its options are the launcher's
    return spec


def distributed_kernel_json(
    command: str, remote_hosts: list[str], *, port_range: str | None = None, ip: str | None = None
) -> dict[str, object]:
    """A kernel.json for EG's DistributedProcessProxy: the launcher on `remote_hosts` (EG starts it itself on its
    own host, over SSH on others), run as `command`, the full path of `sandbox-kernel` (the same on every host).

    EG joins the argv into one shell line with spaces, unquoted, so every word must be inert in a shell. The
    ports listen on loopback for EG's own host, and elsewhere on `ip`, by default `route`: each host's address on
    its route to EG. Kernel settings are not given here: on other hosts they come from the host's configuration
    files (the SSH key's forced command, `sandbox-kernel eg-ssh`, passes none)."""
    if not command.startswith("/"):
        raise ValueError(f"command {command!r:.100}: the full path of `sandbox-kernel` (the same on every host)")
    local = set(remote_hosts) <= LOOPBACK_HOSTS
    if ip is None and not local:
        ip = arguments.ROUTE
    if ip not in (None, arguments.ROUTE) and len(remote_hosts) > 1 and not ip.startswith("127."):
        raise ValueError(
            f"ip {ip!r:.100} is one host's address, and remote_hosts names {len(remote_hosts)}: give "
            f"ip={arguments.ROUTE!r} (each host's own address towards EG), or one kernelspec per host"
        )
    config: dict[str, object] = {"remote_hosts": ",".join(remote_hosts)}
    if port_range:
        config["port_range"] = port_range
    spec = _base(command, f"{DISPLAY_NAME}, distributed", {"class_name": DISTRIBUTED_PROXY, "config": config})
    argv = [command, *launcher_arguments(EG_VALUES), *(["--ip", ip] if ip else [])]
    if unsafe := [word for word in argv if not _SHELL_INERT.fullmatch(word)]:
        raise ValueError(
            f"argv words {unsafe!r:.300} would change meaning in the shell line EG builds over SSH: allowed are "
            "letters, digits and _ . / : = @ % + - (give a path without spaces, quotes or commas)"
        )
    spec["argv"] = argv
    return spec


def container_kernel_json(
    settings: PodSettings, script: str, *, python: str = "python", tmpfs_options: str = "rw,U",
    checkpoint_key: str | None = None, ulimits: tuple[str, ...] = ("nofile=4096", "nproc=4096"), cpus: float = 1.0,
    security_opts: tuple[str, ...] = (),
) -> dict[str, object]:  # fmt: skip
    """A kernel.json for EG's DockerProcessProxy: `python` (EG's, with the `docker` package; an absolute path or a
    name on EG's PATH) runs launch_container.py at `script` (absolute), which starts `settings.image` with the
    launcher's words as its command. Of `settings`, the image, `memory_limit_mb` and `max_checkpoints` apply.

    The container has the pod's limits: the image's user, a read-only root with its home (sized for the
    checkpoints) and /tmp on tmpfs, no capabilities, no new privileges, `cpus`, a memory limit of the kernel's +
    512 MiB + those tmpfs (their pages count as memory) and no swap, the kernel's settings; and the engine's default
    seccomp profile, under which every OS layer is in force with podman (Docker's: docs/container.md).
    `tmpfs_options` "rw,U" makes podman give the tmpfs to the image's user; Docker takes "rw,mode=1777". `ulimits`
    keep the container's limits within the host's (podman's defaults for root may exceed them); `security_opts`
    takes `apparmor=NAME`. `checkpoint_key`, a file on EG's host, is every container's checkpoint key, so that
    checkpoints move between kernels. ValueError says what cannot be used."""
    problems = settings.problems()
    for name, path in (("script", script), ("checkpoint_key", checkpoint_key or "/")):
        if not path.startswith("/"):
            problems.append(f"{name} {path!r:.100}: an absolute path (EG starts the launcher in a client's folder)")
    if "/" in python and not python.startswith("/"):
        problems.append(f"python {python!r:.100}: an absolute path, or a name on EG's PATH")
    if any(c in word for word in (python, script) for c in "{}"):
        problems.append("python and script: no { or } (EG would fill them in)")
    words = [*launcher_arguments(EG_VALUES), "--ip", arguments.ROUTE, *settings.kernel_settings()]
    options = [
        *(f"--ulimit={u}" for u in ulimits),
        f"--memory-mb={settings.memory_limit_mb + 512}",
        f"--cpus={cpus:g}",
        f"--home-mb={settings.max_checkpoints * CHECKPOINT_MB + 256}",
        f"--tmpfs-options={tmpfs_options}",
        *(f"--security-opt={o}" for o in security_opts),
        *([f"--checkpoint-key={checkpoint_key}"] if checkpoint_key else []),
    ]
    problems += launch_container.checked_options(
        launch_container.parse([*options, "--kernel-id=k", "--image=i", "--", "x"])
    )
    if problems:
        raise ValueError("; ".join(problems))
    proxy: dict[str, object] = {"class_name": DOCKER_PROXY, "config": {"image_name": settings.image}}
    spec = _base(python, f"{DISPLAY_NAME} in a container", proxy)
    spec["argv"] = [python, "-I", script, f"--kernel-id={EG_VALUES.kernel_id}", f"--image={settings.image}", *options,
                    "--", *words]  # fmt: skip
    return spec


def write_container_kernelspec(folder: Path, settings: PodSettings, **options: object) -> Path:
    """Write `folder`/CONTAINER_NAME (kernel.json and scripts/launch_container.py) as EG's kernels folder
    `folder` holds it; `options` go to container_kernel_json."""
    spec_folder = folder.resolve() / CONTAINER_NAME
    script = spec_folder / "scripts" / "launch_container.py"
    spec = container_kernel_json(settings, str(script), **options)  # type: ignore[arg-type]
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(launch_container.__file__), script)
    (spec_folder / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
    return spec_folder


def pod_template(pod: PodSettings | None = None) -> str:
    """The text of scripts/kernel-pod.yaml.j2 for `pod` (ValueError listing what is wrong with it)."""
    pod = pod or PodSettings()
    problems = pod.problems()
    if problems:
        raise ValueError("the pod's settings cannot be used: " + "; ".join(problems))
    home_mb = pod.max_checkpoints * CHECKPOINT_MB + 256
    if pod.seccomp_profile == UNCONFINED:
        seccomp = "type: Unconfined"
    else:
        seccomp = f"type: Localhost\n      localhostProfile: {json.dumps(pod.seccomp_profile)}"
    words = [IMAGE_COMMAND, *launcher_arguments(POD_VALUES), "--ip", f"$({POD_IP_ENV})", *pod.kernel_settings()]
    return _POD.substitute(
        namespace=json.dumps(pod.namespace),
        service_account=json.dumps(pod.service_account),
        image=json.dumps(pod.image),
        uid=IMAGE_UID,
        home=IMAGE_HOME,
        seccomp=seccomp,
        command=json.dumps(words[:1]),
        args="".join(f"\n    - {json.dumps(word)}" for word in words[1:]),
        key_secret=json.dumps(pod.key_secret),
        key_folder=KEY_FOLDER,
        key_file=KEY_FILE,
        pod_ip_env=POD_IP_ENV,
        memory_request="400Mi",
        memory_limit=f"{pod.memory_limit_mb + 512}Mi",
        home_mb=home_mb,
        storage_limit=f"{home_mb + 512 + 256}Mi",
    )


_POD = Template("""\
# The pod of one sandbox-kernel for Jupyter Enterprise Gateway on Kubernetes (KubernetesProcessProxy), made by
# deploy/enterprise-gateway/kernelspec.py (its options: image, namespace, service account, seccomp profile): run it
# again rather than editing this file, or edit both files of the kernelspec alike. EG's own launch_kubernetes.py,
# beside it in scripts/, renders it: only kernel_id and kernel_pod_name come from EG; what EG's clients could set
# through KERNEL_* variables (namespace, image, service account, user and group, resources) is fixed here.
# launch_kubernetes.py adds its whole environment to the container's env (KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY,
# PORT_RANGE among it), and Kubernetes expands $$(NAME) in `args` from it. Why each setting: docs/enterprise-gateway.md.
apiVersion: v1
kind: Pod
metadata:
  name: {{ kernel_pod_name | yaml_safe }}
  # Not the client's KERNEL_NAMESPACE: only here does network-policy.yaml keep other pods away from the comm port.
  # (A client that sets one gets the API server's refusal: the pod's namespace differs from the request's.)
  namespace: ${namespace}
  labels:
    kernel_id: {{ kernel_id | yaml_safe }}
    app: enterprise-gateway
    component: kernel
    source: pyodide-sandbox-kernel-pod
  annotations:
    cluster-autoscaler.kubernetes.io/safe-to-evict: "false"
    # The same as appArmorProfile below, for Kubernetes before 1.30.
    container.apparmor.security.beta.kubernetes.io/sandbox-kernel: unconfined
spec:
  restartPolicy: Never
  serviceAccountName: ${service_account}
  # The kernel never calls the Kubernetes API: no token in the pod.
  automountServiceAccountToken: false
  enableServiceLinks: false
  # The kernel's own seccomp filter for its sandboxes has a system call table for x86_64 only: with
  # os_sandbox=required, a kernel on another architecture would answer every cell with that layer missing.
  nodeSelector:
    kubernetes.io/arch: amd64
  securityContext:
    runAsNonRoot: true
    # The image's user: its home and passwd entry (not EG's KERNEL_UID/KERNEL_GID, which clients may set).
    runAsUser: ${uid}
    runAsGroup: ${uid}
    fsGroup: ${uid}
    # The runtime's default profile (RuntimeDefault) refuses the unshare and mount calls the kernel's sandbox needs:
    # a profile made from it by `sandbox-kernel seccomp-profile`, on each node under the kubelet's seccomp folder,
    # adds those calls and keeps every other rule on the whole pod (the kernel's Python included).
    seccompProfile:
      ${seccomp}
  containers:
  - name: sandbox-kernel
    image: ${image}
    # By its full path: the container's PATH may be EG's own (EG_INHERITED_ENVS passes it on).
    command: ${command}
    # The launcher's words (its ports on the pod's own address, where EG connects: --ip), then the kernel's
    # settings for every kernel of this kernelspec. `required`: a pod where
    # the OS layers cannot be set up answers every cell with the reason instead of running guest code behind Deno's
    # permissions alone.
    args:${args}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
      # The runtime's default AppArmor profile denies mount, so the sandbox's private root could not be built.
      # Kubernetes 1.30+; a Localhost profile that allows mount (and userns, on Ubuntu 23.10+ nodes) also works.
      appArmorProfile:
        type: Unconfined
    env:
    # Every kernel of this kernelspec seals checkpoints with this key (a Secret), so that a checkpoint, fork() and
    # restore after restart() move between kernels, which are pods of their own.
    - name: SANDBOX_KERNEL_CHECKPOINT_KEY
      value: ${key_folder}/${key_file}
    # The pod's IP, which EG's KubernetesProcessProxy connects to: the kernel's ports listen on it alone (not on
    # every address), and network-policy.yaml admits only EG's pods to it.
    - name: ${pod_ip_env}
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    # launch_kubernetes.py appends its environment here.
    resources:
      # Sized by the kernel's settings above: a kernel and its sandboxes at rest (~320 MiB), up to memory_limit_mb
      # of guest memory; its home holds max_checkpoints checkpoints.
      requests:
        cpu: 250m
        memory: ${memory_request}
        ephemeral-storage: 512Mi
      limits:
        cpu: "1"
        memory: ${memory_limit}
        ephemeral-storage: ${storage_limit}
    volumeMounts:
    - name: checkpoint-key
      mountPath: ${key_folder}
      readOnly: true
    - name: home
      mountPath: ${home}
    - name: tmp
      mountPath: /tmp
  volumes:
  - name: checkpoint-key
    secret:
      secretName: ${key_secret}
      defaultMode: 0440
      items:
      - key: ${key_file}
        path: ${key_file}
  # The root file system is read-only: the kernel writes its Jupyter data (checkpoints, audit log) in its home and
  # its private folders in /tmp, both gone with the pod.
  - name: home
    emptyDir:
      sizeLimit: ${home_mb}Mi
  - name: tmp
    emptyDir:
      sizeLimit: 512Mi
""")
