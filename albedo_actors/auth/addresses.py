"""Where the OAuth requests of a server may go: its own kind of address, or the public Internet.

An MCP server names the URLs albedo fetches while signing in (its resource metadata, the
authorization server, that server's endpoints). A hostile server could name an address
albedo can reach and it cannot: the cloud metadata service (``169.254.169.254``), a
router on ``192.168.1.1``, another service of the host on ``127.0.0.1``. So every such
request is checked by an :class:`AddressGuard` built from the MCP server's own URL:

* an address of the public Internet is always allowed;
* any other address is allowed only when the MCP server itself is at an address of
  that same kind (a server on ``127.0.0.1`` may use an authorization server on
  ``127.0.0.1``; one on the public Internet may not send albedo to ``10.0.0.5``);
* a cloud metadata address (``169.254.169.254``, ``169.254.170.2``, ``fd00:ec2::254``,
  ``100.100.100.200``) or metadata host name (``metadata.google.internal`` ...) is
  refused unless the MCP server is at that very address or name.

The kinds
---------

:data:`SPECIAL_PURPOSE` lists every entry of the IANA IPv4 and IPv6 Special-Purpose
Address Registries (RFC 6890, RFC 8190), of the IPv4 Multicast Address Space (RFC
5771) and of the IPv6 Address Space outside global unicast ``2000::/3`` (RFC 4291),
each with its RFC and its registry's "Globally Reachable" column, and the kind albedo
gives it. An address takes the kind of the most specific entry holding it; one that no
entry holds is ``public``. Only an entry the registry calls globally reachable is
``public``: ``192.0.0.9`` (PCP anycast) is, the rest of ``192.0.0.0/24`` is not. The
kinds:

``loopback``       ``127/8``, ``::1``
``unspecified``    ``0/8`` ("this network"; ``0.0.0.0`` reaches this host on Linux), ``::``
``link-local``     ``169.254/16``, ``fe80::/10``
``private``        RFC 1918, RFC 6598 shared ``100.64/10``, RFC 4193 ``fc00::/7``, and the
                   deprecated site-local ``fec0::/10`` (RFC 3879) that came before it
``benchmarking``   ``198.18/15`` (RFC 2544), ``2001:2::/48`` (RFC 5180)
``documentation``  ``192.0.2/24``, ``198.51.100/24``, ``203.0.113/24`` (RFC 5737),
                   ``2001:db8::/32`` (RFC 3849), ``3fff::/20`` (RFC 9637)
``multicast``      ``224/4`` (RFC 5771), ``ff00::/8`` (RFC 4291)
``reserved``       everything else the registries do not call globally reachable:
                   ``240/4``, ``255.255.255.255``, ``192.0.0.0/24`` but its anycast
                   addresses, the terminated ``192.88.99/24`` and ``2001:10::/28``,
                   ``100::/64``, ``5f00::/16``, ``2001::/23`` but its global entries, and
                   every IPv6 block outside ``2000::/3`` not named above
``metadata``       the metadata addresses above

IPv4 inside IPv6
----------------

An IPv6 address that carries an IPv4 one is judged as that IPv4 address, since that is
where a packet to it goes (the host's own stack, a NAT64 or a relay translates it):
IPv4-mapped ``::ffff:a.b.c.d`` (RFC 4291 section 2.5.5.2), IPv4-compatible
``::a.b.c.d`` (section 2.5.5.1, deprecated; ``::`` and ``::1`` excepted), SIIT's
IPv4-translated ``::ffff:0:a.b.c.d`` (RFC 2765 section 2.1), NAT64's well-known
``64:ff9b::/96`` (RFC 6052) and local-use ``64:ff9b:1::/48`` (RFC 8215), 6to4
``2002:AABB:CCDD::/48`` (RFC 3056 section 2) and Teredo ``2001:0::/32`` (RFC 4380
section 4: the server's IPv4 in bits 32-63, the client's in bits 96-127, inverted).
Where the IPv4 address's place is not fixed (a local-use NAT64 prefix may be a /48,
/56, /64 or /96, RFC 6052 section 2.2) and for Teredo's two addresses, every
candidate is judged and the address is public only if all of them are; otherwise it
takes the kind of the first that is not (a metadata address first). A local-use
reading in ``0.0.0.0/8`` is no candidate (no translator sends there, and that is where
the other readings of an ordinary /96 address fall), unless it is the only one.

None of this asks Python's ``ipaddress.is_global`` or ``is_private``: their tables
changed between 3.10 and 3.13 point releases, and albedo runs on all of them.

Host names are resolved once and every address they resolve to is checked (a name
that resolves to one public and one private address is refused). The caller
(:class:`~albedo_actors.auth.http.AuthHttp`) then connects to one of the checked
addresses itself, so a DNS answer that changes between the check and the connection
(DNS rebinding) cannot redirect it.

Standard library only; no albedo imports beyond the error text conventions.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Iterable, NamedTuple
from urllib.parse import urlsplit

__all__ = ["AddressGuard", "AddressRefused", "address_kind", "resolve", "METADATA_HOSTS", "METADATA_ADDRESSES",
           "SPECIAL_PURPOSE", "SpecialPurpose"]

# Host names of cloud metadata services (GCE, AWS EC2); compared lower-cased, without a final dot.
METADATA_HOSTS = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
})
# Addresses of metadata services: AWS/GCE/Azure/OpenStack, AWS ECS task metadata, AWS IPv6, Alibaba.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200",
))


class SpecialPurpose(NamedTuple):
    """One registry entry: its block, its name and RFC as the registry gives them,
    whether the registry calls it globally reachable (None: "N/A" or a terminated
    entry), and the kind albedo gives its addresses ("embedded": judged as the IPv4
    address it carries)."""

    block: str
    name: str
    rfc: str
    globally_reachable: bool | None
    kind: str


_V4 = "IANA IPv4 Special-Purpose Address Registry"
_V6 = "IANA IPv6 Special-Purpose Address Registry"
# Every entry of both registries as of their 2025-04 revision (the IPv6 one's "Dummy
# IPv6 Prefix"), then the multicast spaces and the IPv6 address space's reserved
# blocks. The IPv4 registry's 192.0.0.170/32 and 192.0.0.171/32 share one entry.
SPECIAL_PURPOSE: tuple[SpecialPurpose, ...] = (
    # -- the IPv4 Special-Purpose Address Registry
    SpecialPurpose("0.0.0.0/8", '"This network"', "RFC 791 section 3.2", False, "unspecified"),
    SpecialPurpose("0.0.0.0/32", '"This host on this network"', "RFC 1122 section 3.2.1.3", False, "unspecified"),
    SpecialPurpose("10.0.0.0/8", "Private-Use", "RFC 1918", False, "private"),
    SpecialPurpose("100.64.0.0/10", "Shared Address Space", "RFC 6598", False, "private"),
    SpecialPurpose("127.0.0.0/8", "Loopback", "RFC 1122 section 3.2.1.3", False, "loopback"),
    SpecialPurpose("169.254.0.0/16", "Link Local", "RFC 3927", False, "link-local"),
    SpecialPurpose("172.16.0.0/12", "Private-Use", "RFC 1918", False, "private"),
    SpecialPurpose("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890 section 2.1", False, "reserved"),
    SpecialPurpose("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", False, "reserved"),
    SpecialPurpose("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", False, "reserved"),
    SpecialPurpose("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", True, "public"),
    SpecialPurpose("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", True, "public"),
    SpecialPurpose("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 section 2.2", False, "reserved"),
    SpecialPurpose("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 section 2.2", False, "reserved"),
    SpecialPurpose("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", False, "documentation"),
    SpecialPurpose("192.31.196.0/24", "AS112-v4", "RFC 7535", True, "public"),
    SpecialPurpose("192.52.193.0/24", "AMT", "RFC 7450", True, "public"),
    # Terminated in 2015 (its columns are empty): no relay may be relied on there, and
    # an OAuth server never is, so it is not public.
    SpecialPurpose("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", None, "reserved"),
    SpecialPurpose("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", False, "reserved"),
    SpecialPurpose("192.168.0.0/16", "Private-Use", "RFC 1918", False, "private"),
    SpecialPurpose("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", True, "public"),
    SpecialPurpose("198.18.0.0/15", "Benchmarking", "RFC 2544", False, "benchmarking"),
    SpecialPurpose("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", False, "documentation"),
    SpecialPurpose("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", False, "documentation"),
    SpecialPurpose("240.0.0.0/4", "Reserved", "RFC 1112 section 4", False, "reserved"),
    SpecialPurpose("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919 section 7", False, "reserved"),
    # -- the IPv4 Multicast Address Space Registry (all of it: not one group is a unicast host)
    SpecialPurpose("224.0.0.0/4", "Multicast", "RFC 5771", False, "multicast"),
    # -- the IPv6 Special-Purpose Address Registry
    SpecialPurpose("::1/128", "Loopback Address", "RFC 4291", False, "loopback"),
    SpecialPurpose("::/128", "Unspecified Address", "RFC 4291", False, "unspecified"),
    SpecialPurpose("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", False, "embedded"),
    SpecialPurpose("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", True, "embedded"),
    SpecialPurpose("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", False, "embedded"),
    SpecialPurpose("100::/64", "Discard-Only Address Block", "RFC 6666", False, "reserved"),
    SpecialPurpose("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", False, "reserved"),
    SpecialPurpose("2001::/23", "IETF Protocol Assignments", "RFC 2928", False, "reserved"),
    SpecialPurpose("2001::/32", "TEREDO", "RFC 4380, RFC 8190", None, "embedded"),
    SpecialPurpose("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", True, "public"),
    SpecialPurpose("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", True, "public"),
    SpecialPurpose("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", True, "public"),
    SpecialPurpose("2001:2::/48", "Benchmarking", "RFC 5180, RFC Errata 1752", False, "benchmarking"),
    SpecialPurpose("2001:3::/32", "AMT", "RFC 7450", True, "public"),
    SpecialPurpose("2001:4:112::/48", "AS112-v6", "RFC 7535", True, "public"),
    # Terminated in 2014 (its columns are empty); ORCHIDs were never routable (RFC 4843 section 2).
    SpecialPurpose("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", None, "reserved"),
    SpecialPurpose("2001:20::/28", "ORCHIDv2", "RFC 7343", True, "public"),
    SpecialPurpose("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", True, "public"),
    SpecialPurpose("2001:db8::/32", "Documentation", "RFC 3849", False, "documentation"),
    SpecialPurpose("2002::/16", "6to4", "RFC 3056", None, "embedded"),
    SpecialPurpose("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", True, "public"),
    SpecialPurpose("3fff::/20", "Documentation", "RFC 9637", False, "documentation"),
    SpecialPurpose("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", False, "reserved"),
    SpecialPurpose("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", False, "private"),
    SpecialPurpose("fe80::/10", "Link-Local Unicast", "RFC 4291", False, "link-local"),
    # -- the IPv6 Multicast Address Space Registry
    SpecialPurpose("ff00::/8", "Multicast", "RFC 4291 section 2.7", False, "multicast"),
    # -- the Internet Protocol Version 6 Address Space: every block but global unicast
    # 2000::/3 and the ones above is "Reserved by IETF" (RFC 4291), never reachable.
    SpecialPurpose("::/8", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("::/96", "IPv4-compatible (deprecated), within ::/8", "RFC 4291 section 2.5.5.1", False, "embedded"),
    SpecialPurpose("::ffff:0:0:0/96", "IPv4-translated (SIIT), within ::/8", "RFC 2765 section 2.1", False, "embedded"),
    SpecialPurpose("100::/8", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("200::/7", "Reserved by IETF (formerly NSAP)", "RFC 4048", False, "reserved"),
    SpecialPurpose("400::/6", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("800::/5", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("1000::/4", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("4000::/3", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("6000::/3", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("8000::/3", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("a000::/3", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("c000::/3", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("e000::/4", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("f000::/5", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("f800::/6", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("fe00::/9", "Reserved by IETF", "RFC 4291", False, "reserved"),
    SpecialPurpose("fec0::/10", "Site-local (deprecated)", "RFC 3879", False, "private"),
)


def _table(version: int) -> tuple[tuple[int, int, str], ...]:
    """(shift, block >> shift, kind) of one family's entries, most specific first."""
    rows = []
    for entry in SPECIAL_PURPOSE:
        net = ipaddress.ip_network(entry.block)
        if net.version == version:
            shift = net.max_prefixlen - net.prefixlen
            rows.append((shift, int(net.network_address) >> shift, entry.kind))
    return tuple(sorted(rows, key=lambda row: row[0]))


