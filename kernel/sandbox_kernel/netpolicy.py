"""The network allow-list: what the sandbox may connect to, and what stays blocked."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

# Blocked unless an allow-list entry names an address inside them explicitly. Deno 2.9 takes
# CIDR ranges for IPv4 only; for IPv6 it takes single addresses (see README: Security).
PRIVATE_RANGES = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
)
HOSTNAME = re.compile(
    r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


class NetPolicyError(ValueError):
    """An allow-list entry that is not host, host:port, IP or IP:port."""


def split_entry(entry: str) -> tuple[str, int | None]:
    """(host, port or None) of an allow-list entry; IPv6 hosts lose their brackets."""
    if entry.startswith("["):  # [v6]:port
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise NetPolicyError(f"allow_net entry {entry!r}: the port must be 1-65535")
        return host, int(port)
    return entry, None


def check_entry(entry: str) -> str:
    """The entry as Deno takes it, or NetPolicyError."""
    if "/" in entry or "@" in entry:
        raise NetPolicyError(
            f"allow_net entry {entry!r}: use host, host:port, IP or IP:port, without scheme or path "
            "(e.g. 'pypi.org:443')"
        )
    host, port = split_entry(entry.strip())
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is None and (not HOSTNAME.fullmatch(host) or host.replace(".", "").isdigit()):
        raise NetPolicyError(f"allow_net entry {entry!r}: use host, host:port, IP or IP:port (e.g. 'pypi.org:443')")
    shown = f"[{host}]" if ip is not None and ip.version == 6 else host
    return f"{shown}:{port}" if port else shown


def deno_flags(allow: list[str]) -> tuple[list[str], list[str]]:
    """(allowed entries, denied ranges): private ranges stay denied unless an entry names an IP in them."""
    allowed = [check_entry(e) for e in allow]
    named_ips = []
    for entry in allowed:
        host, _ = split_entry(entry)
        try:
            named_ips.append(ipaddress.ip_address(host))
        except ValueError:
            pass
    denied = [] if any(split_entry(e)[0] == "localhost" for e in allowed) else ["localhost"]
    for cidr in PRIVATE_RANGES:
        nets = [ipaddress.ip_network(cidr)]
        for ip in named_ips:  # deny the whole range except the exact addresses listed
            nets = [part for net in nets for part in _without(net, ip)]
        denied += [str(net) if net.version == 4 else f"[{net.network_address}]" for net in nets]
    return allowed, denied


def _without(net: Any, ip: Any) -> list[Any]:
    if ip.version != net.version or ip not in net:
        return [net]
    return list(net.address_exclude(ipaddress.ip_network(ip)))


def private_resolutions(allowed: list[str], resolve: Any = None) -> list[str]:
    """Allow-list host NAMES that resolve to private or loopback addresses (they must be listed as IPs)."""
    import socket

    resolve = resolve or (lambda host: {info[4][0] for info in socket.getaddrinfo(host, None)})
    problems = []
    for entry in allowed:
        host, port = split_entry(entry)
        try:
            ipaddress.ip_address(host)
            continue
        except ValueError:
            pass
        try:
            addresses = resolve(host)
        except OSError:
            continue  # unknown here: Deno's deny rules still apply when it connects
        private = sorted(
            a
            for a in addresses
            if any(ipaddress.ip_address(a.split("%")[0]) in ipaddress.ip_network(c) for c in PRIVATE_RANGES)
        )
        if private:
            shown = f"{private[0]}:{port}" if port else private[0]
            problems.append(
                f"allow_net entry {entry!r} resolves to {', '.join(private)} (loopback or private): "
                f"list the address itself (e.g. '{shown}') to allow exactly that"
            )
    return problems
