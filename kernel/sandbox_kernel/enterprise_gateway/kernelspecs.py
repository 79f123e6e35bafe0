"""Enterprise Gateway's kernelspecs for this kernel, made here: the one place that spells the launcher's words.

- Kubernetes (`KubernetesProcessProxy`): EG runs its own `launch_kubernetes.py`, which renders the kernelspec's
  `scripts/kernel-pod.yaml.j2` into a pod; the pod runs `sandbox-kernel launch-eg` with POD_VALUES, which
  Kubernetes fills from the pod's environment (launch_kubernetes.py puts KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY
  and PORT_RANGE there). Its kernel.json is kept in deploy/enterprise-gateway/ (`python -m
  sandbox_kernel.enterprise_gateway.kernelspecs` rewrites it; a unit test fails while it differs).
- Hosts reached by EG directly or over SSH (`DistributedProcessProxy`): the kernelspec's argv is the launcher
  itself, with EG_VALUES, which EG substitutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from sandbox_kernel import __version__
from sandbox_kernel.jupyter.kernelspec import DISPLAY_NAME, kernel_json

IMAGE = f"sandbox-kernel:{__version__}"  # the kernel's container image (deploy/container/)
KERNELSPECS_IMAGE = (
    f"sandbox-kernel-eg-kernelspecs:{__version__}"  # deploy/enterprise-gateway/Containerfile.kernelspecs
)
IMAGE_COMMAND = "/opt/sandbox-kernel/venv/bin/sandbox-kernel"  # `sandbox-kernel` in that image, by its full path
KUBERNETES_NAME = "pyodide-sandbox_kubernetes"
DISTRIBUTED_NAME = "pyodide-sandbox_distributed"
EG_KERNELS = "/usr/local/share/jupyter/kernels"  # where EG's image and its Helm chart keep kernelspecs
KUBERNETES_PROXY = "enterprise_gateway.services.processproxies.k8s.KubernetesProcessProxy"
DISTRIBUTED_PROXY = "enterprise_gateway.services.processproxies.distributed.DistributedProcessProxy"
REPO_KUBERNETES_SPEC = Path(__file__).resolve().parents[3] / "deploy" / "enterprise-gateway" / KUBERNETES_NAME


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


def _base(python: str, display_name: str, process_proxy: dict[str, object]) -> dict[str, object]:
    """This kernel's kernel.json (its language, interrupt mode, env) with EG's process proxy and a name."""
    spec = kernel_json(python)
    metadata = dict(spec.get("metadata") or {})  # type: ignore[call-overload]
    metadata["process_proxy"] = process_proxy
    spec.update(display_name=display_name, metadata=metadata)
    return spec


def kubernetes_kernel_json(image: str = IMAGE) -> dict[str, object]:
    """The kernel.json EG's pod runs: EG's launch_kubernetes.py (beside it in scripts/) makes the kernel's pod."""
    spec = _base(
        "python", f"{DISPLAY_NAME} on Kubernetes", {"class_name": KUBERNETES_PROXY, "config": {"image_name": image}}
    )
    script = f"{EG_KERNELS}/{KUBERNETES_NAME}/scripts/launch_kubernetes.py"
    spec["argv"] = ["python", script, *launcher_arguments(EG_VALUES)[1:]]  # its options are the launcher's
    return spec


def distributed_kernel_json(
    python: str, remote_hosts: list[str], *, port_range: str | None = None, ip: str | None = None,
    settings: list[str] | None = None,
) -> dict[str, object]:  # fmt: skip
    """A kernel.json for EG's DistributedProcessProxy: the launcher on `remote_hosts` (EG starts it itself on its
    own host, over SSH on others), with this `python` (the same path on every host)."""
    config: dict[str, object] = {"remote_hosts": ",".join(remote_hosts)}
    if port_range:
        config["port_range"] = port_range
    spec = _base(python, f"{DISPLAY_NAME}, distributed", {"class_name": DISTRIBUTED_PROXY, "config": config})
    program = kernel_json(python)["argv"][:3]  # type: ignore[index]  # python -c "...main()": the kernel's own way in
    spec["argv"] = [*program, *launcher_arguments(EG_VALUES), *(["--ip", ip] if ip else []), *(settings or [])]
    return spec


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or --check) deploy/enterprise-gateway/'s kernel.json from kubernetes_kernel_json()."""
    parser = argparse.ArgumentParser(prog="python -m sandbox_kernel.enterprise_gateway.kernelspecs")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when it is out of date")
    args = parser.parse_args(argv)
    path = REPO_KUBERNETES_SPEC / "kernel.json"
    made = json.dumps(kubernetes_kernel_json(), indent=2) + "\n"
    if path.exists() and path.read_text(encoding="utf-8") == made:
        return 0
    if args.check:
        print(f"{path} is out of date: run `{parser.prog}`", file=sys.stderr)
        return 1
    path.write_text(made, encoding="utf-8")
    print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