_V4_TABLE = _table(4)
_V6_TABLE = _table(6)
_KIND_TEXT = {
    "metadata": "a cloud metadata address", "loopback": "a loopback address", "unspecified": "an unspecified address",
    "link-local": "a link-local address", "private": "a private-network address",
    "benchmarking": "a benchmarking address (RFC 2544/5180)", "documentation": "a documentation address",
    "multicast": "a multicast address", "reserved": "a reserved address",
}


def _lookup(value: int, table: tuple[tuple[int, int, str], ...]) -> str:
    for shift, block, kind in table:
        if value >> shift == block:
            return kind
    return "public"


def _bits(value: int, start: int, length: int) -> int:
    """Bits ``start`` .. ``start + length - 1`` of an IPv6 address (bit 0 the first)."""
    return (value >> (128 - start - length)) & ((1 << length) - 1)


def _carried(value: int, kind: str) -> tuple[int, ...]:
    """The IPv4 addresses an IPv6 address of an "embedded" entry may carry (as integers)."""
    if value >> 32 == 0xFFFF or value >> 32 == 0xFFFF_0000 or value >> 32 == 0:  # mapped, SIIT, compatible
        return (value & 0xFFFF_FFFF,)
    if value >> 32 == 0x0064_FF9B << 64:  # 64:ff9b::/96, RFC 6052 section 2.1
        return (value & 0xFFFF_FFFF,)
    if value >> 80 == 0x0064_FF9B_0001:  # 64:ff9b:1::/48: the RFC 6052 section 2.2 formats that fit in it
        # /96, /64, /56, /48 (the u-octet, bits 64-71, is skipped). No translator sends to
        # "this network" 0/8, where the other readings of a /96 address fall: those are no
        # candidates, unless nothing else is left.
        readings = (_bits(value, 96, 32), _bits(value, 72, 32), _bits(value, 56, 8) << 24 | _bits(value, 72, 24),
                    _bits(value, 48, 16) << 16 | _bits(value, 72, 16))
        return tuple(v4 for v4 in readings if v4 >> 24) or readings[:1]
    if value >> 112 == 0x2002:  # 6to4, RFC 3056 section 2
        return (_bits(value, 16, 32),)
    if value >> 96 == 0x2001_0000:  # Teredo, RFC 4380 section 4: the client (inverted), then the server
        return (_bits(value, 96, 32) ^ 0xFFFF_FFFF, _bits(value, 32, 32))
    raise AssertionError(f"no IPv4 address in {ipaddress.IPv6Address(value)} ({kind})")  # pragma: no cover


