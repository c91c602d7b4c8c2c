"""Where the OAuth requests of a server may go: its own kind of address, or the public Internet.

An MCP server names the URLs albedo fetches while signing in (its resource metadata, the
authorization server, that server's endpoints). A hostile server could name an address
albedo can reach and it cannot: the cloud metadata service (``169.254.169.254``), a
router on ``192.168.1.1``, another service of the host on ``127.0.0.1``. So every such
request is checked by an :class:`AddressGuard` built from the MCP server's own URL:

* an address of the public Internet is always allowed;
* a loopback, private (RFC 1918 ``10/8``, ``172.16/12``, ``192.168/16``; RFC 4193
  ``fc00::/7``; RFC 6598 ``100.64/10``), link-local (RFC 3927 ``169.254/16``, RFC 4291
  ``fe80::/10``), unspecified (``0.0.0.0/8``, ``::``) or reserved/multicast address is
  allowed only when the MCP server itself is at an address of that same kind (a
  server on ``127.0.0.1`` may use an authorization server on ``127.0.0.1``; one on the
  public Internet may not send albedo to ``10.0.0.5``);
* a cloud metadata address (``169.254.169.254``, ``169.254.170.2``, ``fd00:ec2::254``,
  ``100.100.100.200``) or metadata host name (``metadata.google.internal`` ...) is
  refused unless the MCP server is at that very address or name.

Host names are resolved once and every address they resolve to is checked (a name
that resolves to one public and one private address is refused). The caller
(:class:`~albedo_actors.auth.http.AuthHttp`) then connects to one of the checked
addresses itself, so a DNS answer that changes between the check and the connection
(DNS rebinding) cannot redirect it. IPv4 addresses embedded in IPv6 ones (mapped
``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged as the IPv4
address they carry.

Standard library only; no albedo imports beyond the error text conventions.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Iterable
from urllib.parse import urlsplit

__all__ = ["AddressGuard", "AddressRefused", "address_kind", "resolve", "METADATA_HOSTS", "METADATA_ADDRESSES"]

# Host names of cloud metadata services (GCE, AWS EC2); compared lower-cased, without a final dot.
METADATA_HOSTS = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
})
# Addresses of metadata services: AWS/GCE/Azure/OpenStack, AWS ECS task metadata, AWS IPv6, Alibaba.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200",
))

_RANGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loopback", ("127.0.0.0/8", "::1/128")),
    ("unspecified", ("0.0.0.0/8", "::/128")),
    ("link-local", ("169.254.0.0/16", "fe80::/10")),
    ("private", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")),
    ("reserved", ("224.0.0.0/4", "240.0.0.0/4", "ff00::/8")),
)
_NETWORKS = tuple((kind, tuple(ipaddress.ip_network(n) for n in nets)) for kind, nets in _RANGES)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_KIND_TEXT = {
    "metadata": "a cloud metadata address", "loopback": "a loopback address", "unspecified": "an unspecified address",
    "link-local": "a link-local address", "private": "a private-network address", "reserved": "a reserved or multicast address",
}


class AddressRefused(Exception):
    """The target is at an address the guard does not allow; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _embedded_v4(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_kind(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """``public``, ``metadata``, ``loopback``, ``unspecified``, ``link-local``, ``private`` or ``reserved``."""
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if ip in METADATA_ADDRESSES:
        return "metadata"
    ip = _embedded_v4(ip)
    if ip in METADATA_ADDRESSES:
        return "metadata"
    for kind, networks in _NETWORKS:
        if any(ip.version == net.version and ip in net for net in networks):
            return kind
    return "public"


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
