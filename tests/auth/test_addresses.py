"""The address guard knows every special-purpose range (issue 23, Noted).

The registries are written out here again, by hand, from the IANA IPv4 and IPv6
Special-Purpose Address Registries (their 2025-04 revisions), the multicast spaces and
the IPv6 Address Space: each entry, its "Globally Reachable" column and the kind albedo
gives it. The guard's own table (``auth/addresses.py``) must hold the same entries with
the same column, and every address of an entry the registry does not call globally
reachable must be something other than public, through ``address_kind`` and through an
``AddressGuard`` built for a server on the public Internet. IPv4 addresses carried in
IPv6 ones are built here from their RFCs' bit layouts, not with the module's helpers.

Python's own ``ipaddress.is_global`` is not the reference: its tables changed between
3.10 and 3.13 point releases.
"""

from __future__ import annotations

import ipaddress
import socket
import time

import pytest

from albedo_actors.auth.addresses import SPECIAL_PURPOSE, AddressGuard, AddressRefused, address_kind

# (block, globally reachable per the registry (None: N/A or a terminated entry), kind)
IPV4_REGISTRY = [
    ("0.0.0.0/8", False, "unspecified"),
    ("0.0.0.0/32", False, "unspecified"),
    ("10.0.0.0/8", False, "private"),
    ("100.64.0.0/10", False, "private"),
    ("127.0.0.0/8", False, "loopback"),
    ("169.254.0.0/16", False, "link-local"),
    ("172.16.0.0/12", False, "private"),
    ("192.0.0.0/24", False, "reserved"),
    ("192.0.0.0/29", False, "reserved"),
    ("192.0.0.8/32", False, "reserved"),
    ("192.0.0.9/32", True, "public"),
    ("192.0.0.10/32", True, "public"),
    ("192.0.0.170/32", False, "reserved"),
    ("192.0.0.171/32", False, "reserved"),
    ("192.0.2.0/24", False, "documentation"),
    ("192.31.196.0/24", True, "public"),
    ("192.52.193.0/24", True, "public"),
    ("192.88.99.0/24", None, "reserved"),
    ("192.88.99.2/32", False, "reserved"),
    ("192.168.0.0/16", False, "private"),
    ("192.175.48.0/24", True, "public"),
    ("198.18.0.0/15", False, "benchmarking"),
    ("198.51.100.0/24", False, "documentation"),
    ("203.0.113.0/24", False, "documentation"),
    ("240.0.0.0/4", False, "reserved"),
    ("255.255.255.255/32", False, "reserved"),
    ("224.0.0.0/4", False, "multicast"),  # the IPv4 Multicast Address Space (RFC 5771)
]
# "embedded": judged as the IPv4 address it carries (tested below)
IPV6_REGISTRY = [
    ("::1/128", False, "loopback"),
    ("::/128", False, "unspecified"),
    ("::ffff:0:0/96", False, "embedded"),
    ("64:ff9b::/96", True, "embedded"),
    ("64:ff9b:1::/48", False, "embedded"),
    ("100::/64", False, "reserved"),
    ("100:0:0:1::/64", False, "reserved"),
    ("2001::/23", False, "reserved"),
    ("2001::/32", None, "embedded"),
    ("2001:1::1/128", True, "public"),
    ("2001:1::2/128", True, "public"),
    ("2001:1::3/128", True, "public"),
    ("2001:2::/48", False, "benchmarking"),
    ("2001:3::/32", True, "public"),
    ("2001:4:112::/48", True, "public"),
    ("2001:10::/28", None, "reserved"),
    ("2001:20::/28", True, "public"),
    ("2001:30::/28", True, "public"),
    ("2001:db8::/32", False, "documentation"),
    ("2002::/16", None, "embedded"),
    ("2620:4f:8000::/48", True, "public"),
    ("3fff::/20", False, "documentation"),
    ("5f00::/16", False, "reserved"),
    ("fc00::/7", False, "private"),
    ("fe80::/10", False, "link-local"),
    ("ff00::/8", False, "multicast"),  # the IPv6 Multicast Address Space (RFC 4291 section 2.7)
    # The IPv6 Address Space: everything outside global unicast 2000::/3 is reserved by
    # the IETF (RFC 4291) but for ULA, link-local, the deprecated site-local and multicast.
    ("::/8", False, "reserved"),
    ("::/96", False, "embedded"),  # IPv4-compatible, deprecated (RFC 4291 section 2.5.5.1)
    ("::ffff:0:0:0/96", False, "embedded"),  # SIIT's IPv4-translated (RFC 2765 section 2.1)
    ("100::/8", False, "reserved"),
    ("200::/7", False, "reserved"),
    ("400::/6", False, "reserved"),
    ("800::/5", False, "reserved"),
    ("1000::/4", False, "reserved"),
    ("4000::/3", False, "reserved"),
    ("6000::/3", False, "reserved"),
    ("8000::/3", False, "reserved"),
    ("a000::/3", False, "reserved"),
    ("c000::/3", False, "reserved"),
    ("e000::/4", False, "reserved"),
    ("f000::/5", False, "reserved"),
    ("f800::/6", False, "reserved"),
    ("fe00::/9", False, "reserved"),
    ("fec0::/10", False, "private"),  # site-local, deprecated (RFC 3879)
]
REGISTRY = IPV4_REGISTRY + IPV6_REGISTRY
PUBLIC_SERVER = "https://8.8.8.8/mcp"  # a literal: the guard needs no lookup and never connects


