"""The command line of `sandbox-kernel launch-eg`: what Enterprise Gateway passes to a kernel launcher, checked.

EG substitutes `{kernel_id}`, `{response_address}`, `{public_key}` and `{port_range}` into a kernelspec's argv, and
its launchers accept each as `--kernel-id` or as the older `--RemoteProcessProxy.kernel-id`; both spellings are
taken here. Kernel settings may follow as `--SandboxKernel.name=value`: they go to the kernel's command line.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from sandbox_kernel.enterprise_gateway.payload import load_public_key

PROG = "sandbox-kernel launch-eg"
SETTING = "--SandboxKernel."  # a kernel setting: --SandboxKernel.name=value
KERNEL_PORTS = 6  # Jupyter's five channels (shell, iopub, stdin, hb, control) and EG's comm port
KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # EG's are UUIDs; this keeps them safe in a file name
HOST = re.compile(r"[A-Za-z0-9.-]{1,253}")  # an IPv4 address (what EG sends) or a DNS name
LOOPBACK = "127.0.0.1"  # --ip's default: only this machine (and EG on it) reaches the kernel's ports
ROUTE = "route"  # --ip route: this host's address on its route to EG's response address (one kernelspec, many hosts)


class LaunchArgumentError(ValueError):
    """A launcher argument that cannot be used; the message says which, what it was, and what is allowed."""


@dataclass(frozen=True)
class PortRange:
    """EG's `--port-range LOWER..UPPER`; `0..0` lets the system choose every port."""

    lower: int
    upper: int

    @property
    def any(self) -> bool:
        return self.lower == self.upper == 0

    def __str__(self) -> str:
        return f"{self.lower}..{self.upper}"


@dataclass(frozen=True)
class LaunchArguments:
    """Everything the launcher needs, checked."""

    kernel_id: str
    response_host: str
    response_port: int
    public_key: RSAPublicKey
    port_range: PortRange
    ip: str
    kernel_settings: tuple[str, ...]


def unexpanded(value: str) -> str:
    """A hint when a value is still a placeholder: Kubernetes leaves `$(NAME)` as it is when the pod has no NAME."""
    if value.startswith("$(") and value.endswith(")"):
        return f" ({value[2:-1]} is not set in the pod's environment: is the pod made by EG's launch_kubernetes.py?)"
    if value.startswith("{") and value.endswith("}"):
        return " (EG did not substitute this placeholder: is the kernelspec run by Enterprise Gateway?)"
    return ""


def parse_port_range(text: str) -> PortRange:
    """`LOWER..UPPER`: both 0 (any port), or 1024 <= LOWER < UPPER <= 65535 with room for the kernel's ports."""
    match = re.fullmatch(r"(\d{1,5})\.\.(\d{1,5})", text)
    if not match:
        raise LaunchArgumentError(f"--port-range {text!r} is not LOWER..UPPER (e.g. 40000..41999){unexpanded(text)}")
    lower, upper = int(match[1]), int(match[2])
    if lower == upper == 0:
        return PortRange(0, 0)
    if not 1024 <= lower <= upper <= 65535:
        raise LaunchArgumentError(
            f"--port-range {text}: the ports must lie within 1024..65535, lower first (or 0..0 for any port)"
        )
    if upper - lower + 1 < KERNEL_PORTS:
        raise LaunchArgumentError(
            f"--port-range {text} holds {upper - lower + 1} ports; the kernel needs {KERNEL_PORTS} "
            "(five for Jupyter's channels, one for EG's comm port)"
        )
    return PortRange(lower, upper)


