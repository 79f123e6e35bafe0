"""The network allow-list: what the sandbox may connect to, and what stays blocked."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

# Blocked unless an allow-list entry names an address inside them explicitly. Deno 2.9 takes
# CIDR ranges for IPv4 only; for IPv6 it takes single addresses (see docs/security.md).
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
# Also private when a name resolves to them (Deno takes no IPv6 ranges, so these are judged, never passed on):
# unique-local (fc00::/7, e.g. a cloud metadata service's fd00:ec2::254), link-local, multicast, local-use NAT64.
PRIVATE_V6_RANGES = ("fc00::/7", "fe80::/10", "ff00::/8", "64:ff9b:1::/48")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
HOSTNAME = re.compile(
    r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


class NetPolicyError(ValueError):
    """An allow-list entry that is not host, host:port, IP or IP:port."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, list[ipaddress.IPv4Address]]:
    """How an IPv6 address carries IPv4 addresses, and which: ('IPv4-mapped', [a]), ('IPv4-compatible', [a]),
    ('6to4', [a]), ('NAT64', [a]), ('Teredo', [server, client]); ('', []) for a plain IPv6 address."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", [ip.ipv4_mapped]
    if 1 < int(ip) < 1 << 32:  # ::a.b.c.d, deprecated but still routed to a.b.c.d by some stacks
        return "IPv4-compatible", [ipaddress.IPv4Address(int(ip))]
    if ip.sixtofour is not None:
        return "6to4", [ip.sixtofour]
    if ip in NAT64:
        return "NAT64", [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.teredo is not None:
        return "Teredo", list(ip.teredo)
    return "", []


def is_private(address: str) -> bool:
    """Whether an address (as getaddrinfo gives it, zone index allowed) is loopback, private, link-local, etc.:
    an IPv6 address that carries an IPv4 address is judged by that IPv4 address too."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        _, inner = embedded_ipv4(ip)
        if any(is_private(str(v4)) for v4 in inner):
            return True
        ranges: tuple[str, ...] = (*PRIVATE_RANGES, *PRIVATE_V6_RANGES)
    else:
        ranges = PRIVATE_RANGES
    return any(ip in ipaddress.ip_network(cidr) for cidr in ranges if ipaddress.ip_network(cidr).version == ip.version)


def _refuse_ipv4_in_ipv6(entry: str, ip: ipaddress.IPv6Address, port: int | None) -> None:
    """An IPv6 entry that is an IPv4 address in disguise: the deny rules judge IPv4 addresses in their own form."""
    form, inner = embedded_ipv4(ip)
    if form in ("IPv4-mapped", "IPv4-compatible"):
        raise NetPolicyError(
            f"allow_net entry {entry!r} is the IPv4 address {inner[0]} written as IPv6 ({form}): write "
            f"'{inner[0]}{f':{port}' if port else ''}' instead"
        )
    private = [str(v4) for v4 in inner if is_private(str(v4))]
    if private:
        raise NetPolicyError(
            f"allow_net entry {entry!r} is a {form} address that reaches the loopback or private IPv4 address "
            f"{', '.join(private)} through a gateway; it cannot be allowed (list '{private[0]}' itself to reach it)"
        )


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
    if isinstance(ip, ipaddress.IPv6Address):
        _refuse_ipv4_in_ipv6(entry, ip, port)
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
        private = sorted(a for a in addresses if is_private(a))
        if private:
            shown = f"{private[0]}:{port}" if port else private[0]
            problems.append(
                f"allow_net entry {entry!r} resolves to {', '.join(private)} (loopback or private): "
                f"list the address itself (e.g. '{shown}') to allow exactly that"
            )
    return problems
