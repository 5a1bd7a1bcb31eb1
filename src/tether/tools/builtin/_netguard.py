"""Server-side request forgery defence: which addresses an HTTP tool may reach.

A destination is vetted after DNS resolution: every address a name resolves to must be
globally routable (``ipaddress``'s ``is_global``, with explicit denies where Python 3.11 is
too lenient), after unwrapping IPv4 embedded in IPv6 (mapped, compatible, 6to4, NAT64,
Teredo). The caller then connects to the vetted address itself, so a second DNS answer
(rebinding) never decides where the connection goes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence

from tether._internal.frozen import frozen
from tether.errors import ConfigError

__all__ = [
    "IPAddress",
    "NetGuard",
    "PrivateAllowance",
    "Refused",
    "Resolver",
    "embedded_ipv4",
    "forbidden_reason",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Resolves ``(host, port)`` to IP address strings."""

_ALLOW_HINT = (
    "requests to private, loopback, link-local and cloud-metadata addresses are blocked to "
    "prevent server-side request forgery"
)


class Refused(Exception):
    """A destination that must not be contacted; ``message`` says why and how to allow it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.169.253",  # AWS DNS
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "fd00:ec2::254",  # AWS over IPv6
        "fd00:ec2::23",  # AWS time sync over IPv6
    )
)


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), label) for net, label in pairs)


# Ordered: the first match names the reason. Ranges Python 3.11 calls global are marked (!).
_DENY = _nets(
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("10.0.0.0/8", "a private address (RFC 1918)"),
    ("100.64.0.0/10", "a carrier-grade NAT address (RFC 6598)"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address (RFC 1918)"),
    ("192.0.0.0/24", "an IETF protocol assignment (RFC 6890)"),  # (!)
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a deprecated 6to4 relay address"),  # (!)
    ("192.168.0.0/16", "a private address (RFC 1918)"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),  # (!)
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped address"),
    ("::ffff:0:0:0/96", "an IPv4-translated address"),
    ("::/96", "an IPv4-compatible address"),  # (!)
    ("64:ff9b::/96", "a NAT64 address"),  # (!) allowed only via its embedded IPv4, never
    ("64:ff9b:1::/48", "a local-use NAT64 address"),  # (!)
    ("100::/64", "a discard-only address"),
    ("2001::/23", "an IETF protocol assignment (Teredo, ORCHID and others)"),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address"),  # (!)
    ("3fff::/20", "a documentation address"),  # (!)
    ("5f00::/16", "a segment-routing address"),  # (!)
    ("fc00::/7", "a unique-local address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),  # (!)
    ("ff00::/8", "a multicast address"),  # (!)
)


def embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, 6to4, NAT64, Teredo)."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    value = int(address)
    low32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    elif (value >> 32 == 0 and value > 1) or value >> 32 == 0xFFFF0000:
        found.append(low32)  # ::a.b.c.d (compatible) or ::ffff:0:a.b.c.d (translated)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64 or address in _NAT64_LOCAL:
        found.append(low32)
    return found


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be contacted (``None``: it is a public unicast address)."""
    if address in _METADATA:
        return "a cloud metadata address"
    for inner in embedded_ipv4(address):
        reason = forbidden_reason(inner)
        if reason is not None:
            return f"an IPv6 address embedding {inner}, {reason}"
    for network, label in _DENY:
        if address.version == network.version and address in network:
            return label
    if not address.is_global or address.is_multicast or address.is_reserved:
        return "not a globally routable address"
    return None


@frozen
class PrivateAllowance:
    """One ``allow_private`` entry: a host name or an address range, and optionally a port."""

    host: str | None = None
    """A host name, lowercase, without a trailing dot."""
    network: IPNetwork | None = None
    """An address or range."""
    port: int | None = None
    """The only port allowed, or ``None`` for any."""

    def permits(self, host: str, address: IPAddress, port: int) -> bool:
        """Whether this entry lets ``host`` (resolved to ``address``) be reached on ``port``."""
        if self.port is not None and self.port != port:
            return False
        if address in _METADATA:  # only an entry naming exactly this address unlocks it
            return (
                self.network is not None
                and self.network.num_addresses == 1
                and (address in self.network)
            )
        if self.network is not None:
            return address.version == self.network.version and address in self.network
        return self.host == host

    @classmethod
    def parse(cls, entry: str) -> PrivateAllowance:
        """``10.0.0.0/8``, ``127.0.0.1:8080``, ``[::1]:8080``, ``::1``, ``db.internal:5432``."""
        text = entry.strip().lower()
        port: int | None = None
        if text.startswith("["):
            inner, _, rest = text[1:].partition("]")
            text = inner
            if rest:
                port = _port(entry, rest.removeprefix(":"))
        elif text.count(":") == 1:
            text, _, port_text = text.partition(":")
            port = _port(entry, port_text)
        try:
            return cls(network=ipaddress.ip_network(text), port=port)
        except ValueError:
            pass
        name = text.removesuffix(".")
        if not _HOSTNAME.match(name):
            raise ConfigError(
                f"allow_private entry {entry!r} is neither a host name, an address nor a CIDR "
                "range: write e.g. '127.0.0.1:8080', '10.0.0.0/8', '[::1]:8080' or 'db.internal'"
            )
        return cls(host=name, port=port)


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"allow_private entry {entry!r}: {text!r} is not a port (1-65535)")
    return int(text)


_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_NUMERIC_LAST_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")