def parse_response_address(text: str) -> tuple[str, int]:
    """EG's `--response-address HOST:PORT`, where the launcher sends the kernel's connection info."""
    host, colon, port = text.rpartition(":")
    if not colon or not HOST.fullmatch(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise LaunchArgumentError(
            f"--response-address {text[:300]!r} is not HOST:PORT (EG's response address, e.g. 10.0.0.5:8877)"
            f"{unexpanded(text)}"
        )
    return host, int(port)


def parse_kernel_id(text: str) -> str:
    """EG's `--kernel-id` (a UUID from EG), if it is safe in a file name; LaunchArgumentError saying why not."""
    if not KERNEL_ID.fullmatch(text):
        raise LaunchArgumentError(
            f"--kernel-id {text[:300]!r} is not a kernel id (letters, digits, '.', '_', '-'; at most 128; EG gives "
            f"a UUID){unexpanded(text)}"
        )
    return text


def parse_ip(text: str, response_host: str, response_port: int) -> str:
    """`--ip`, the IPv4 address the kernel's ports listen on, normalised (`route`: the one this host reaches EG's
    response address from); LaunchArgumentError if it is neither."""
    if text == ROUTE:
        return route_address(response_host, response_port)
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise LaunchArgumentError(
            f"--ip {text[:100]!r} is not an IPv4 address or {ROUTE!r} (the address the kernel's ports listen on; "
            f"default {LOOPBACK})"
        ) from None


def route_address(host: str, port: int) -> str:
    """This host's source address towards `host`: where EG, at that address, reaches this host's kernel."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, port))  # UDP: nothing is sent; the system picks the route and its source address
        except OSError as exc:
            raise LaunchArgumentError(
                f"--ip {ROUTE}: this host has no route to EG's response address {host}:{port} ({exc})"
            ) from None
        return str(probe.getsockname()[0])


def exposure(ip: str) -> str | None:
    """What a non-loopback `--ip` exposes, for the launcher's log; None for a loopback address."""
    if ipaddress.IPv4Address(ip).is_loopback:
        return None
    where = "every address of this host" if ip == "0.0.0.0" else ip
    return (
        f"the kernel's ports listen on {where}, beyond this host's loopback: ZMQ messages are signed with the "
        "connection key but not encrypted (EG's jupyter_client cannot speak CurveZMQ), so anyone on the network "
        "path between EG and this kernel reads every cell's code and output, and anyone who reaches the comm port "
        "can interrupt or stop the kernel. Keep this address to a network only EG reaches (a Kubernetes "
        "NetworkPolicy, deploy/enterprise-gateway/network-policy.yaml; a host firewall; docs/enterprise-gateway.md)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description="Start this kernel for Jupyter Enterprise Gateway: its ports from the port range, its connection "
        "info encrypted to EG's response address, EG's interrupts and shutdown taken on a comm port. Run by EG "
        "from a kernelspec (docs/enterprise-gateway.md), not by hand.",
        epilog="Kernel settings may follow as --SandboxKernel.name=value (e.g. --SandboxKernel.cell_timeout=30).",
    )
    parser.add_argument("--kernel-id", "--RemoteProcessProxy.kernel-id", required=True, help="EG's {kernel_id}")
    parser.add_argument(
        "--response-address",
        "--RemoteProcessProxy.response-address",
        required=True,
        metavar="HOST:PORT",
        help="EG's {response_address}: where the connection info goes",
    )
    parser.add_argument(
        "--public-key",
        "--RemoteProcessProxy.public-key",
        required=True,
        help="EG's {public_key}: the RSA key that seals the connection info",
    )
    parser.add_argument(
        "--port-range",
        "--RemoteProcessProxy.port-range",
        default="0..0",
        metavar="LOWER..UPPER",
        help="EG's {port_range} for the kernel's ports and the comm port (default 0..0: any)",
    )
    parser.add_argument(
        "--spark-context-initialization-mode",
        "--RemoteProcessProxy.spark-context-initialization-mode",
        choices=["none"],
        help="accepted for EG's stock argv; this kernel has no Spark, so only 'none'",
    )
    parser.add_argument(
        "--ip",
        default=LOOPBACK,
        help=f"the IPv4 address the kernel's ports and the comm port listen on (default {LOOPBACK}: EG on this host; "
        f"a pod gives its own address, a remote host the address EG knows it by or {ROUTE!r}, its address on the "
        "route to EG's response address: anything but loopback is logged as an exposure)",
    )
    return parser


def parse(words: list[str]) -> LaunchArguments:
    """The launcher's words, checked; argparse ends the process for --help and for unknown or missing options
    (status 2), LaunchArgumentError says what is wrong with a value."""
    parser = _parser()
    namespace, rest = parser.parse_known_args(words)
    settings = [word for word in rest if word.startswith(SETTING) and "=" in word]
    others = [word for word in rest if word not in settings]
    if others:
        parser.error(
            f"unrecognized arguments: {' '.join(others)} (kernel settings are given as --SandboxKernel.name=value)"
        )
    host, port = parse_response_address(namespace.response_address)
    try:
        public_key = load_public_key(namespace.public_key)
    except ValueError as exc:
        raise LaunchArgumentError(f"--public-key: {exc}{unexpanded(namespace.public_key)}") from None
    return LaunchArguments(
        kernel_id=parse_kernel_id(namespace.kernel_id),
        response_host=host,
        response_port=port,
        public_key=public_key,
        port_range=parse_port_range(namespace.port_range),
        ip=parse_ip(namespace.ip, host, port),
        kernel_settings=tuple(settings),
    )
