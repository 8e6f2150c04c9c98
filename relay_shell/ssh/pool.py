"""The SSH connection pool: one connection per full identity, reused across calls.

The identity is everything that decides what a connection is allowed to be used for: address, port, user,
key, host-key mode and known_hosts files, and the same for every jump host in front of it. A connection
made under `ignore` is never handed to a call that asked for `strict`, nor one authenticated with another
key. Each connection carries at most `max_channels` channels at once (OpenSSH's MaxSessions is 10 by
default; a server that refuses earlier lowers that connection's limit); when every connection for an
identity is full, another one is dialed. Concurrent calls for an identity with no free connection share
one dial. Connections idle longer than `idle_timeout` are closed by the reaper; keepalives notice dead
peers. A connection that carries a port forward (`hold`) is not idle: it stays open until the forward closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncssh

from relay_shell.errors import ToolError
from relay_shell.ssh.target import Endpoint, Route
from relay_shell.ssh.trust import TrustDecision, check_unmatched_key, trusted_keys

logger = logging.getLogger("relay_shell")

Identity = tuple[Endpoint, ...]  # jump hosts first, the target last
# asyncssh's default cipher list with AES-GCM ahead of chacha20-poly1305: with AES-NI (every x86 server of the
# last decade) AES-GCM is one C call per packet, where asyncssh's chacha20 builds four cipher contexts in Python;
# bulk transfers ran ~1.5x faster (ADR 0012). A server without AES-GCM still negotiates the others.
ENCRYPTION_ALGS = (
    "aes256-gcm@openssh.com",
    "aes128-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)


class ConnectFailed(ToolError):
    """A connection could not be made; `status` is the fan-out status it maps to."""

    def __init__(self, kind: str, status: str, message: str) -> None:
        super().__init__(kind, message)
        self.status = status


class _Client(asyncssh.SSHClient):
    def __init__(
        self,
        endpoint: Endpoint,
        decision: TrustDecision,
        pooled: list[PooledConnection],
        on_helper: Callable[[int], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.decision = decision
        self.pooled = pooled  # filled once connected, so a lost connection leaves the pool at once
        self.on_helper = on_helper

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        """Called as soon as the transport is up: with a ProxyCommand, right after its process started. It is
        the server's own helper, not a call's: `on_helper` tells the containment (adr/0015), which otherwise
        could not tell it from a process that left its unit (both sit outside every unit, children of the
        server, with or without a marker)."""
        popen = conn.get_extra_info("subprocess")  # asyncio's subprocess transport: the ProxyCommand's Popen
        if self.on_helper is not None and popen is not None:
            self.on_helper(popen.pid)

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        endpoint = self.endpoint
        return check_unmatched_key(
            endpoint.known_hosts_mode,
            endpoint.known_hosts_files,
            endpoint.spellings,
            host,
            addr,
            port,
            key,
            self.decision,
        )

    def connection_lost(self, exc: Exception | None) -> None:
        for connection in self.pooled:
            connection.closed = True


@dataclass(eq=False)
class PooledConnection:
    identity: Identity
    connection: asyncssh.SSHClientConnection
    decision: TrustDecision
    limit: int
    in_use: int = 0  # channels reserved by callers
    channels_open: int = 0  # channels the server actually opened for them
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False
    forgotten: bool = False  # removed from the pool (and its jump connection's channel given back)
    tunnel: PooledConnection | None = None  # the jump connection this one runs through
    forwards: int = 0  # port forwards riding on it: while > 0 it is never reaped, evicted or retired
    streams_files: bool = True  # False once its host would not run `scp -f` (transfers/scp_stream.py)
    # The fingerprint of the host key it was computed from: a warm fan-out asks once per host per call, and
    # hashing and encoding the key each time cost ~1 % of the server's CPU there (ADR 0029 Round 6).
    fingerprinted: tuple[asyncssh.SSHKey, str] | None = None

    @property
    def host_key(self) -> str | None:
        key = self.connection.get_server_host_key()
        if key is None:
            return self.decision.host_key
        if self.fingerprinted is None or self.fingerprinted[0] is not key:  # a key exchange may bring another
            self.fingerprinted = (key, key.get_fingerprint("sha256"))
        return self.fingerprinted[1]


class SshPool:
    def __init__(
        self,
        *,
        max_connections: int,
        max_channels: int,
        idle_timeout: float,
        connect_timeout: float,
        keepalive: float,
        on_helper: Callable[[int], None] | None = None,
        helper_argv: Callable[[list[str]], list[str]] = list,
    ) -> None:
        self.on_helper = on_helper  # told the pid of every ProxyCommand started (the containment's helpers)
        self.helper_argv = helper_argv  # a ProxyCommand's command line as started (readonly: confined, adr/0024)
        self.max_connections = max_connections
        self.max_channels = max_channels
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.connections: dict[Identity, list[PooledConnection]] = {}
        self.dialing: dict[Identity, asyncio.Task[None]] = {}
        self.released = asyncio.Event()  # set (and replaced) whenever a channel is given back

    def count(self) -> int:
        return sum(len(items) for items in self.connections.values())

    async def acquire(self, route: Route, timeout: float) -> PooledConnection:
        """A connection for the route with one channel reserved for the caller; `release` gives it back."""
        identity = (*route.jumps, route.target)
        # A free channel is taken at once: no task and no timer for the wait that a warm call never has.
        connection = self._take_free(identity)
        if connection is not None:
            return connection
        return await asyncio.wait_for(self._acquire(identity), timeout)

    def release(self, connection: PooledConnection) -> None:
        connection.in_use -= 1
        connection.last_used = time.monotonic()
        if connection.limit == 0 and connection.in_use == 0 and connection.forwards == 0 and not connection.closed:
            self._close(connection)  # retired: it refuses every channel
        self.released.set()
        self.released = asyncio.Event()

    def reserve(self, connection: PooledConnection) -> bool:
        """One more channel on a connection the caller already holds one on, if it has one free (no dial, no
        wait); `release` gives it back."""
        if connection.closed or connection.in_use >= connection.limit:
            return False
        connection.in_use += 1
        connection.last_used = time.monotonic()
        return True

    def hold(self, connection: PooledConnection) -> None:
        """A port forward rides on this connection (take it with `acquire`, hold it, then `release` the channel:
        a forward's own channels are TCP channels, which sshd's MaxSessions does not count)."""
        connection.forwards += 1

    def unhold(self, connection: PooledConnection) -> None:
        """The forward is closed; the connection is idle again (the reaper closes it after the idle timeout)."""
        connection.forwards -= 1
        connection.last_used = time.monotonic()
        if connection.limit == 0 and connection.in_use == 0 and connection.forwards == 0 and not connection.closed:
            self._close(connection)

    def channel_refused(self, connection: PooledConnection) -> None:
        """The server refused a channel below our limit: its MaxSessions is lower, or sessions are still held
        by processes that have not exited. Lower this connection's limit to what it holds; at 0 it is retired
        (closed once its callers are done) and the next caller dials a fresh connection."""
        connection.limit = connection.channels_open

    async def _acquire(self, identity: Identity, for_tunnel: bool = False) -> PooledConnection:
        """`for_tunnel`: the jump connection a dial in progress needs. It may exceed the cap (by the length of
        the chain): that dial already holds a slot, and waiting for another would deadlock a full pool."""
        while True:
            connection = self._take_free(identity)
            if connection is not None:
                return connection
            live = self._live(identity)
            dial = self.dialing.get(identity)
            if dial is None:
                full = self.count() + len(self.dialing) >= self.max_connections
                if full and not for_tunnel and not self._evict_idle():
                    await self.released.wait()  # everything is busy: wait for a release
                    continue
                dial = asyncio.get_running_loop().create_task(self._dial_into_pool(identity))
                dial.add_done_callback(_retrieve)
                self.dialing[identity] = dial
            try:
                # Everyone who needs this identity waits for the same attempt; a caller giving up (its own
                # timeout) does not cancel it for the others.
                await asyncio.shield(dial)
            except ConnectFailed:
                if not live:
                    raise  # one attempt, one answer for everyone waiting on it
                await self.released.wait()  # an extra connection failed: wait for a channel on the others

    def _take_free(self, identity: Identity) -> PooledConnection | None:
        """A live connection for the identity with a channel free, that channel reserved; None if there is none."""
        free = [connection for connection in self._live(identity) if connection.in_use < connection.limit]
        if not free:
            return None
        connection = max(free, key=lambda item: item.in_use)  # fill one connection before the next
        connection.in_use += 1
        connection.last_used = time.monotonic()
        return connection

    async def _dial_into_pool(self, identity: Identity) -> None:
        try:
            # Bounded even if a jump connection has to wait for room in the pool.
            limit = self.connect_timeout * len(identity) + 1
            try:
                connection = await asyncio.wait_for(self._dial(identity), limit)
            except TimeoutError:
                raise ConnectFailed(
                    "ConnectTimeout", "unreachable", f"{identity[-1].describe()}: no connection within {limit:g}s"
                ) from None
        finally:
            self.dialing.pop(identity, None)
        self.connections.setdefault(identity, []).append(connection)

    def _live(self, identity: Identity) -> list[PooledConnection]:
        items = self.connections.get(identity)
        if not items:
            return []
        live = [connection for connection in items if not connection.closed]
        for connection in items:
            if connection.closed and not connection.forgotten:
                connection.forgotten = True
                if connection.tunnel is not None:
                    connection.tunnel.in_use -= 1
                    connection.tunnel.last_used = time.monotonic()
        if len(live) != len(items):
            if live:
                self.connections[identity] = live
            else:
                del self.connections[identity]
        return live

    def _evict_idle(self) -> bool:
        """Close the least recently used idle connection to make room; False if none is idle."""
        idle = [
            connection
            for items in self.connections.values()
            for connection in items
            if connection.in_use == 0 and connection.forwards == 0 and not connection.closed
        ]
        if not idle:
            return False
        self._close(min(idle, key=lambda connection: connection.last_used))
        return True

    async def _dial(self, identity: Identity) -> PooledConnection:
        endpoint = identity[-1]
        tunnel: PooledConnection | None = None
        if len(identity) > 1:
            # The jump connection carries this one's TCP stream.
            tunnel = await self._acquire(identity[:-1], for_tunnel=True)
        decision = TrustDecision()
        holder: list[PooledConnection] = []
        options: dict[str, object] = {
            "port": endpoint.port,
            "username": endpoint.user,
            "config": None,  # ssh_config was applied when the route was resolved; do not apply it twice
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive,
            "keepalive_count_max": 3,
            "encryption_algs": ENCRYPTION_ALGS,
            "client_factory": lambda: _Client(endpoint, decision, holder, self.on_helper),
            "known_hosts": None if endpoint.known_hosts_mode == "ignore" else trusted_keys(endpoint.known_hosts_files),
        }
        if endpoint.key_path is not None:
            options["client_keys"] = [endpoint.key_path]
        if tunnel is not None:
            options["tunnel"] = tunnel.connection
        elif endpoint.proxy_command:
            options["proxy_command"] = self.helper_argv(shlex.split(endpoint.proxy_command))  # as asyncssh splits it
        try:
            connection = await asyncssh.connect(endpoint.address, **options)
        except BaseException as exc:
            if tunnel is not None:
                self.release(tunnel)
            if isinstance(exc, Exception):
                raise connect_error(endpoint, exc, decision) from None
            raise
        pooled = PooledConnection(
            identity=identity, connection=connection, decision=decision, limit=self.max_channels, tunnel=tunnel
        )
        holder.append(pooled)
        return pooled

    def discard(self, connection: PooledConnection) -> None:
        """Drop a connection that stopped answering; its callers still release their channels."""
        connection.closed = True
        connection.connection.abort()
        self._live(connection.identity)

    def _close(self, connection: PooledConnection) -> None:
        connection.closed = True
        connection.connection.close()
        self._live(connection.identity)

    async def reap_forever(self) -> None:
        """Close connections idle longer than the idle timeout, on a schedule of its own."""
        interval = max(0.5, min(30.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            self.reap()

    def reap(self) -> None:
        now = time.monotonic()
        # Tunneled connections first, so their jump connections become idle in the same pass.
        everything = sorted(
            (connection for items in list(self.connections.values()) for connection in items),
            key=lambda connection: -len(connection.identity),
        )
        for connection in everything:
            if connection.closed:
                self._live(connection.identity)
            elif (
                connection.in_use == 0 and connection.forwards == 0 and now - connection.last_used >= self.idle_timeout
            ):
                self._close(connection)

    async def close_all(self) -> None:
        for dial in list(self.dialing.values()):
            dial.cancel()
        everything = [connection for items in list(self.connections.values()) for connection in items]
        for connection in sorted(everything, key=lambda connection: -len(connection.identity)):
            connection.closed = True
            connection.connection.close()
        self.connections.clear()
        for connection in everything:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.connection.wait_closed(), 1.0)


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a dial's failure as seen: its waiters may all have given up before it ended."""
    if not task.cancelled():
        task.exception()


