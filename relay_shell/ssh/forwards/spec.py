"""A forward's spec (`L:lport:dhost:dport`, `R:rport:dhost:dport`, `D:lport`) and its bind address, parsed and
checked. Imports no asyncssh.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from relay_shell.errors import ArgumentError

SPEC_FORMS = (
    "L:lport:dhost:dport (listen on this machine, connect to dhost:dport from the SSH host), "
    "R:rport:dhost:dport (listen on the SSH host, connect to dhost:dport from this machine) or "
    "D:lport (a SOCKS proxy on this machine); an IPv6 destination in brackets, e.g. L:8080:[::1]:80"
)
LISTEN_PORTS = "0 to 65535 (0 picks a free port)"
MAX_SPEC = 300
_DIGITS = re.compile(r"[0-9]{1,16}")
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")  # a destination name or IPv4 address (any spelling)
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}(?:%[A-Za-z0-9_.-]{1,32})?")
Kind = Literal["L", "R", "D"]
KINDS: dict[str, Kind] = {"L": "L", "R": "R", "D": "D"}


@dataclass(frozen=True)
class ForwardSpec:
    kind: Kind
    listen_port: int  # as asked; 0 = pick one
    dest_host: str | None = None  # canonical spelling (what policy saw is what is dialed); None for D
    dest_port: int | None = None

    def text(self, listen_port: int | None = None) -> str:
        port = self.listen_port if listen_port is None else listen_port
        if self.kind == "D":
            return f"D:{port}"
        return f"{self.kind}:{port}:{host_port(self.dest_host or '', self.dest_port or 0)}"

    def destination(self) -> str:
        return (
            "any (SOCKS: the client names it)"
            if self.dest_host is None
            else host_port(self.dest_host, self.dest_port or 0)
        )


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_spec(value: str) -> ForwardSpec:
    """`L:lport:dhost:dport`, `R:rport:dhost:dport` or `D:lport` (kind letter in either case); the destination in
    its canonical spelling. Anything else is an ArgumentError naming `spec` and the allowed forms."""
    from relay_shell.ssh.target import canonical_host  # target imports the inventory, which imports asyncssh

    text = value.strip()
    shown = repr(value[:80])

    def malformed(problem: str) -> ArgumentError:
        return ArgumentError(f"spec: {shown} {problem}; allowed: {SPEC_FORMS}")

    if len(value) > MAX_SPEC:
        raise malformed(f"is {len(value)} characters long")
    kind_text, separator, rest = text.partition(":")
    kind = KINDS.get(kind_text.upper())
    if not separator or kind is None:
        raise malformed("does not start with L:, R: or D:")
    if kind == "D":
        if ":" in rest:
            raise malformed("has more than a port after D:")
        return ForwardSpec("D", _port(rest, "listen port", shown, LISTEN_PORTS, low=0))
    listen_text, separator, rest = rest.partition(":")
    if not separator:
        raise malformed("has no destination")
    listen_port = _port(listen_text, "listen port", shown, LISTEN_PORTS, low=0)
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise malformed("has '[' without ']'")
        host, after = rest[1:close], rest[close + 1 :]
        if not after.startswith(":"):
            raise malformed("needs ':dport' after the bracketed address")
        port_text = after[1:]
        if not _IPV6.fullmatch(host) or _ip(host) is None:
            raise malformed(f"has {host!r} in brackets, which is not an IPv6 address")
    else:
        host, separator, port_text = rest.rpartition(":")
        if not separator or not host:
            raise malformed("has no destination host and port (dhost:dport)")
        if ":" in host:
            raise malformed("has an IPv6 destination without brackets; write it as [addr]")
        if not HOST_NAME.fullmatch(host):
            raise malformed(f"has {host[:64]!r} as destination, which is not a host name or address")
    dest_port = _port(port_text, "destination port", shown, "1 to 65535", low=1)
    return ForwardSpec(kind, listen_port, canonical_host(host), dest_port)


def _port(text: str, what: str, shown: str, allowed: str, low: int) -> int:
    if not _DIGITS.fullmatch(text):
        raise ArgumentError(
            f"spec: {what} {text[:16]!r} in {shown} is not a port number; allowed: {allowed}, in {SPEC_FORMS}"
        )
    if not low <= int(text) <= 65535:
        raise ArgumentError(f"spec: {what} {text!r} in {shown} is out of range; allowed: {allowed}")
    return int(text)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_bind_address(value: str) -> tuple[str, bool]:
    """The address a listener binds, and whether it is loopback (anything else is reachable from other hosts).
    Only plain IP addresses (and `localhost`): no other spellings, so what is bound is what policy saw."""
    text = value.strip()
    if text.lower() == "localhost":
        return "127.0.0.1", True
    address = _ip(text)
    if address is None:
        raise ArgumentError(
            f"bind_address: {value[:80]!r} is not an IP address; allowed: 127.0.0.1 (the default: this host only), "
            "::1, localhost, or an address other hosts can reach such as 0.0.0.0 (tier 2)"
        )
    return str(address), address.is_loopback
