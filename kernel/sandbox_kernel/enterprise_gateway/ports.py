"""Ports from EG's port range: the kernel's five (found free, then bound by the kernel) and the comm port (kept)."""

from __future__ import annotations

import random
import socket

from sandbox_kernel.enterprise_gateway.arguments import PortRange

ATTEMPTS = 200  # candidate ports tried per port before giving up


class NoFreePort(OSError):
    """No free port in the range after ATTEMPTS tries."""


def bind(port_range: PortRange, ip: str, taken: frozenset[int] = frozenset()) -> socket.socket:
    """A TCP socket bound on `ip` to a free port of the range (any port for 0..0), not one of `taken`."""
    for _ in range(ATTEMPTS):
        port = 0 if port_range.any else random.randint(port_range.lower, port_range.upper)
        if port in taken:
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((ip, port))
        except OSError:
            sock.close()
            continue
        if sock.getsockname()[1] in taken:  # the system's choice, for 0..0
            sock.close()
            continue
        return sock
    raise NoFreePort(
        f"no free port on {ip} in the range {port_range} after {ATTEMPTS} tries: the range is nearly used up, or "
        "taken by other programs; widen it in Enterprise Gateway (--EnterpriseGatewayApp.port_range or EG_PORT_RANGE, "
        "or the kernelspec's process_proxy config port_range), or use 0..0 for any free port"
    )


def free_ports(count: int, port_range: PortRange, ip: str) -> list[int]:
    """`count` distinct ports of the range that are free now (the kernel binds them a moment later, as
    jupyter_client's own choice of ports does)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sockets.append(bind(port_range, ip, frozenset(s.getsockname()[1] for s in sockets)))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()