def _inside(block: str) -> list[str]:
    """The first, last and middle addresses of ``block`` that no more specific entry holds."""
    net = ipaddress.ip_network(block)
    inner = [ipaddress.ip_network(other) for other, _g, _k in REGISTRY
             if other != block and ipaddress.ip_network(other).version == net.version
             and ipaddress.ip_network(other).subnet_of(net) and ipaddress.ip_network(other) != net]
    first, last = int(net.network_address), int(net.broadcast_address)
    picks = {first, last, (first + last) // 2, first + 1, last - 1, (first + last) // 2 + 0x10203}
    make = ipaddress.IPv4Address if net.version == 4 else ipaddress.IPv6Address
    found = [make(p) for p in sorted(picks) if first <= p <= last]
    return [str(ip) for ip in found if not any(ip in sub for sub in inner)]


def _addr(ip: str, port: int = 443):
    return (socket.AF_INET6, (ip, port, 0, 0)) if ":" in ip else (socket.AF_INET, (ip, port))


def test_the_guards_table_holds_every_registry_entry_with_the_registrys_column():
    theirs = {(entry.block, entry.globally_reachable, entry.kind) for entry in SPECIAL_PURPOSE}
    assert theirs == set(REGISTRY)
    assert len(SPECIAL_PURPOSE) == len(theirs)  # no entry twice


@pytest.mark.parametrize("block,reachable,kind", [row for row in REGISTRY if row[2] != "embedded"],
                         ids=[row[0] for row in REGISTRY if row[2] != "embedded"])
def test_every_registry_entry_has_its_kind_and_only_globally_reachable_ones_are_public(block, reachable, kind):
    assert (kind == "public") == (reachable is True)
    addresses = _inside(block)
    assert addresses, block
    guard = AddressGuard(PUBLIC_SERVER)
    deadline = time.monotonic() + 5
    for ip in addresses:
        assert address_kind(ip) == kind, ip
        if kind == "public":
            guard.check(ip, [_addr(ip)], deadline)
        else:
            with pytest.raises(AddressRefused) as refused:
                guard.check(ip, [_addr(ip)], deadline)
            assert "albedo does not fetch it" in refused.value.reason and "\n" not in refused.value.reason


def test_an_address_outside_every_entry_is_public():
    for ip in ("8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "172.32.0.0", "192.0.1.255", "198.17.255.255",
               "198.20.0.0", "223.255.255.255", "2001:4860:4860::8888", "2001:200::1", "2606:4700:4700::1111",
               "3ffe::1", "3fff:1000::1", "2003::1"):
        assert address_kind(ip) == "public", ip


# -- IPv4 in IPv6, built from the RFCs' bit layouts ------------------------------------------------

CARRIED = {  # an IPv4 address -> the kind it has
    "8.8.8.8": "public", "10.1.2.3": "private", "127.0.0.1": "loopback", "169.254.169.254": "metadata",
    "169.254.7.7": "link-local", "198.18.0.1": "benchmarking", "192.0.0.1": "reserved", "203.0.113.5": "documentation",
    "224.0.0.251": "multicast", "100.100.100.200": "metadata", "192.0.0.9": "public",
}


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def _forms(v4: str) -> dict[str, str]:
    n = int(ipaddress.IPv4Address(v4))
    teredo_public = int(ipaddress.IPv4Address("65.54.227.120"))
    return {
        "mapped ::ffff:a.b.c.d (RFC 4291 2.5.5.2)": _v6(0xFFFF << 32 | n),
        "compatible ::a.b.c.d (RFC 4291 2.5.5.1)": _v6(n),
        "SIIT ::ffff:0:a.b.c.d (RFC 2765 2.1)": _v6(0xFFFF << 48 | n),
        "NAT64 64:ff9b::/96 (RFC 6052)": _v6(0x64FF9B << 96 | n),
        "local NAT64 /96 (RFC 8215)": _v6(0x64FF9B0001 << 80 | n),
        "local NAT64 /64": _v6(0x64FF9B0001 << 80 | n << 24),  # bits 72-103, the u-octet 64-71 zero
        "local NAT64 /56": _v6(0x64FF9B0001 << 80 | (n >> 24) << 64 | (n & 0xFFFFFF) << 32),
        "local NAT64 /48": _v6(0x64FF9B0001 << 80 | (n >> 16) << 64 | (n & 0xFFFF) << 40),
        "6to4 2002:AABB:CCDD:: (RFC 3056 2)": _v6(0x2002 << 112 | n << 80 | 1),
        "Teredo client (RFC 4380 4)": _v6(0x20010000 << 96 | teredo_public << 64 | 0x8000_63BF << 32 | (n ^ 0xFFFFFFFF)),
        "Teredo server": _v6(0x20010000 << 96 | n << 64 | 0x8000_63BF << 32 | (teredo_public ^ 0xFFFFFFFF)),
    }


# Where a local-use NAT64 prefix puts the IPv4 address is the network's choice (RFC 6052
# section 2.2): an address of a /48, /56 or /64 layout is also read as the others, and is
# public only if every reading is. Its kind is then that of the first reading that is not.
AMBIGUOUS = {"local NAT64 /64", "local NAT64 /56", "local NAT64 /48"}


@pytest.mark.parametrize("v4,kind", list(CARRIED.items()))
def test_an_ipv4_address_carried_in_ipv6_is_judged_as_that_ipv4_address(v4, kind):
    guard = AddressGuard(PUBLIC_SERVER)
    deadline = time.monotonic() + 5
    assert address_kind(v4) == kind
    for form, ip in _forms(v4).items():
        if form in AMBIGUOUS:
            assert (address_kind(ip) == "public") == (kind == "public"), (form, ip)
        else:
            assert address_kind(ip) == kind, (form, ip)
        if kind == "public":
            guard.check(ip, [_addr(ip)], deadline)
        else:
            with pytest.raises(AddressRefused):
                guard.check(ip, [_addr(ip)], deadline)


def test_the_addresses_the_review_found_public_are_not():
    guard = AddressGuard(PUBLIC_SERVER)
    deadline = time.monotonic() + 5
    named = {
        "::a9fe:a9fe": "metadata",  # IPv4-compatible 169.254.169.254
        "::10.0.0.1": "private",
        "::ffff:0:a9fe:a9fe": "metadata",  # SIIT 169.254.169.254
        "::ffff:0:7f00:1": "loopback",
        "64:ff9b:1::a00:1": "private",  # local-use NAT64 10.0.0.1
        "fec0::1": "private",  # site-local
        "198.18.0.1": "benchmarking", "198.19.255.254": "benchmarking",
        "192.0.0.1": "reserved", "192.0.0.170": "reserved", "192.0.0.254": "reserved",
    }
    for ip, kind in named.items():
        assert address_kind(ip) == kind, ip
        with pytest.raises(AddressRefused) as refused:
            guard.check(ip, [_addr(ip)], deadline)
        assert refused.value.reason.startswith(f"{ip} is ")


def test_a_server_of_a_special_kind_may_use_its_own_kind_and_the_public_internet_only():
    deadline = time.monotonic() + 5
    for server, same, other in (("http://198.18.0.5/mcp", "198.19.1.1", "10.0.0.1"),
                                ("http://[fec0::5]/mcp", "10.0.0.1", "198.18.0.1"),
                                ("http://[::ffff:0:a00:5]/mcp", "192.168.1.1", "127.0.0.1")):
        guard = AddressGuard(server)
        guard.check(same, [_addr(same)], deadline)
        guard.check("1.1.1.1", [_addr("1.1.1.1")], deadline)
        with pytest.raises(AddressRefused):
            guard.check(other, [_addr(other)], deadline)


def test_a_local_nat64_address_is_public_only_when_every_reading_of_it_is():
    # An ordinary /96 address: its other readings fall in 0/8, which no translator serves.
    assert address_kind("64:ff9b:1::808:808") == "public"
    # Read as /96 it is 8.8.8.8, read as /48 it is 10.0.x.x: not public.
    assert address_kind("64:ff9b:1:a00:0:1:808:808") == "private"
    assert address_kind("64:ff9b:1::") == "unspecified"
