#!/usr/bin/env python3
"""Write this kernel's Kubernetes kernelspec for Enterprise Gateway: pyodide-sandbox_kubernetes/kernel.json and its
scripts/kernel-pod.yaml.j2, with the operator's choices (the kernel's image as the cluster pulls it, the namespace,
the service account, the seccomp profile on the nodes, ...), from sandbox_kernel.enterprise_gateway.kernelspecs.

Run it with a Python that has sandbox-kernel installed (the repository's .venv):
    .venv/bin/python deploy/enterprise-gateway/kernelspec.py --image registry.example/sandbox-kernel:VERSION
then build the kernelspecs image (Containerfile.kernelspecs) from the folder it wrote. Without options it writes the
repository's copy (the defaults); --check only compares (a test runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sandbox_kernel.enterprise_gateway.kernelspecs import (
    KUBERNETES_NAME,
    UNCONFINED,
    PodSettings,
    kubernetes_kernel_json,
    pod_template,
)

HERE = Path(__file__).resolve().parent
DEFAULTS = PodSettings()


def made(pod: PodSettings) -> dict[str, str]:
    """The kernelspec's files (relative path: text) for `pod`; ValueError naming what cannot be used."""
    template = pod_template(pod)
    return {
        "kernel.json": json.dumps(kubernetes_kernel_json(pod.image), indent=2) + "\n",
        "scripts/kernel-pod.yaml.j2": template,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="deploy/enterprise-gateway/kernelspec.py",
        description="Write the Kubernetes kernelspec of sandbox-kernel for Enterprise Gateway (docs/enterprise-gateway.md).",
    )
    p.add_argument(
        "--image", default=DEFAULTS.image, help=f"the kernel's image as nodes pull it (default {DEFAULTS.image})"
    )
    p.add_argument(
        "--namespace",
        default=DEFAULTS.namespace,
        help=f"where kernel pods run: EG's own (default {DEFAULTS.namespace})",
    )
    p.add_argument(
        "--service-account",
        default=DEFAULTS.service_account,
        help=f"the pods' service account (default {DEFAULTS.service_account})",
    )
    p.add_argument(
        "--seccomp-profile",
        default=DEFAULTS.seccomp_profile,
        help=f"the profile's file under the kubelet's seccomp folder on each node (default {DEFAULTS.seccomp_profile}), "
        f"or {UNCONFINED} (no profile: the documented fallback)",
    )
    p.add_argument(
        "--key-secret",
        default=DEFAULTS.key_secret,
        help=f"the Secret with the checkpoint key (default {DEFAULTS.key_secret})",
    )
    p.add_argument(
        "--memory-limit-mb",
        type=int,
        default=DEFAULTS.memory_limit_mb,
        help="SandboxKernel.memory_limit_mb; the pod's memory limit follows",
    )
    p.add_argument(
        "--max-checkpoints",
        type=int,
        default=DEFAULTS.max_checkpoints,
        help="SandboxKernel.max_checkpoints; the pod's storage follows",
    )
    p.add_argument(
        "--out", type=Path, default=HERE / KUBERNETES_NAME, help="the kernelspec's folder (default: the repository's)"
    )
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    pod = PodSettings(
        image=args.image, namespace=args.namespace, service_account=args.service_account,
        seccomp_profile=args.seccomp_profile, key_secret=args.key_secret, memory_limit_mb=args.memory_limit_mb,
        max_checkpoints=args.max_checkpoints,
    )  # fmt: skip
    try:
        files = made(pod)
    except ValueError as exc:
        print(f"kernelspec.py: {exc}", file=sys.stderr)
        return 2
    stale = [name for name, text in files.items() if not _same(args.out / name, text)]
    if args.check:
        for name in stale:
            print(f"{args.out / name} is out of date: run deploy/enterprise-gateway/kernelspec.py", file=sys.stderr)
        return 1 if stale else 0
    for name in stale:
        (args.out / name).parent.mkdir(parents=True, exist_ok=True)
        (args.out / name).write_text(files[name], encoding="utf-8")
        print(f"wrote {args.out / name}")
    return 0


def _same(path: Path, text: str) -> bool:
    return path.is_file() and path.read_text(encoding="utf-8") == text


if __name__ == "__main__":
    sys.exit(main())
