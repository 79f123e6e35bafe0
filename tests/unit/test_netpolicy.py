"""The allow-list's private-address check sees IPv4 addresses hidden in IPv6 ones (mapped, compatible, 6to4, NAT64)."""

from __future__ import annotations

import pytest

from sandbox_kernel.sandbox import netpolicy

# What a hostile (or careless) DNS name may resolve to, each reaching a private or loopback host.
PRIVATE_ANSWERS = [
    "::ffff:169.254.169.254",  # IPv4-mapped: the cloud metadata service
    "::ffff:a9fe:a9fe",  # the same, written in hex
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:192.168.1.1",
    "::127.0.0.1",  # IPv4-compatible
    "::a00:1",  # IPv4-compatible 10.0.0.1 in hex
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "64:ff9b::a00:1",  # NAT64 (well-known prefix) of 10.0.0.1
    "64:ff9b::169.254.169.254",
    "64:ff9b:1::1",  # local-use NAT64
    "fd00:ec2::254",  # unique-local: a cloud metadata service over IPv6
    "fe80::1%eth0",  # link-local, with a zone
    "::1",
    "10.1.2.3",
    "169.254.169.254",
]
PUBLIC_ANSWERS = ["203.0.113.5", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"]


def resolving_to(address: str):
    return lambda host: {address}


@pytest.mark.parametrize("address", PRIVATE_ANSWERS)
def test_a_name_that_resolves_to_a_private_address_in_any_form_is_refused(address):
    problems = netpolicy.private_resolutions(["api.test:443"], resolve=resolving_to(address))
    assert problems == [
        f"allow_net entry 'api.test:443' resolves to {address} (loopback or private): "
        f"list the address itself (e.g. '{address}:443') to allow exactly that"
    ]


@pytest.mark.parametrize("address", PUBLIC_ANSWERS)
def test_a_name_that_resolves_to_a_public_address_passes(address):
    assert netpolicy.private_resolutions(["api.test:443"], resolve=resolving_to(address)) == []


def test_one_private_answer_among_public_ones_is_enough():
    problems = netpolicy.private_resolutions(["api.test"], resolve=lambda host: {"203.0.113.5", "::ffff:10.0.0.1"})
    assert len(problems) == 1 and "resolves to ::ffff:10.0.0.1 " in problems[0]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("::ffff:169.254.169.254", "is the IPv4 address 169.254.169.254 written as IPv6 (IPv4-mapped): write "
         "'169.254.169.254' instead"),
        ("[::ffff:a9fe:a9fe]:80", "is the IPv4 address 169.254.169.254 written as IPv6 (IPv4-mapped): write "
         "'169.254.169.254:80' instead"),
        ("::ffff:127.0.0.1", "write '127.0.0.1' instead"),
        ("[::ffff:8.8.8.8]:53", "write '8.8.8.8:53' instead"),  # public too: one form for IPv4, judged as IPv4
        ("::10.0.0.1", "is the IPv4 address 10.0.0.1 written as IPv6 (IPv4-compatible)"),
        ("2002:a9fe:a9fe::1", "is a 6to4 address that reaches the loopback or private IPv4 address 169.254.169.254"),
        ("[64:ff9b::a00:1]:443", "is a NAT64 address that reaches the loopback or private IPv4 address 10.0.0.1"),
    ],
)  # fmt: skip
def test_an_ip_entry_that_hides_an_ipv4_address_is_refused_naming_the_address(entry, says):
    with pytest.raises(netpolicy.NetPolicyError, match="allow_net entry") as raised:
        netpolicy.deno_flags([entry])
    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("entry", "given"),
    [
        ("2606:4700:4700::1111", "[2606:4700:4700::1111]"),
        ("[64:ff9b::808:808]:443", "[64:ff9b::808:808]:443"),
        ("[::1]:8000", "[::1]:8000"),  # loopback named explicitly, as before
        ("169.254.169.254", "169.254.169.254"),  # a private IPv4 address named explicitly, as before
    ],
)
def test_plain_ip_entries_are_kept(entry, given):
    assert netpolicy.deno_flags([entry])[0] == [given]
