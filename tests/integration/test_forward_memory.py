"""A port forward whose reader is slower than its sender holds a bounded amount of memory in this process, for
every kind of forward (L, R, D/SOCKS) (ADR 0029, Round 5).

The defect it pins down: asyncssh (2.24) grants the far side a whole receive window again whenever it hands a
paused channel's data on, counting none of the data it still holds for the session. A forward pauses its channel
whenever the other end's socket cannot take more (connections.py), and resumed it as soon as that socket had
drained a little: every resume let the sender add up to a window the reader had not read, so the channel's
buffer grew for as long as the transfer lasted (12–25 MiB of 96 MiB held here, 83–94 MiB of 384).

Everything is real: a real sshd, a sender in its own process writing as fast as the loopback allows, and a
reader thread in this process that reads the forwarded socket at READ_RATE into one reused buffer (so the reader
itself holds nothing). Two measures, sampled while SIZE bytes pass: what the connection's two ends hold (the
channel's undelivered data, read from asyncssh's `_recv_buf`, and the socket's write buffer), against the bound
ADR 0029 Round 5 argues; and this process's peak RSS growth, after the allocator has given back what earlier
tests freed (`malloc_trim`), so that memory they left behind cannot hide this one's.
"""

from __future__ import annotations

import asyncio
import ctypes
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncssh
import pytest

from relay_shell.ssh.forwards.spec import parse_spec
from relay_shell.ssh.forwards.traffic import ConnectionBudget, Traffic
from relay_shell.ssh.forwards.tunnel import Tunnel, open_tunnel
from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.pool import SshPool
from relay_shell.ssh.target import resolve_route
from tests.procs import status_kib
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]  # `fleet`: tests/conftest.py

MIB = 1024 * 1024
SIZE = 96 * MIB
READ_RATE = 32 * MIB  # bytes a second: the slow reader; the loopback sshd carries several times that
WINDOW = 2 * MIB  # asyncssh's default receive window, which forward channels use
# What a connection may hold in one direction: a window in the channel, and in the socket's write buffer asyncio's
# low-water mark (16 KiB) plus the window the channel hands over at once, plus a packet (ADR 0029 Round 5).
HELD_LIMIT = 2 * WINDOW + 128 * 1024  # 3.9–4.0 MiB measured; 12.1–25.1 MiB before the change
GROWTH_LIMIT_KIB = 16 * 1024  # the held bytes with the allocator's slack: +5.2–8.0 MiB; +15.6–31.3 before

# The fast side, in a process of its own: `serve` accepts one connection and sends SIZE bytes to it (the
# destination of an L or D forward); `connect PORT` connects and sends them (the client of an R forward's listener
# on the SSH host). Both then wait for the other side to close.
SENDER = """
import socket, sys
size = int(sys.argv[1])
chunk = bytes(1 << 20)
if sys.argv[2] == "serve":
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    connection, _ = listener.accept()
else:
    connection = socket.create_connection(("127.0.0.1", int(sys.argv[3])))
with connection:
    sent = 0
    while sent < size:
        connection.sendall(chunk[: size - sent])
        sent += min(len(chunk), size - sent)
    connection.shutdown(socket.SHUT_WR)
    while connection.recv(65536):
        pass
"""


def _read_slowly(connection: socket.socket) -> int:
    """Read until the end at READ_RATE into one reused buffer; the byte count."""
    buffer = bytearray(64 * 1024)
    started = time.monotonic()
    received = 0
    with connection:
        while count := connection.recv_into(buffer):
            received += count
            ahead = received / READ_RATE - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    return received


def _socks5_connect(port: int, destination_port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    connection.sendall(b"\x05\x01\x00")
    assert connection.recv(2) == b"\x05\x00"
    connection.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + destination_port.to_bytes(2, "big"))
    reply = b""
    while len(reply) < 10:
        reply += connection.recv(10 - len(reply))
    assert reply[:2] == b"\x05\x00", reply
    return connection