def _v4_kind(value: int) -> str:
    if ipaddress.IPv4Address(value) in METADATA_ADDRESSES:
        return "metadata"
    return _lookup(value, _V4_TABLE)


def address_kind(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """The kind of ``address`` (see the module docstring): ``public``, ``metadata``,
    ``loopback``, ``unspecified``, ``link-local``, ``private``, ``benchmarking``,
    ``documentation``, ``multicast`` or ``reserved``.

    Raises:
        ValueError: ``address`` is not an IP address.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if ip in METADATA_ADDRESSES:
        return "metadata"
    if ip.version == 4:
        return _lookup(int(ip), _V4_TABLE)
    value = int(ip)
    kind = _lookup(value, _V6_TABLE)
    if kind != "embedded":
        return kind
    kinds = [_v4_kind(v4) for v4 in _carried(value, kind)]
    if "metadata" in kinds:
        return "metadata"
    return next((k for k in kinds if k != "public"), "public")


class AddressRefused(Exception):
    """The target is at an address the guard does not allow; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _literal(host: str) -> ipaddress._BaseAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def resolve(host: str, port: int, timeout: float) -> list[tuple[int, tuple]]:
    """``(family, sockaddr)`` of every TCP address of ``host``, within ``timeout`` seconds.

    An IP literal needs no lookup. A name is resolved on a helper thread so that the
    lookup counts against the caller's deadline (``getaddrinfo`` itself takes no
    timeout); a lookup still running when the time is up is left to finish on its own
    (the thread is a daemon and holds nothing). Raises ``TimeoutError`` or ``OSError``.
    """
    ip = _literal(host)
    if ip is not None:
        if ip.version == 6:
            return [(socket.AF_INET6, (str(ip), port, 0, 0))]
        return [(socket.AF_INET, (str(ip), port))]
    done = threading.Event()
    outcome: dict = {}

    def lookup() -> None:
        try:
            outcome["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except BaseException as exc:  # handed to the waiting caller
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=lookup, name="oauth-resolve", daemon=True).start()
    if not done.wait(max(0.0, timeout)):
        raise TimeoutError(f"resolving {host} took more than {timeout:g} s")
    if "error" in outcome:
        error = outcome["error"]
        raise error if isinstance(error, OSError) else OSError(str(error))
    found: list[tuple[int, tuple]] = []
    for family, _type, _proto, _canon, sockaddr in outcome["infos"]:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr) not in found:
            found.append((family, sockaddr))
    if not found:
        raise OSError(f"{host} has no address")
    return found


