"""One forwarded connection: its two ends, the bytes carried between them, and counting.

A forwarded connection is a pair of ends (`End`): the one that arrived at the listener (a socket on this
machine for L and D, an SSH channel for R) and the one opened toward the destination (an SSH channel for L and
D, a socket on this machine for R). Both are driven by callbacks — asyncio's protocol for a socket, asyncssh's
SSHTCPSession for a channel, which share their method names — with no task per connection: the bytes read on
one end are counted and written to the other at once. Flow control runs end to end: when one end's write
buffer fills, the other end stops reading (an SSH channel then stops granting window to the far side), so a
slow reader never makes this process buffer without bound; a channel that reads again hands over all it held
before it may stop again (`End.let_go`: asyncssh credits the far side as if it had), so it never holds more than
the window it granted. What a socket reads before the channel for it is open (a client that speaks at once, a
destination that greets) is kept, up to EARLY_BYTES (reading then stops), and passed on first once the channel
is open. A connection beyond the forward's bounds is `Refused`: closed at once and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

import asyncssh

from relay_shell.ssh.forwards.spec import ForwardSpec
from relay_shell.ssh.forwards.traffic import ConnectionBudget, Traffic

# Read on one end before the other is open, then reading stops: a request or a greeting fits, and a connection
# waiting for its channel holds at most this plus one read (asyncio reads up to 256 KiB at a time).
EARLY_BYTES = 64 * 1024

# A SOCKS destination (host, port, the forward's traffic, where a refusal is counted) -> why it is refused, or None
Admit = Callable[[str, int, Traffic], str | None]


class Forward(Protocol):
    """What the connections of a forward need of it (forwards/tunnel.py `Tunnel`): the bounds they count in, where
    a client's channel goes, and a task for work that waits."""

    spec: ForwardSpec
    traffic: Traffic
    budget: ConnectionBudget
    links: set[Link]
    admit: Admit

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...

    async def open_channel(self, client: End, host: str, port: int, peername: Any) -> None: ...


