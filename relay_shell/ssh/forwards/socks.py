"""D: the SOCKS 4, 4a and 5 end of a dynamic forward (CONNECT, no authentication). The handshake names the
destination; it is admitted by policy, the SSH channel opened, the reply sent, and from then on the client is an
end like any other (forwards/connections.py)."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, cast

import asyncssh

from relay_shell.ssh.forwards.connections import End, Link, Stream
from relay_shell.ssh.forwards.spec import HOST_NAME, host_port
from relay_shell.ssh.target import canonical_host

MAX_DESTINATIONS_KEPT = 64  # distinct SOCKS destinations listed per forward
SOCKS_HANDSHAKE_BYTES = 1024  # a SOCKS request is at most 262 bytes (SOCKS4a: user id and name)
SOCKS_HANDSHAKE_TIMEOUT = 10.0

# SOCKS5 reply codes (RFC 1928)
SOCKS_OK, SOCKS_FAILURE, SOCKS_NOT_ALLOWED, SOCKS_UNREACHABLE, SOCKS_REFUSED = 0, 1, 2, 4, 5
SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 7, 8


class SocksClient(End):
    """D: a SOCKS 4, 4a or 5 client of the listener on this machine (CONNECT, no authentication). The handshake
    names the destination; it is admitted by policy, the channel opened, the reply sent, and from then on this
    is an end like any other."""

    def __init__(self, link: Link) -> None:
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
        self.stream = cast(Stream, transport)  # reading stays on: the handshake comes first
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
        if not self.held_back:  # the channel's send buffer may be full already
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


def _ipv6(host: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(host)
    except ValueError:
        return None
