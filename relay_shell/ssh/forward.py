"""Port forwards (ssh_forward, ssh_forward_list, ssh_forward_close): the spec grammar, who owns which forward,
the bound on how many are open, and the plans of the three tools. The bytes move in `forward_io.py`.

A spec is `L:lport:dhost:dport` (a listener on this machine; each connection is carried over SSH and opened to
dhost:dport by the SSH host), `R:rport:dhost:dport` (a listener on the SSH host; each connection is carried back
and opened to dhost:dport from this machine) or `D:lport` (a SOCKS 4/5 listener on this machine; each client
names its destination). Port 0 lets the listener pick a free port; the result says which.

Policy sees the SSH host and the destination in all their spellings (`reached_spellings`), so a deny rule on
an address also refuses `2130706433` or `0x7f.1`; a SOCKS destination is known only when a client connects and
is admitted then, against the same rules (`Runner.admit_later`). A listener binds loopback unless `bind_address`
says otherwise, and a listener reachable from other hosts is tier 2 — every R listener is: it lets whoever
reaches it on the SSH host into this machine.

A forward belongs to the client connection that opened it (`sessions/owner.py`): only that client lists or
closes it, and it is closed when that client disconnects, when it has had no connection for
RELAY_SHELL_FORWARD_IDLE_TIMEOUT (owners of stateless HTTP requests never disconnect), when its SSH connection
is lost, and at shutdown. One client may hold at most half of RELAY_SHELL_MAX_FORWARDS, and the connections
all forwards carry at once are bounded by the process's file descriptors (`ConnectionBudget`).
This module imports no asyncssh: the server builds the registry at startup, the SSH side on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import resource
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from relay_shell.capture import BoundedCapture
from relay_shell.plan import ArgumentError, Execution, Plan, ProgressFn, ToolError
from relay_shell.policy.classify import Subject

if TYPE_CHECKING:
    from relay_shell.ssh.commands import ConnectionArgs, Ssh

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
CLOSED_REMEMBERED = 4096  # ids of closed forwards kept to tell their owner why they closed
REAP_INTERVAL = 1.0  # seconds between checks for forwards whose client has gone or that are idle
MAX_REFUSED_DESTINATIONS = 32  # SOCKS: refusals are recorded and counted per destination for this many per forward
OTHER_DESTINATIONS = "others"  # the count of refusals beyond them (a destination is always host:port)

Kind = Literal["L", "R", "D"]
KINDS: dict[str, Kind] = {"L": "L", "R": "R", "D": "D"}


# -- the spec ----------------------------------------------------------------------------------------------


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


# -- forwards and their owners ------------------------------------------------------------------------------


@dataclass
class Traffic:
    """What moved through one forward. forward_io updates it on every chunk and connection."""

    to_destination: int = 0  # bytes from the clients of the listener toward the destination
    from_destination: int = 0  # bytes back
    connections: int = 0  # accepted by the listener
    open: int = 0  # being carried now
    failed: int = 0  # the destination could not be reached
    refused: int = 0  # refused by policy (a SOCKS destination) or by the bound on open connections
    destinations: dict[str, None] = field(default_factory=dict)  # SOCKS: distinct destinations (bounded)
    # SOCKS: policy refusals per destination, for the first MAX_REFUSED_DESTINATIONS destinations refused; the
    # first refusal of each of those is an audit record, every other one is only counted (and in forward:end).
    refusals: dict[str, int] = field(default_factory=dict)
    refusals_other: int = 0  # refusals of destinations beyond those
    last_active: float = field(default_factory=time.monotonic)  # a connection arrived or ended (for idleness)

    def records_refusal(self, destination: str) -> bool:
        """Whether a refusal of `destination` now would be the first one recorded for it."""
        return destination not in self.refusals and len(self.refusals) < MAX_REFUSED_DESTINATIONS

    def count_refusal(self, destination: str) -> None:
        self.refused += 1
        if destination in self.refusals or len(self.refusals) < MAX_REFUSED_DESTINATIONS:
            self.refusals[destination] = self.refusals.get(destination, 0) + 1
        else:
            self.refusals_other += 1

    def refused_destinations(self) -> dict[str, int]:
        """Refusals per destination, and those of the destinations beyond the first ones under "others"."""
        counted = dict(self.refusals)
        if self.refusals_other:
            counted[OTHER_DESTINATIONS] = self.refusals_other
        return counted


@dataclass
class ConnectionBudget:
    """Forwarded connections open at once, all forwards together. Each holds a file descriptor here (the socket
    a client connected with, or for R the socket to the destination), so without this bound 32 forwards of 256
    connections would let any local user run the process out of descriptors (EMFILE): no command, session,
    SSH connection or audit write could then open one."""

    limit: int
    open: int = 0

    def full(self) -> bool:
        return self.open >= self.limit


def connection_budget() -> int:
    """Half the soft RLIMIT_NOFILE (read now: the server raised it at startup): the other half stays free for
    everything else the process opens."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(1, soft // 2)