class Stream(Protocol):
    """What a socket transport and an SSH channel both offer."""

    def write(self, data: bytes) -> None: ...

    def write_eof(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class Link:
    """One forwarded connection: both its ends; open until either end goes away."""

    def __init__(self, tunnel: Forward) -> None:
        self.tunnel = tunnel
        self.traffic = tunnel.traffic
        self.ends: list[End] = []
        self.closed = False
        tunnel.links.add(self)
        tunnel.budget.open += 1
        self.traffic.connections += 1
        self.traffic.open += 1
        self.traffic.last_active = time.monotonic()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.tunnel.links.discard(self)
        self.tunnel.budget.open -= 1
        self.traffic.open -= 1
        self.traffic.last_active = time.monotonic()
        for end in self.ends:
            if end.stream is not None:
                end.stream.close()  # a socket sends what is already buffered, then closes


class End(asyncio.BaseProtocol):
    """One end of a forwarded connection: an asyncio protocol for a socket, an SSHTCPSession for a channel."""

    def __init__(self, link: Link, toward_destination: bool, peer: End | None = None) -> None:
        self.link = link
        self.toward_destination = toward_destination  # the bytes read on this end travel to the destination
        self.stream: Stream | None = None
        self.peer = peer
        self.waiting = False  # the peer end is not open yet: what this end reads is kept in `early`
        self.early = bytearray()
        self.early_eof = False  # the EOF came while waiting: passed on after `early`
        self.eof = False
        self.held_back = False  # the peer's write buffer is full: this end must not read
        self.resuming = False  # inside let_go: a pause asked for now waits until it returns
        if peer is not None:
            peer.peer = self
        link.ends.append(self)

    def connection_made(self, transport: Any) -> None:
        self.stream = cast(Stream, transport)
        if self.link.closed:
            self.stream.close()
        elif self.peer is None or self.peer.stream is None:
            # Reading stays on, into `early`: pausing here is not enough, since asyncio without the fix of
            # python/cpython#103607 (Debian 12's 3.11.2) starts reading right after connection_made even if paused.
            self.waiting = True
        elif self.peer.waiting:
            self.peer.flush()

    def session_started(self) -> None:
        """asyncssh: the channel is ready. What it received before now is handed over by `let_go` too, not by
        asyncssh's own start of reading, which a full peer could pause midway after crediting a whole window."""
        if self.stream is not None:
            self.stream.pause_reading()
            asyncio.get_running_loop().call_soon(self._start_reading)

    def _start_reading(self) -> None:
        if not self.held_back:  # else the peer's resume_writing lets go
            self.let_go()

    def data_received(self, data: bytes, datatype: object = None) -> None:
        if self.waiting:
            self.early += data
            if len(self.early) >= EARLY_BYTES and self.stream is not None:
                self.stream.pause_reading()  # the rest waits in the kernel until the peer is open
            return
        self.carry(data)

    def carry(self, data: bytes) -> None:
        """Count bytes read on this end and write them to the other: counted once, when carried."""
        if self.toward_destination:
            self.link.traffic.to_destination += len(data)
        else:
            self.link.traffic.from_destination += len(data)
        if self.peer is not None:
            self.peer.write(data)

    def flush(self) -> None:
        """The peer end is open: what this end read meanwhile goes first, then its EOF or more reading."""
        self.waiting = False
        if self.stream is None or self.peer is None:
            return
        if not self.early_eof:
            # Before the write: a socket's resume only re-arms its reader, and a peer whose buffer the write fills
            # pauses this end again (pause_writing), which must not be undone.
            self.stream.resume_reading()
        if self.early:
            early = bytes(self.early)
            self.early.clear()
            self.carry(early)
        if self.early_eof:
            self.peer.write_eof()

    def write(self, data: bytes) -> None:
        if self.stream is not None:
            self.stream.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        if self.waiting:
            self.early_eof = True
            return True  # open for the answer, which the peer brings once it is open
        if self.peer is None:
            return False
        self.peer.write_eof()
        return not self.peer.eof  # half-closed stays open until both directions are done

    def write_eof(self) -> None:
        if self.stream is not None:
            with contextlib.suppress(OSError, asyncssh.Error):
                self.stream.write_eof()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.hold_back()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.let_go()

    def hold_back(self) -> None:
        """The peer's write buffer is full: stop reading here — at once, or, inside `let_go`, once that is done."""
        self.held_back = True
        if not self.resuming and self.stream is not None:
            self.stream.pause_reading()

    def let_go(self) -> None:
        """The peer's write buffer has drained: read here again. A channel hands over everything it held, in this
        call, before a pause asked for meanwhile takes effect: asyncssh (2.24) credits the far side with a whole
        window whenever it delivers held data, counting none it still holds, so a pause in the middle of that let
        the sender add a window per resume that nobody had read (the channel grew without bound, ADR 0029 Round
        5). Emptied each time, the channel holds at most the window it granted, and the peer's socket buffer one
        window beyond its high-water mark. A socket's resume only re-arms its reader: the same either way."""
        self.held_back = False
        if self.stream is None:
            return
        self.resuming = True
        try:
            self.stream.resume_reading()
        finally:
            self.resuming = False
        if self.held_back and self.stream is not None:
            self.stream.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stream = None
        self.link.close()


class LocalClient(End):
    """L: a connection to the listener on this machine, carried over an SSH channel to the fixed destination."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # waiting: the channel is not open yet
        if self.link.closed:
            return
        spec = self.link.tunnel.spec
        assert spec.dest_host is not None and spec.dest_port is not None
        self.link.tunnel.spawn(self._connect(spec.dest_host, spec.dest_port, transport.get_extra_info("peername")))

    async def _connect(self, host: str, port: int, peername: Any) -> None:
        try:
            await self.link.tunnel.open_channel(self, host, port, peername)
        except (asyncssh.ChannelOpenError, asyncssh.Error, OSError):
            self.link.traffic.failed += 1
            self.link.close()


class Refused(asyncio.Protocol):
    """A connection beyond the bound on open connections (this forward's, or all forwards' together): closed at
    once, counted. Its descriptor is held only for that moment."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.traffic.connections += 1
        self.traffic.refused += 1
        self.traffic.last_active = time.monotonic()  # a client tried to use it: not idle
        transport.close()