# Names that lead inside the machine or the cloud account whatever DNS says.
_INTERNAL_NAMES = frozenset(
    {
        "localhost",
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_INTERNAL_SUFFIXES = (".localhost", ".localdomain", ".internal", ".local", ".home.arpa", ".arpa")


def _host_pattern_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


@frozen
class NetGuard:
    """Decides, per request and per redirect hop, which address a request may go to."""

    allow_hosts: tuple[str, ...] = ()
    """If non-empty, the only host names (or ``*.example.com`` globs) that may be fetched."""
    allow_private: tuple[PrivateAllowance, ...] = ()
    """Destinations reachable despite being private."""
    resolver: Resolver
    """Resolves host names."""

    @classmethod
    def create(
        cls,
        *,
        allow_hosts: Sequence[str] = (),
        allow_private: Sequence[str] = (),
        resolver: Resolver | None = None,
    ) -> NetGuard:
        """A guard from developer configuration; raises ``ConfigError`` on a bad entry."""
        if isinstance(allow_hosts, str) or isinstance(allow_private, str):
            raise ConfigError("allow_hosts and allow_private take a list of strings, not a string")
        hosts: list[str] = []
        for raw in allow_hosts:
            pattern = raw.strip().lower().removesuffix(".")
            name = pattern.removeprefix("*.")
            if not (_HOSTNAME.match(name) or _is_ip(name)) or "*" in name:
                raise ConfigError(
                    f"allow_hosts entry {raw!r}: use a host name ('api.example.com') or a "
                    "subdomain glob ('*.example.com')"
                )
            hosts.append(pattern)
        return cls(
            allow_hosts=tuple(hosts),
            allow_private=tuple(PrivateAllowance.parse(e) for e in allow_private),
            resolver=resolver or system_resolver,
        )

    def _private_allowed(self, host: str, address: IPAddress, port: int) -> bool:
        return any(a.permits(host, address, port) for a in self.allow_private)

    def _name_listed(self, host: str, port: int) -> bool:
        return any(
            a.host == host and (a.port is None or a.port == port) for a in self.allow_private
        )

    def check_host(self, host: str, port: int) -> IPAddress | None:
        """Checks that need no DNS; returns the address if ``host`` is an IP literal.

        Raises:
            Refused: the host is not allowed, is a non-canonical number, or an internal name.
        """
        if self.allow_hosts and not any(_host_pattern_matches(p, host) for p in self.allow_hosts):
            raise Refused(
                f"refused: host {host!r} is not in this tool's allow_hosts "
                f"({', '.join(self.allow_hosts)}); fetch one of those hosts instead"
            )
        if _is_ip(host):
            address = ipaddress.ip_address(host)
            if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
                raise Refused(f"refused: {host!r} is a scoped (link-local) IPv6 address")
            return address
        last = host.rsplit(".", 1)[-1]
        if _NUMERIC_LAST_LABEL.match(last) or _inet_aton_accepts(host):
            raise Refused(
                f"refused: {host!r} is an IPv4 address in a non-canonical form (decimal, octal, "
                "hex or shortened); such forms are used to slip past address filters. Write the "
                "address as four decimal numbers, e.g. 93.184.216.34"
            )
        if not _HOSTNAME.match(host):
            raise Refused(
                f"refused: {host!r} is not a valid host name (letters, digits, '-' and '.')"
            )
        internal = host in _INTERNAL_NAMES or host.endswith(_INTERNAL_SUFFIXES) or "." not in host
        if internal and not self._name_listed(host, port):
            raise Refused(
                f"refused: {host!r} names a local or internal host (localhost, a cloud metadata "
                f"service, an internal or single-label name); {_ALLOW_HINT}. A developer can "
                f"allow it with http_tools(allow_private=[{f'{host}:{port}'!r}])"
            )
        return None

    async def vet(self, host: str, port: int) -> IPAddress:
        """The address to connect to for ``host``: checked, and the one to pin the connection to.

        ``host`` is lowercase ASCII (IDNA), without brackets or a trailing dot. Every address
        the name resolves to must pass, so a resolver answering with a public and a private
        address is refused.

        Raises:
            Refused: the destination is forbidden; the message says why and how to allow it.
            OSError: the name could not be resolved.
        """
        literal = self.check_host(host, port)
        if literal is not None:
            addresses = [literal]
        else:
            answers = await self.resolver(host, port)
            if not answers:
                raise socket.gaierror(f"{host!r} resolved to no address")
            addresses = [_parse_answer(host, a) for a in answers]
        for address in addresses:
            reason = forbidden_reason(address)
            if reason is not None and not self._private_allowed(host, address, port):
                shown = str(address) if address.version == 4 else f"[{address}]"
                subject = str(address) if literal is not None else f"{host!r} resolves to {address}"
                raise Refused(
                    f"refused: {subject}, which is {reason}; {_ALLOW_HINT}. If this "
                    "destination is trusted, a developer can allow it with "
                    f"http_tools(allow_private=['{shown}:{port}'])"
                )
        return addresses[0]


def _parse_answer(host: str, answer: str) -> IPAddress:
    try:
        address = ipaddress.ip_address(answer)
    except ValueError:
        raise Refused(f"refused: resolving {host!r} gave {answer!r}, not an address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        raise Refused(f"refused: {host!r} resolves to a scoped IPv6 address {answer!r}")
    return address


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _inet_aton_accepts(text: str) -> bool:
    try:
        socket.inet_aton(text)
    except (OSError, ValueError):
        return False
    return True


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the C library's ``getaddrinfo`` (in a worker thread), as connecting would."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