class Tunnel(Protocol):
    """The machinery of an open forward (forward_io.Tunnel)."""

    listen_host: str
    listen_port: int
    traffic: Traffic
    host_key: str | None  # of the SSH host, for the audit record
    accepted_new_key: bool  # the SSH host's key was trusted for the first time (accept-new) to open this one

    async def close(self) -> None: ...

    async def wait_lost(self) -> None: ...


@dataclass(eq=False)
class Forward:
    forward_id: str
    owner: str
    client_id: str
    host: str  # as the caller named it
    via: str  # user@address:port of the SSH host
    spec: ForwardSpec
    tunnel: Tunnel
    created: float = field(default_factory=time.monotonic)
    closing: bool = False
    watcher: asyncio.Task[None] | None = None

    def listen(self) -> str:
        return host_port(self.tunnel.listen_host, self.tunnel.listen_port)

    def describe(self) -> dict[str, Any]:
        traffic = self.tunnel.traffic
        described: dict[str, Any] = {
            "forward_id": self.forward_id,
            "spec": self.spec.text(self.tunnel.listen_port),
            "host": self.host,
            "via": self.via,
            "listen": self.listen(),
            "listen_on": "the SSH host" if self.spec.kind == "R" else "this machine",
            "destination": self.spec.destination(),
            "bytes_to_destination": traffic.to_destination,
            "bytes_from_destination": traffic.from_destination,
            "connections": traffic.connections,
            "open_connections": traffic.open,
            "failed_connections": traffic.failed,
            "refused_connections": traffic.refused,
            "age_s": round(time.monotonic() - self.created, 1),
        }
        if self.spec.kind == "D":
            described["destinations"] = list(traffic.destinations)
            if traffic.refused_destinations():
                described["refused_destinations"] = traffic.refused_destinations()
        return described

    def summary(self) -> str:
        """One line: what it is and what it carried."""
        traffic = self.tunnel.traffic
        where = "on the SSH host" if self.spec.kind == "R" else "here"
        return (
            f"{self.forward_id}  {self.spec.kind} {self.listen()} ({where}) -> {self.spec.destination()} "
            f"via {self.host}  {traffic.to_destination} B to / {traffic.from_destination} B from the destination  "
            f"connections {traffic.connections} ({traffic.open} open, {traffic.failed} failed, "
            f"{traffic.refused} refused)  age {round(time.monotonic() - self.created, 1)}s"
        )


