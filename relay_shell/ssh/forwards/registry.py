"""Open port forwards: who owns which, the bound on how many are open, and when each closes. The spec is
parsed in `spec.py`, the three tools are planned in `plans.py`, and the bytes move in `io.py`.

A spec is `L:lport:dhost:dport` (a listener on this machine; each connection is carried over SSH and opened to
dhost:dport by the SSH host), `R:rport:dhost:dport` (a listener on the SSH host; each connection is carried back
and opened to dhost:dport from this machine) or `D:lport` (a SOCKS 4/5 listener on this machine; each client
names its destination). Port 0 lets the listener pick a free port; the result says which.

Policy sees the SSH host and the destination in all their spellings (`reached_spellings`), so a deny rule on
an address also refuses `2130706433` or `0x7f.1`; a SOCKS destination is known only when a client connects and
is admitted then, against the same rules (`Runner.admit_later`). A listener binds loopback unless `bind_address`
says otherwise, and a listener reachable from other hosts is tier 2 — every R listener is: it lets whoever
reaches it on the SSH host into this machine.

A forward belongs to the client connection that opened it (`identity.py`): only that client lists or
closes it, and it is closed when that client disconnects, when it has had no connection for
RELAY_SHELL_FORWARD_IDLE_TIMEOUT (owners of stateless HTTP requests never disconnect), when its SSH connection
is lost, and at shutdown. One client may hold at most half of RELAY_SHELL_MAX_FORWARDS, and the connections
all forwards carry at once are bounded by the process's file descriptors (`ConnectionBudget`).
This module imports no asyncssh: the server builds the registry at startup, the SSH side on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from relay_shell.errors import ToolError
from relay_shell.ssh.forwards.spec import ForwardSpec, host_port
from relay_shell.ssh.forwards.traffic import ConnectionBudget, Traffic, connection_budget

CLOSED_REMEMBERED = 4096  # ids of closed forwards kept to tell their owner why they closed
REAP_INTERVAL = 1.0  # seconds between checks for forwards whose client has gone or that are idle


# -- the spec ----------------------------------------------------------------------------------------------


# -- forwards and their owners ------------------------------------------------------------------------------


class Tunnel(Protocol):
    """The machinery of an open forward (io.Tunnel)."""

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
        an owner that never disconnects (stateless HTTP clients, identity.py) gets short of shutdown."""
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
