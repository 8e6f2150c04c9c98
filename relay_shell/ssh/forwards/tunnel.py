"""An open port forward: its listener (on this machine for L and D, on the SSH host for R), the connections it
carries (forwards/connections.py, forwards/socks.py), and the pooled SSH connection it rides on. Connections are
bounded per forward and, since each holds a file descriptor, for all forwards together (`ConnectionBudget`); one
beyond either bound is closed at once and counted as refused."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any, cast

import anyio
import asyncssh

from relay_shell.errors import ToolError
from relay_shell.ssh.forwards.connections import Admit, End, Link, LocalClient, Refused
from relay_shell.ssh.forwards.socks import SocksClient
from relay_shell.ssh.forwards.spec import ForwardSpec, host_port
from relay_shell.ssh.forwards.traffic import ConnectionBudget, Traffic
from relay_shell.ssh.pool import PooledConnection, SshPool
from relay_shell.ssh.target import Route

MAX_OPEN_CONNECTIONS = 256  # carried at once by one forward; more are refused (and counted) until some end
LOCAL_CONNECT_TIMEOUT = 10.0  # R: opening the destination socket on this machine
REMOTE_CLOSE_TIMEOUT = 2.0  # R: the SSH host confirming that its listener is gone


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
        self.links: set[Link] = set()
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
            no_socket = ToolError(
                "ListenFailed",
                f"cannot listen on {host_port(bind, port)} on this machine: no socket could be opened (the "
                "process may be out of file descriptors); close forwards or connections you no longer need",
            )
            try:
                self.server = await asyncio.get_running_loop().create_server(accept, bind, port)
            except OSError as exc:
                if exc.errno is None:  # Python 3.13's "could not bind on any address": see below
                    raise no_socket from None
                raise ToolError(
                    "ListenFailed",
                    f"cannot listen on {host_port(bind, port)} on this machine: {exc.strerror or exc}; try another "
                    "port, or 0 for a free one",
                ) from None
            if not self.server.sockets:
                # asyncio skips an address whose socket() fails, EMFILE included, and (before Python 3.13, which
                # raises an OSError without errno instead) returns a server with no socket at all: out of file
                # descriptors, most likely.
                self.server.close()
                self.server = None
                raise no_socket
            self.listen_port = self.server.sockets[0].getsockname()[1]
        self.listen_host = bind

    def _full(self) -> bool:
        return self.closed or len(self.links) >= MAX_OPEN_CONNECTIONS or self.budget.full()

    def _accept_local(self) -> asyncio.BaseProtocol:
        if self._full():
            return Refused(self.traffic)
        return LocalClient(Link(self), toward_destination=True)

    def _accept_socks(self) -> asyncio.BaseProtocol:
        if self._full():
            return Refused(self.traffic)
        return SocksClient(Link(self))

    async def _accept_remote(self, orig_host: str, orig_port: int) -> asyncssh.SSHTCPSession[bytes]:
        """R: the SSH host accepted a connection on its listener; open the destination here and pair them."""
        if self._full():
            self.traffic.connections += 1
            self.traffic.refused += 1
            self.traffic.last_active = time.monotonic()
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_RESOURCE_SHORTAGE, "too many forwarded connections")
        assert self.spec.dest_host is not None and self.spec.dest_port is not None
        link = Link(self)
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: End(link, toward_destination=False), self.spec.dest_host, self.spec.dest_port
                ),
                LOCAL_CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            self.traffic.failed += 1
            link.close()
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(exc) or "timed out") from None
        if link.closed:  # the forward closed meanwhile
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "the forward is closed")
        return cast(asyncssh.SSHTCPSession[bytes], End(link, toward_destination=True, peer=link.ends[0]))

    async def open_channel(self, client: End, host: str, port: int, peername: Any) -> None:
        """L and D: the SSH channel that carries a local client's connection to host:port."""
        orig_host, orig_port = (str(peername[0]), int(peername[1])) if peername else ("", 0)

        def channel_end() -> asyncssh.SSHTCPSession[bytes]:
            return cast(asyncssh.SSHTCPSession[bytes], End(client.link, toward_destination=False, peer=client))

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