def _sender(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", SENDER, str(SIZE), *args], stdout=subprocess.PIPE, text=True)


@asynccontextmanager
async def _forward(fleet: SshFleet, spec: str) -> AsyncIterator[Tunnel]:
    pool = SshPool(max_connections=4, max_channels=10, idle_timeout=300, connect_timeout=5, keepalive=30)
    route = resolve_route(
        Inventory(fleet.ssh_config, None),
        "h01",
        user=None,
        port=None,
        key_path=None,
        known_hosts=None,
        jump=None,
        default_mode="accept-new",
    )

    def admit(host: str, port: int, traffic: Traffic) -> str | None:
        return None

    tunnel = await open_tunnel(pool, route, parse_spec(spec), "127.0.0.1", 10.0, admit, ConnectionBudget(64))
    try:
        yield tunnel
    finally:
        await tunnel.close()
        await pool.close_all()


def _held(tunnel: Tunnel) -> int:
    """Bytes the forward's connections hold here: what each channel has not handed over yet, and what each socket
    has not written yet."""
    held = 0
    for link in tunnel.links:
        for end in link.ends:
            if isinstance(end.stream, asyncssh.SSHTCPChannel):
                held += sum(len(data) for data, _ in end.stream._recv_buf)
            elif isinstance(end.stream, asyncio.WriteTransport):
                held += end.stream.get_write_buffer_size()
    return held


async def _measured(tunnel: Tunnel, read: Callable[[], int]) -> tuple[int, float, int, int]:
    """Run `read` on a thread while the event loop carries the forward: bytes read, seconds, the most the
    connection held (sampled every millisecond) and the peak RSS growth (KiB)."""
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _held(tunnel))
            await asyncio.sleep(0.001)

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    baseline = status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    try:
        received = await asyncio.wait_for(asyncio.to_thread(read), 60)
    finally:
        sampler.cancel()
    elapsed = time.monotonic() - started
    return received, elapsed, peak, status_kib("VmHWM") - baseline


def _check(kind: str, tunnel: Tunnel, measured: tuple[int, float, int, int]) -> None:
    received, elapsed, held, growth = measured
    print(
        f"{kind}: {received / MIB:.0f} MiB in {elapsed:.1f} s, held at most {held / MIB:.1f} MiB, "
        f"peak RSS growth {growth / 1024:.1f} MiB"
    )
    assert received == SIZE
    assert elapsed > 0.8 * SIZE / READ_RATE, f"the reader was not the slow side ({elapsed:.1f} s)"
    assert tunnel.traffic.connections == 1 and tunnel.traffic.failed == 0
    slow = f"while {SIZE // MIB} MiB went to a reader at {READ_RATE // MIB} MiB/s"
    assert held <= HELD_LIMIT, f"{kind} forward: held {held / MIB:.1f} MiB {slow} (limit {HELD_LIMIT / MIB:.1f})"
    assert growth <= GROWTH_LIMIT_KIB, (
        f"{kind} forward: RSS grew {growth / 1024:.1f} MiB {slow} (limit {GROWTH_LIMIT_KIB // 1024} MiB)"
    )


async def test_local_forward_to_a_slow_client(fleet: SshFleet) -> None:
    sender = _sender("serve")
    try:
        assert sender.stdout is not None
        destination = int(sender.stdout.readline())
        async with _forward(fleet, f"L:0:127.0.0.1:{destination}") as tunnel:

            def connect() -> socket.socket:
                return socket.create_connection(("127.0.0.1", tunnel.listen_port), timeout=30)

            _check("L", tunnel, await _measured(tunnel, lambda: _read_slowly(connect())))
    finally:
        sender.kill()
        sender.wait()


async def test_socks_forward_to_a_slow_client(fleet: SshFleet) -> None:
    sender = _sender("serve")
    try:
        assert sender.stdout is not None
        destination = int(sender.stdout.readline())
        async with _forward(fleet, "D:0") as tunnel:
            port = tunnel.listen_port
            _check("D", tunnel, await _measured(tunnel, lambda: _read_slowly(_socks5_connect(port, destination))))
    finally:
        sender.kill()
        sender.wait()


async def test_remote_forward_to_a_slow_destination(fleet: SshFleet) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        destination = listener.getsockname()[1]
        async with _forward(fleet, f"R:0:127.0.0.1:{destination}") as tunnel:
            # The SSH host is this machine: its listener is on this machine's loopback too.
            sender = _sender("connect", str(tunnel.listen_port))
            try:
                _check("R", tunnel, await _measured(tunnel, lambda: _read_slowly(listener.accept()[0])))
            finally:
                sender.kill()
                sender.wait()