def _host_name(host: str) -> str:
    return host.lower().rstrip(".")


class AddressGuard:
    """Which addresses the OAuth requests made for the MCP server at ``server_url`` may reach.

    The server's own host is resolved at the first :meth:`check` (bounded by that
    request's time), and the kinds of its addresses are what is allowed besides the
    public Internet. A server URL albedo cannot resolve allows only public addresses.
    """

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url or "")
        self._server_host = _host_name(parts.hostname or "")
        try:
            self._server_port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        except ValueError:
            self._server_port = 443
        self._lock = threading.Lock()
        self._allowed: frozenset[str] | None = None
        self._server_addresses: frozenset = frozenset()

    def _own_kinds(self, timeout: float) -> tuple[frozenset[str], frozenset]:
        with self._lock:
            if self._allowed is not None:
                return self._allowed, self._server_addresses
        kinds, addresses = {"public"}, set()
        if self._server_host:
            try:
                for _family, sockaddr in resolve(self._server_host, self._server_port, timeout):
                    ip = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
                    addresses.add(ip)
                    kinds.add(address_kind(ip))
            except (OSError, ValueError):
                pass  # not known (yet): only public targets; not cached, so a later check tries again
            else:
                with self._lock:
                    self._allowed, self._server_addresses = frozenset(kinds), frozenset(addresses)
        return frozenset(kinds), frozenset(addresses)

    def check_name(self, host: str) -> None:
        """Raise :class:`AddressRefused` for a metadata host name (checked before it is even looked up)."""
        name = _host_name(host)
        if name in METADATA_HOSTS and name != self._server_host:
            raise AddressRefused(f"{name} is a cloud metadata service, and the MCP server is not there; "
                                 f"albedo does not fetch it")

    def check(self, host: str, addresses: Iterable[tuple[int, tuple]], deadline: float) -> None:
        """Raise :class:`AddressRefused` unless every one of ``addresses`` (of ``host``) is allowed."""
        self.check_name(host)
        name = _host_name(host)
        allowed, own = self._own_kinds(max(0.0, deadline - time.monotonic()))
        for _family, sockaddr in addresses:
            ip = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
            kind = address_kind(ip)
            if kind == "public" or (kind in allowed and (kind != "metadata" or ip in own)):
                continue
            shown = name if _literal(name) is not None else f"{name} ({ip})"
            raise AddressRefused(f"{shown} is {_KIND_TEXT.get(kind, kind)}, and the MCP server is not at one; "
                                 f"albedo does not fetch it")