def connect_error(endpoint: Endpoint, exc: Exception, decision: TrustDecision) -> ConnectFailed:
    """A connection failure by kind, with what to do about it."""
    where = endpoint.describe()
    if isinstance(exc, asyncssh.HostKeyNotVerifiable) or decision.rejected is not None:
        if decision.rejected == "revoked" or "revoked" in str(exc).lower():
            return ConnectFailed(
                "HostKeyRevoked",
                "hostkey_rejected",
                f"{where}: the host key ({decision.host_key}) is marked @revoked in known_hosts; do not connect",
            )
        if decision.rejected == "changed":
            return ConnectFailed(
                "HostKeyMismatch",
                "hostkey_rejected",
                f"{where}: the host key ({decision.host_key}) differs from the one in known_hosts "
                f"({', '.join(endpoint.known_hosts_files)}); possible man-in-the-middle. If the host was really "
                "reinstalled, remove the old key (ssh-keygen -R) after verifying the new one out of band",
            )
        return ConnectFailed(
            "HostKeyUnknown",
            "hostkey_rejected",
            f"{where}: host key {decision.host_key} is not in known_hosts and the mode is strict; verify it "
            "(ssh_keyscan shows it) and add it, or use known_hosts='accept-new' to trust it on first use",
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        key = endpoint.key_path or "the agent and default keys"
        return ConnectFailed(
            "AuthFailed", "auth_failed", f"{where}: authentication failed with {key}; check user and key_path"
        )
    if isinstance(exc, ConnectionRefusedError):
        return ConnectFailed(
            "ConnectionRefused", "unreachable", f"{where}: connection refused (no SSH server on that port)"
        )
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ConnectFailed("ConnectTimeout", "unreachable", f"{where}: no SSH handshake within the connect timeout")
    if isinstance(exc, socket.gaierror):
        return ConnectFailed(
            "UnknownHost",
            "unreachable",
            f"{endpoint.name!r} is not an inventory or ssh_config alias and the resolver does not know it "
            f"({exc.strerror}); ssh_hosts lists the aliases",
        )
    if isinstance(exc, OSError):
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
        return ConnectFailed("Unreachable", "unreachable", f"{where}: {reason}")
    if isinstance(exc, asyncssh.DisconnectError):
        return ConnectFailed("ConnectionLost", "unreachable", f"{where}: the server disconnected ({exc.reason})")
    if isinstance(exc, UnicodeError):  # the resolver cannot encode the name (IDNA): no connection was tried
        return ConnectFailed("UnknownHost", "unreachable", f"{endpoint.name!r} is not a name a resolver takes ({exc})")
    if isinstance(exc, asyncssh.KeyImportError | asyncssh.KeyEncryptionError | ValueError):
        return ConnectFailed("KeyUnusable", "auth_failed", f"{where}: the key cannot be used ({exc})")
    if isinstance(exc, ToolError):
        return ConnectFailed(exc.kind, getattr(exc, "status", "unreachable"), str(exc))
    return ConnectFailed("ConnectFailed", "unreachable", f"{where}: {type(exc).__name__}: {exc}")