class ForwardRegistry:
    """Every open forward, bounded in number (RELAY_SHELL_MAX_FORWARDS, all clients together; one client at most
    half of it, so that no client can take every slot), and the budget of connections they carry together."""

    def __init__(
        self,
        max_forwards: int,
        on_end: Callable[[Forward, str], None] = lambda forward, reason: None,
        connected: Callable[[str], bool] = lambda owner: True,
        idle_timeout: float = 3600.0,
    ) -> None:
        self.max_forwards = max_forwards
        self.max_per_owner = max(1, max_forwards // 2)
        self.on_end = on_end  # the `forward:end` audit record
        self.connected = connected
        self.idle_timeout = idle_timeout  # seconds with no open connection before the reaper closes a forward
        self.budget = ConnectionBudget(connection_budget())
        self.forwards: dict[str, Forward] = {}
        self.opening: dict[str, int] = {}  # owner -> forwards being opened: they count against the bounds already
        self.closed: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (owner, why it closed)

    @staticmethod
    def new_id() -> str:
        return "f-" + secrets.token_hex(6)

    def reserve(self, owner: str) -> None:
        """Count a forward about to open; `add` or `unreserve` ends the reservation."""
        yours = len(self.owned_by(owner)) + self.opening.get(owner, 0)
        if yours >= self.max_per_owner:
            raise ToolError(
                "ForwardLimit",
                f"you have {yours} forwards open, the most one client may have ({self.max_per_owner}: half of "
                f"RELAY_SHELL_MAX_FORWARDS={self.max_forwards}); close one with ssh_forward_close "
                "(ssh_forward_list shows yours)",
            )
        total = len(self.forwards) + sum(self.opening.values())
        if total >= self.max_forwards:
            raise ToolError(
                "ForwardLimit",
                f"{total} forwards are open (RELAY_SHELL_MAX_FORWARDS={self.max_forwards}), most of them other "
                "clients'; close one of yours with ssh_forward_close (ssh_forward_list shows them) or try later",
            )
        self.opening[owner] = self.opening.get(owner, 0) + 1

    def unreserve(self, owner: str) -> None:
        self.opening[owner] -= 1
        if not self.opening[owner]:
            del self.opening[owner]

    def add(self, forward: Forward) -> None:
        self.unreserve(forward.owner)
        self.forwards[forward.forward_id] = forward
        forward.watcher = asyncio.get_running_loop().create_task(self._watch(forward))

    def get(self, owner: str, forward_id: str) -> Forward:
        forward = self.forwards.get(forward_id)
        if forward is not None and forward.owner == owner:
            return forward
        remembered = self.closed.get(forward_id)
        if remembered is not None and remembered[0] == owner:
            raise ToolError("ForwardClosed", f"forward {forward_id!r} is already closed ({remembered[1]})")
        # Another client's forward gets the same answer as one that never existed: ids are not for probing.
        raise ToolError(
            "UnknownForward",
            f"you have no forward {forward_id[:64]!r}; ssh_forward_list shows yours (ids look like f-1a2b3c4d5e6f)",
        )

    def owned_by(self, owner: str) -> list[Forward]:
        return [forward for forward in self.forwards.values() if forward.owner == owner]

    async def close(self, forward: Forward, reason: str) -> None:
        """Stop the listener, end every connection it carries, and let go of the SSH connection."""
        if forward.closing:
            return
        forward.closing = True
        with anyio.CancelScope(shield=True):
            await forward.tunnel.close()
        if forward.watcher is not None and forward.watcher is not asyncio.current_task():
            forward.watcher.cancel()
        self.forwards.pop(forward.forward_id, None)
        self.closed[forward.forward_id] = (forward.owner, reason)
        while len(self.closed) > CLOSED_REMEMBERED:
            self.closed.popitem(last=False)
        self.on_end(forward, reason)

    async def close_disconnected(self) -> None:
        """Close the forwards of clients whose connection has ended."""
        gone = [forward for forward in self.forwards.values() if not self.connected(forward.owner)]
        await self._close_many(gone, "client disconnected")

    async def close_idle(self) -> None:
        """Close the forwards that have carried no connection for the idle timeout: the only end a forward of
        an owner that never disconnects (stateless HTTP clients, sessions/owner.py) gets short of shutdown."""
        now = time.monotonic()
        idle = [
            forward
            for forward in self.forwards.values()
            if forward.tunnel.traffic.open == 0
            and now - max(forward.created, forward.tunnel.traffic.last_active) >= self.idle_timeout
        ]
        await self._close_many(idle, f"idle for {self.idle_timeout:g}s")

    async def close_all(self, reason: str) -> None:
        await self._close_many(list(self.forwards.values()), reason)

    async def reap_forever(self) -> None:
        while True:
            await anyio.sleep(REAP_INTERVAL)
            await self.close_disconnected()
            await self.close_idle()

    async def _close_many(self, forwards: list[Forward], reason: str) -> None:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for forward in forwards:
                    group.start_soon(self.close, forward, reason)

    async def _watch(self, forward: Forward) -> None:
        """A forward whose SSH connection is gone carries nothing any more: close it and say why."""
        with contextlib.suppress(Exception):
            await forward.tunnel.wait_lost()
        await self.close(forward, "the SSH connection was lost")


def end_fields(forward: Forward, reason: str) -> dict[str, Any]:
    """The `forward:end` audit record: which forward, what it carried, why it ended."""
    described = forward.describe()
    fields = {
        key: described[key]
        for key in (
            "forward_id",
            "spec",
            "listen",
            "destination",
            "bytes_to_destination",
            "bytes_from_destination",
            "connections",
            "failed_connections",
            "refused_connections",
        )
    }
    fields["target"] = {"host": forward.host, "via": forward.via}
    if "destinations" in described:
        fields["destinations"] = described["destinations"]
    if "refused_destinations" in described:  # each counted; only the first refusal of each was a record
        fields["refused_destinations"] = described["refused_destinations"]
    fields["reason"] = reason
    fields["duration_ms"] = int((time.monotonic() - forward.created) * 1000)
    return fields


# -- the tools ------------------------------------------------------------------------------------------------

# Admission of a SOCKS destination when a client names it: (subject, fields for a refusal record, whether a refusal
# is recorded) -> why refused.
AdmitLater = Callable[[Subject, dict[str, Any], bool], str | None]


def destination_names(ssh: Ssh, host: str, port: int) -> tuple[str, ...]:
    """Every spelling of a destination for policy, bare and with its port (`127.0.0.1:5432`, `[::1]:5432`)."""
    from relay_shell.ssh.target import reached_spellings

    names = reached_spellings(ssh.inventory, host)
    return (*names, *(host_port(name, port) for name in names))


def prepare_forward(
    ssh: Ssh,
    registry: ForwardRegistry,
    owner: str,
    client_id: str,
    admit_later: AdmitLater,
    *,
    host: str,
    spec: str,
    bind_address: str,
    connection: ConnectionArgs,
) -> Plan:
    """ssh_forward: validate, resolve the SSH route, let policy see both ends; execute opens the listener."""
    from relay_shell.ssh.commands import target_record
    from relay_shell.ssh.forward_io import open_tunnel

    parsed = parse_spec(spec)
    bind, loopback = parse_bind_address(bind_address)
    route = ssh.route(host, connection)
    side = "on the SSH host" if parsed.kind == "R" else "on this machine"
    notes: list[str] = []
    destination: tuple[str, ...] = ()
    if parsed.dest_host is not None and parsed.dest_port is not None:
        destination = destination_names(ssh, parsed.dest_host, parsed.dest_port)
    # An R listener is another host's way into this machine, its loopback included: whoever can connect to it
    # there (any user of the SSH host, anyone if its sshd has GatewayPorts=yes) reaches the destination from
    # here. So it is tier 2 whatever it binds, like a local listener other hosts can reach.
    exposed = parsed.kind == "R" or not loopback
    subject = Subject(
        hosts=(*route.spellings, *destination),
        unverified_host_key=connection.known_hosts == "ignore",
        fixed_tier=1,  # a listener until ssh_forward_close: a reversible change
        exposed_listener=f"{host_port(bind, parsed.listen_port)} ({side})" if exposed else None,
    )
    target = target_record(route)
    forward_id = registry.new_id()
    target["forward_id"] = forward_id
    target["spec"] = parsed.text()
    target["bind_address"] = bind
    target["destination"] = parsed.destination()

    def admit(dest_host: str, dest_port: int, traffic: Traffic) -> str | None:
        """A SOCKS destination: policy decides each time; a refusal is counted, and recorded only the first time
        for each destination (any local process can connect, so one record per connection would let it flood
        the audit log). The counts per destination go into the forward:end record."""
        where = host_port(dest_host, dest_port)
        fields = {
            "forward_id": forward_id,
            "destination": where,
            "target": {"host": host, "via": route.target.describe()},
            "note": "later refusals of this destination by this forward are counted in its forward:end record",
        }
        subject = Subject(hosts=destination_names(ssh, dest_host, dest_port), fixed_tier=0)
        refused = admit_later(subject, fields, traffic.records_refusal(where))
        if refused is not None:
            traffic.count_refusal(where)
        return refused

    async def execute(progress: ProgressFn) -> Execution:
        registry.reserve(owner)
        try:
            tunnel = await open_tunnel(
                ssh.pool, route, parsed, bind, ssh.settings.ssh_connect_timeout, admit, registry.budget
            )
        except BaseException:
            registry.unreserve(owner)
            raise
        forward = Forward(
            forward_id=forward_id,
            owner=owner,
            client_id=client_id,
            host=host,
            via=route.target.describe(),
            spec=parsed,
            tunnel=tunnel,
        )
        registry.add(forward)
        target["spec"] = parsed.text(tunnel.listen_port)
        target["listen"] = forward.listen()
        target["host_key"] = tunnel.host_key
        if tunnel.accepted_new_key:
            notes.append(f"host key {tunnel.host_key} was not known and is now trusted (accept-new)")
        if parsed.listen_port == 0:
            notes.append(f"listen port 0: the listener picked port {tunnel.listen_port}")
        if parsed.kind == "R" and not loopback:
            notes.append(
                "the SSH server decides where a remote listener binds: with sshd's default GatewayPorts=no it "
                "stays on the SSH host's loopback"
            )
        if parsed.kind == "D":
            reached = f"each SOCKS client names its destination, reached from {route.target.describe()}"
        elif parsed.kind == "L":
            reached = f"connections go to {parsed.destination()} from {route.target.describe()}"
        else:
            reached = f"connections go to {parsed.destination()} from this machine"
        lines = [f"listening on {forward.listen()} {side}; {reached}"]
        lines.append(f"close it with ssh_forward_close(forward_id={forward_id!r}); ssh_forward_list shows its traffic")
        capture = BoundedCapture(ssh.settings.max_output)
        capture.feed("\n".join(lines).encode())
        return Execution(
            status="ok",
            output=capture.result(),
            headline=f"[forward {forward_id} open | {parsed.text(tunnel.listen_port)} via {route.target.describe()}]",
            fields={"forward": forward.describe(), "forward_id": forward_id, "listen_port": tunnel.listen_port},
        )

    return Plan(subject=subject, execute=execute, notes=notes, target=target)


def prepare_forward_list(registry: ForwardRegistry, max_output: int, owner: str) -> Plan:
    async def execute(progress: ProgressFn) -> Execution:
        forwards = registry.owned_by(owner)
        capture = BoundedCapture(max_output)
        capture.feed("\n".join(forward.summary() for forward in forwards).encode())
        return Execution(
            status="ok",
            output=capture.result(),
            headline=f"[{len(forwards)} forward{'s' if len(forwards) != 1 else ''}]",
            fields={"forwards": [forward.describe() for forward in forwards]},
        )

    return Plan(subject=Subject(fixed_tier=0), execute=execute)


def prepare_forward_close(registry: ForwardRegistry, owner: str, *, forward_id: str) -> Plan:
    forward = registry.get(owner, forward_id.strip())

    async def execute(progress: ProgressFn) -> Execution:
        await registry.close(forward, "closed by ssh_forward_close")
        traffic = forward.tunnel.traffic
        return Execution(
            status="ok",
            output=BoundedCapture(1).result(),
            headline=(
                f"[closed {forward.forward_id} | {traffic.to_destination} B to / {traffic.from_destination} B from "
                f"the destination, {traffic.connections} connection{'s' if traffic.connections != 1 else ''}]"
            ),
            fields={"forward": forward.describe(), "forward_id": forward.forward_id},
        )

    target = {
        "host": forward.host,
        "via": forward.via,
        "forward_id": forward.forward_id,
        "spec": forward.spec.text(forward.tunnel.listen_port),
    }
    return Plan(subject=Subject(fixed_tier=1), execute=execute, target=target)
