"""The one interface of an off-host sink: a connection the shipper sends audit records over (adr/0020).

Two kinds implement it: syslog (offhost/syslog.py: TCP and TLS streams, UDP and Unix datagram sockets) and journald
(offhost/journald.py: journald's Unix datagram socket). All the shipper needs to know of a connection is when a
record it sent is delivered: on a datagram socket as soon as the send succeeded (as far as anyone can know), on a
stream once the collector's TCP has acknowledged its bytes. The defaults here are a datagram socket's; a stream
overrides them.
"""

from __future__ import annotations

import contextlib
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable


class Sink(ABC):
    def __init__(self, sock: socket.socket) -> None:
        self.sock: socket.socket | None = sock

    @property
    def stream(self) -> bool:
        """True when delivery is confirmed by the collector's TCP acknowledgements (acknowledged_end, bytes_acked)."""
        return False

    @abstractmethod
    def send(self, messages: list[bytes], stub_for: Callable[[int], bytes] | None = None) -> int:
        """Send messages in order; raises OSError (ssl.SSLError included) when the collector is gone. A datagram the
        socket refuses as too large is replaced by `stub_for(index)`; returns how many were."""

    def acknowledged_end(self) -> int:
        """The value `bytes_acked()` reaches once everything sent so far is acknowledged (0: nothing to wait for)."""
        return 0

    def bytes_acked(self) -> int:
        """Bytes the collector's TCP acknowledged on this connection, ever growing (0 for datagrams)."""
        return 0

    def peer_closed(self) -> bool:
        """The collector closed the connection (a datagram socket cannot tell)."""
        return False

    def close_gracefully(self, timeout: float) -> bool:
        """Close once the collector has read everything sent; True when it did within `timeout` (datagrams: at
        once)."""
        self.close()
        return True

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
