"""The bytes of a port forward: the listener, both ends of every forwarded connection, SOCKS, and counting.

A forwarded connection is a pair of ends (`_End`): the one that arrived at the listener (a socket on this
machine for L and D, an SSH channel for R) and the one opened toward the destination (an SSH channel for L and
D, a socket on this machine for R). Both are driven by callbacks — asyncio's protocol for a socket, asyncssh's
SSHTCPSession for a channel, which share their method names — with no task per connection: the bytes read on
one end are counted and written to the other at once. Flow control runs end to end: when one end's write
buffer fills, the other end stops reading (an SSH channel then stops granting window to the far side), so a
slow reader never makes this process buffer without bound. What a socket reads before the channel for it is
open (a client that speaks at once, a destination that greets) is kept, up to EARLY_BYTES (reading then stops),
and passed on first once the channel is open. Connections are bounded per forward and, since each holds a file
descriptor, for all forwards together (`ConnectionBudget`); one beyond either bound is closed at once and counted
as refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

import anyio
import asyncssh

from relay_shell.errors import ToolError
from relay_shell.ssh.forwards.spec import HOST_NAME, ForwardSpec, host_port
from relay_shell.ssh.forwards.traffic import ConnectionBudget, Traffic
from relay_shell.ssh.pool import PooledConnection, SshPool
from relay_shell.ssh.target import Route, canonical_host

MAX_OPEN_CONNECTIONS = 256  # carried at once by one forward; more are refused (and counted) until some end
# Read on one end before the other is open, then reading stops: a request or a greeting fits, and a connection
# waiting for its channel holds at most this plus one read (asyncio reads up to 256 KiB at a time).
EARLY_BYTES = 64 * 1024
MAX_DESTINATIONS_KEPT = 64  # distinct SOCKS destinations listed per forward
SOCKS_HANDSHAKE_BYTES = 1024  # a SOCKS request is at most 262 bytes (SOCKS4a: user id and name)
SOCKS_HANDSHAKE_TIMEOUT = 10.0
LOCAL_CONNECT_TIMEOUT = 10.0  # R: opening the destination socket on this machine
REMOTE_CLOSE_TIMEOUT = 2.0  # R: the SSH host confirming that its listener is gone

# A SOCKS destination (host, port, the forward's traffic, where a refusal is counted) -> why it is refused, or None
Admit = Callable[[str, int, Traffic], str | None]

# SOCKS5 reply codes (RFC 1928)
SOCKS_OK, SOCKS_FAILURE, SOCKS_NOT_ALLOWED, SOCKS_UNREACHABLE, SOCKS_REFUSED = 0, 1, 2, 4, 5
SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 7, 8


class _Stream(Protocol):
    """What a socket transport and an SSH channel both offer."""

    def write(self, data: bytes) -> None: ...

    def write_eof(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class _Link:
    """One forwarded connection: both its ends; open until either end goes away."""

    def __init__(self, tunnel: Tunnel) -> None:
        self.tunnel = tunnel
        self.traffic = tunnel.traffic
        self.ends: list[_End] = []
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


class _End(asyncio.BaseProtocol):
    """One end of a forwarded connection: an asyncio protocol for a socket, an SSHTCPSession for a channel."""

    def __init__(self, link: _Link, toward_destination: bool, peer: _End | None = None) -> None:
        self.link = link
        self.toward_destination = toward_destination  # the bytes read on this end travel to the destination
        self.stream: _Stream | None = None
        self.peer = peer
        self.waiting = False  # the peer end is not open yet: what this end reads is kept in `early`
        self.early = bytearray()
        self.early_eof = False  # the EOF came while waiting: passed on after `early`
        self.eof = False
        if peer is not None:
            peer.peer = self
        link.ends.append(self)

    def connection_made(self, transport: Any) -> None:
        self.stream = cast(_Stream, transport)
        if self.link.closed:
            self.stream.close()
        elif self.peer is None or self.peer.stream is None:
            # Reading stays on, into `early`: pausing here is not enough, since asyncio without the fix of
            # python/cpython#103607 (Debian 12's 3.11.2) starts reading right after connection_made even if paused.
            self.waiting = True
        elif self.peer.waiting:
            self.peer.flush()

    def session_started(self) -> None:
        """asyncssh: the channel is ready (nothing to do: connection_made did it)."""

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
        if self.peer is not None and self.peer.stream is not None:
            self.peer.stream.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.stream is not None:
            self.peer.stream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stream = None
        self.link.close()


class _LocalClient(_End):
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


class _SocksClient(_End):
    """D: a SOCKS 4, 4a or 5 client of the listener on this machine (CONNECT, no authentication). The handshake
    names the destination; it is admitted by policy, the channel opened, the reply sent, and from then on this
    is an end like any other."""

    def __init__(self, link: _Link) -> None:
        super().__init__(link, toward_destination=True)
        self.handshake = bytearray()
        self.version = 0
        self.greeted = False  # SOCKS5: the method negotiation is done
        self.relaying = False  # the reply is out: bytes flow both ways
        self.held: list[bytes] = []  # from the destination before the reply went out
        self.held_eof = False
        self.timer: asyncio.TimerHandle | None = None
        self.peername: Any = None

    def connection_made(self, transport: Any) -> None:
        self.stream = cast(_Stream, transport)  # reading stays on: the handshake comes first
        self.peername = transport.get_extra_info("peername")
        self.timer = asyncio.get_running_loop().call_later(SOCKS_HANDSHAKE_TIMEOUT, self.link.close)

    def data_received(self, data: bytes, datatype: object = None) -> None:
        if self.relaying:
            super().data_received(data)
            return
        self.handshake += data
        self._advance()
        # Bounded while incomplete only: what a client sends right after its request (in the same read) is not
        # handshake; _begin took it out and stopped reading.
        if len(self.handshake) > SOCKS_HANDSHAKE_BYTES:
            self.link.close()

    def write(self, data: bytes) -> None:
        if self.relaying:
            super().write(data)
        else:
            self.held.append(data)

    def write_eof(self) -> None:
        if self.relaying:
            super().write_eof()
        else:
            self.held_eof = True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        super().connection_lost(exc)

    def _advance(self) -> None:
        """Parse as much of the handshake as has arrived; wait for more when it is incomplete."""
        buffer = self.handshake
        if not buffer:
            return
        self.version = buffer[0]
        if self.version == 5 and not self.greeted:
            if len(buffer) < 2 or len(buffer) < 2 + buffer[1]:
                return
            methods = buffer[2 : 2 + buffer[1]]
            del buffer[: 2 + buffer[1]]
            if 0 not in methods:  # only "no authentication": the listener is loopback (or a tier-2 choice)
                self._send(b"\x05\xff")
                self.link.close()
                return
            self._send(b"\x05\x00")
            self.greeted = True
            if buffer:
                self._advance()
        elif self.version == 5:
            self._request5(buffer)
        elif self.version == 4:
            self._request4(buffer)
        else:
            self.link.close()

    def _request5(self, buffer: bytearray) -> None:
        if len(buffer) < 5:
            return
        command, address_type = buffer[1], buffer[3]
        if address_type == 1:
            end = 4 + 4
        elif address_type == 3:
            end = 5 + buffer[4]
        elif address_type == 4:
            end = 4 + 16
        else:
            self._fail(SOCKS_BAD_ADDRESS)
            return
        if len(buffer) < end + 2:
            return
        if buffer[0] != 5 or command != 1:  # CONNECT only (no BIND, no UDP)
            self._fail(SOCKS_BAD_COMMAND)
            return
        if address_type == 1:
            host = str(ipaddress.IPv4Address(bytes(buffer[4:8])))
        elif address_type == 4:
            host = str(ipaddress.IPv6Address(bytes(buffer[4:20])))
        else:
            host = bytes(buffer[5:end]).decode("ascii", errors="replace")
        port = int.from_bytes(buffer[end : end + 2], "big")
        self._begin(host, port, end + 2)

    def _request4(self, buffer: bytearray) -> None:
        user_end = buffer.find(0, 8)
        if len(buffer) < 9 or user_end < 0:
            return
        if buffer[1] != 1:
            self._fail(SOCKS_BAD_COMMAND)
            return
        port = int.from_bytes(buffer[2:4], "big")
        address = bytes(buffer[4:8])
        consumed = user_end + 1
        if address[:3] == b"\x00\x00\x00" and address[3] != 0:  # SOCKS4a: a name follows the user id
            name_end = buffer.find(0, consumed)
            if name_end < 0:
                return
            host = bytes(buffer[consumed:name_end]).decode("ascii", errors="replace")
            consumed = name_end + 1
        else:
            host = str(ipaddress.IPv4Address(address))
        self._begin(host, port, consumed)

    def _begin(self, host: str, port: int, consumed: int) -> None:
        leftover = bytes(self.handshake[consumed:])
        self.handshake.clear()
        if self.timer is not None:
            self.timer.cancel()
        assert self.stream is not None
        self.stream.pause_reading()
        self.link.tunnel.spawn(self._connect(host, port, leftover))

    async def _connect(self, host: str, port: int, leftover: bytes) -> None:
        tunnel = self.link.tunnel
        if (not HOST_NAME.fullmatch(host) and _ipv6(host) is None) or port == 0:
            self.link.traffic.failed += 1
            self._fail(SOCKS_UNREACHABLE)
            return
        host = canonical_host(host)  # what policy sees is what is dialed
        if tunnel.admit(host, port, self.link.traffic) is not None:  # counted there, per destination
            self._fail(SOCKS_NOT_ALLOWED)
            return
        destinations = self.link.traffic.destinations
        if len(destinations) < MAX_DESTINATIONS_KEPT:
            destinations[host_port(host, port)] = None
        try:
            await tunnel.open_channel(self, host, port, self.peername)
        except asyncssh.ChannelOpenError as exc:
            self.link.traffic.failed += 1
            self._fail(SOCKS_NOT_ALLOWED if exc.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED else SOCKS_REFUSED)
            return
        except (asyncssh.Error, OSError):
            self.link.traffic.failed += 1
            self._fail(SOCKS_FAILURE)
            return
        if self.stream is None or self.link.closed:
            return
        self._reply(SOCKS_OK)
        self.relaying = True
        for chunk in self.held:
            self.stream.write(chunk)
        self.held.clear()
        if leftover:
            self.data_received(leftover)  # sent right after the request: counted and carried like the rest
        if self.held_eof:
            self.write_eof()
        self.stream.resume_reading()

    def _reply(self, code: int) -> None:
        if self.version == 5:
            self._send(bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))
        else:
            self._send(bytes([0, 0x5A if code == SOCKS_OK else 0x5B, 0, 0, 0, 0, 0, 0]))

    def _fail(self, code: int) -> None:
        self._reply(code)
        self.link.close()

    def _send(self, data: bytes) -> None:
        if self.stream is not None:
            self.stream.write(data)


class _Refused(asyncio.Protocol):
    """A connection beyond the bound on open connections (this forward's, or all forwards' together): closed at
    once, counted. Its descriptor is held only for that moment."""

    def __init__(self, traffic: Traffic) -> None:
        self.traffic = traffic

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.traffic.connections += 1
        self.traffic.refused += 1
        self.traffic.last_active = time.monotonic()  # a client tried to use it: not idle
        transport.close()


def _ipv6(host: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(host)
    except ValueError:
        return None


class Tunnel:
    """An open forward: its listener, the connections it carries, and the pooled SSH connection it rides on."""

    def __init__(
        self,
        pool: SshPool,
        pooled: PooledConnection,
        spec: ForwardSpec,
        admit: Admit,
        where: str,
        budget: ConnectionBudget,
    ) -> None:
        self.pool = pool
        self.budget = budget
        self.pooled = pooled
        self.ssh = pooled.connection
        self.spec = spec
        self.admit = admit
        self.where = where  # the SSH host, for messages
        self.traffic = Traffic()
        self.host_key = pooled.host_key
        self.accepted_new_key = pooled.decision.announce_new_key()
        self.listen_host = ""
        self.listen_port = 0
        self.links: set[_Link] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None
        self.remote: asyncssh.SSHListener | None = None
        self.closed = False

    async def listen(self, bind: str, timeout: float) -> None:
        port = self.spec.listen_port
        if self.spec.kind == "R":
            try:
                self.remote = await asyncio.wait_for(self.ssh.create_server(self._accept_remote, bind, port), timeout)
            except asyncssh.ChannelListenError:
                raise ToolError(
                    "ListenFailed",
                    f"{self.where} refused to listen on {host_port(bind, port)}: the port is in use there, or its "
                    "sshd does not allow remote forwarding (AllowTcpForwarding); try another port, or 0 for a free one",
                ) from None
            except TimeoutError:
                raise ToolError(
                    "ServerNotResponding", f"{self.where} did not answer the request to listen within {timeout:g}s"
                ) from None
            except (asyncssh.Error, ConnectionError) as exc:
                raise ToolError("ConnectionLost", f"{self.where}: {exc}") from None
            self.listen_port = self.remote.get_port()
        else:
            accept = self._accept_socks if self.spec.kind == "D" else self._accept_local
            try:
                self.server = await asyncio.get_running_loop().create_server(accept, bind, port)
            except OSError as exc:
                raise ToolError(
                    "ListenFailed",
                    f"cannot listen on {host_port(bind, port)} on this machine: {exc.strerror or exc}; try another "
                    "port, or 0 for a free one",
                ) from None
            if not self.server.sockets:
                # asyncio skips an address whose socket() fails, EMFILE included, and returns a server with no
                # socket at all: out of file descriptors, most likely.
                self.server.close()
                self.server = None
                raise ToolError(
                    "ListenFailed",
                    f"cannot listen on {host_port(bind, port)} on this machine: no socket could be opened (the "
                    "process may be out of file descriptors); close forwards or connections you no longer need",
                )
            self.listen_port = self.server.sockets[0].getsockname()[1]
        self.listen_host = bind

    def _full(self) -> bool:
        return self.closed or len(self.links) >= MAX_OPEN_CONNECTIONS or self.budget.full()

    def _accept_local(self) -> asyncio.BaseProtocol:
        if self._full():
            return _Refused(self.traffic)
        return _LocalClient(_Link(self), toward_destination=True)

    def _accept_socks(self) -> asyncio.BaseProtocol:
        if self._full():
            return _Refused(self.traffic)
        return _SocksClient(_Link(self))

    async def _accept_remote(self, orig_host: str, orig_port: int) -> asyncssh.SSHTCPSession[bytes]:
        """R: the SSH host accepted a connection on its listener; open the destination here and pair them."""
        if self._full():
            self.traffic.connections += 1
            self.traffic.refused += 1
            self.traffic.last_active = time.monotonic()
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_RESOURCE_SHORTAGE, "too many forwarded connections")
        assert self.spec.dest_host is not None and self.spec.dest_port is not None
        link = _Link(self)
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: _End(link, toward_destination=False), self.spec.dest_host, self.spec.dest_port
                ),
                LOCAL_CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            self.traffic.failed += 1
            link.close()
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(exc) or "timed out") from None
        if link.closed:  # the forward closed meanwhile
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "the forward is closed")
        return cast(asyncssh.SSHTCPSession[bytes], _End(link, toward_destination=True, peer=link.ends[0]))

    async def open_channel(self, client: _End, host: str, port: int, peername: Any) -> None:
        """L and D: the SSH channel that carries a local client's connection to host:port."""
        orig_host, orig_port = (str(peername[0]), int(peername[1])) if peername else ("", 0)

        def channel_end() -> asyncssh.SSHTCPSession[bytes]:
            return cast(asyncssh.SSHTCPSession[bytes], _End(client.link, toward_destination=False, peer=client))

        await self.ssh.create_connection(channel_end, host, port, orig_host, orig_port)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        if self.closed:
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        """Stop listening, end every connection, and let the pool have the SSH connection back."""
        if self.closed:
            return
        self.closed = True
        if self.server is not None:
            self.server.close()  # the listening socket is closed here and now
        for task in list(self.tasks):
            task.cancel()
        for link in list(self.links):
            link.close()
        if self.remote is not None and not self.pooled.closed:  # a lost connection took its listener with it
            self.remote.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.remote.wait_closed(), REMOTE_CLOSE_TIMEOUT)
        self.pool.unhold(self.pooled)

    async def wait_lost(self) -> None:
        """Returns when the SSH connection is gone (the server went away, keepalives failed, the pool closed)."""
        await self.ssh.wait_closed()


async def open_tunnel(
    pool: SshPool,
    route: Route,
    spec: ForwardSpec,
    bind: str,
    connect_timeout: float,
    admit: Admit,
    budget: ConnectionBudget,
) -> Tunnel:
    """Connect (or reuse a pooled connection) and start listening. Failures raise ToolError by kind."""
    try:
        pooled = await pool.acquire(route, connect_timeout * (1 + len(route.jumps)))
    except TimeoutError:
        raise ToolError("ConnectTimeout", f"{route.target.describe()}: no connection in time") from None
    # Held before the reserved channel goes back: the connection is never idle (reapable) in between.
    pool.hold(pooled)
    pool.release(pooled)
    tunnel = Tunnel(pool, pooled, spec, admit, route.target.describe(), budget)
    try:
        await tunnel.listen(bind, connect_timeout)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await tunnel.close()
        raise
    return tunnel
