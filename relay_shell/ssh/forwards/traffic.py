"""What moved through a forward (`Traffic`, updated by forwards/connections.py on every chunk and connection), and the
bound on connections all forwards carry at once (`ConnectionBudget`). Imports no asyncssh.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field

MAX_REFUSED_DESTINATIONS = 32  # SOCKS: refusals are recorded and counted per destination for this many per forward
OTHER_DESTINATIONS = "others"  # the count of refusals beyond them (a destination is always host:port)


@dataclass
class Traffic:
    """What moved through one forward. forwards/connections.py updates it on every chunk and connection."""

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
