"""End to end: bytes that reach one end of a forwarded connection before the other end is open are carried, not
lost (issue 15, item 1).

A forwarded connection has two ends, and the second opens a moment after the first: for L and D the SSH channel
after the client's socket was accepted, for R the SSH channel after the socket to the destination connected. A
client that sends its request at once (curl, http.client) or a destination that speaks first (SMTP, SSH) puts
bytes on the first end in that moment. On Debian 12's Python (3.11.2) asyncio starts reading a socket right after
connection_made even if the protocol paused it there, so those bytes arrived with nowhere to go; with later
versions they waited, but a SOCKS client's bytes sent with its request were taken for an oversized handshake.
Run these under that interpreter too (a venv of /usr/bin/python3), not only the project's: the server is started
with the interpreter running the tests. Through the real stack: a relay-shell stdio server, real sshd, sockets.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import fields, text_of
from tests.e2e.ssh.forward_helpers import (
    HashingSink,
    close,
    end_record,
    forward,
    listed,
    opened,
    send_through,
)

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]

GREETING = b"220 greeter ready\n"


def ask_at_once(port: int, request: bytes, half_close: bool = False) -> bytes:
    """Connect, send `request` in the same instant (before anything could come back), and read the answer until
    the far side closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        if half_close:
            connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(1 << 16):
            answer += chunk
        return answer


class Greeter:
    """A TCP server (a thread in this process) that speaks first, as SMTP or SSH servers do: it writes GREETING
    as soon as it accepts. Then it either closes at once (`linger=False`), or reads one line and answers it."""

    def __init__(self, linger: bool) -> None:
        self.linger = linger
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(10)
                connection.sendall(GREETING)
                if not self.linger:
                    continue
                line = b""
                try:
                    while not line.endswith(b"\n") and (chunk := connection.recv(1024)):
                        line += chunk
                except OSError:
                    continue
                connection.sendall(b"250 you said " + line)

    def close(self) -> None:
        self.listener.close()


# -- L: a client that speaks at once --------------------------------------------------------------------------


async def test_a_request_sent_at_once_through_a_local_forward_is_answered(
    client: Client, www: Path, http_port: int, audit_path: Path
) -> None:
    forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{http_port}"))
    request = b"GET /payload.bin HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    answers = []
    for _ in range(3):
        answers.append(await anyio.to_thread.run_sync(ask_at_once, port, request))
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200"), head[:200]
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256((www / "payload.bin").read_bytes()).hexdigest()
    await close(client, forward_id)
    end = end_record(audit_path, forward_id)
    # each byte counted once, as it was carried
    assert end["bytes_to_destination"] == 3 * len(request)
    assert end["bytes_from_destination"] == sum(len(answer) for answer in answers)


async def test_a_request_and_its_eof_sent_at_once_are_both_carried(client: Client, audit_path: Path) -> None:
    sink = HashingSink()  # answers once it has read to EOF: the answer proves the EOF went through, after the bytes
    try:
        forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{sink.port}"))
        small = os.urandom(100)
        answer = await anyio.to_thread.run_sync(ask_at_once, port, small, True)
        assert answer.decode() == f"{len(small)} {hashlib.sha256(small).hexdigest()}\n"
        # more than is kept while the channel opens: the rest waits in the kernel and follows
        large = os.urandom(4 * 1024 * 1024 + 5)
        answer_large = await anyio.to_thread.run_sync(send_through, port, large)
        assert answer_large.decode() == f"{len(large)} {hashlib.sha256(large).hexdigest()}\n"
        await close(client, forward_id)
    finally:
        sink.close()
    end = end_record(audit_path, forward_id)
    assert end["bytes_to_destination"] == len(small) + len(large)
    assert end["bytes_from_destination"] == len(answer) + len(answer_large)


def kernel_buffer_limit() -> int:
    """The most a TCP connection on this machine can hold in its kernel buffers: the sender's send buffer and the
    receiver's receive buffer at their largest."""
    wmem = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    rmem = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    return wmem + rmem


def push(port: int, most: int) -> int:
    """Send to 127.0.0.1:port until `most` bytes are taken or nothing more is for a second; how much was taken."""
    chunk = b"x" * (256 * 1024)
    taken = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.setblocking(False)
        last_progress = time.monotonic()
        while taken < most and time.monotonic() - last_progress < 1.0:
            try:
                sent = connection.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            taken += sent
            last_progress = time.monotonic()
    return taken


async def test_while_the_channel_opens_a_client_cannot_make_the_forward_read_without_bound(
    client: Client, audit_path: Path
) -> None:
    # A destination whose accept queue is full: sshd's connect to it stays pending (the kernel drops its SYNs), so
    # the channel for the client's connection stays unopened for as long as this test needs.
    holder = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = socket.create_connection(holder.getsockname(), timeout=5)  # backlog 0 queues one connection
    try:
        forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{holder.getsockname()[1]}"))
        most = 4 * kernel_buffer_limit() + (64 << 20)
        taken = await anyio.to_thread.run_sync(push, port, most)
        # What the forward holds is small: beyond it, the client is stopped by the kernel's buffers, not by
        # bytes read (and kept, or dropped) by this process.
        assert taken < kernel_buffer_limit() + (1 << 20), taken
        item = (await listed(client))[forward_id]
        assert item["connections"] == 1
        assert item["bytes_to_destination"] == 0  # nothing was carried: the channel never opened
        await close(client, forward_id)
    finally:
        filler.close()
        holder.close()
    assert end_record(audit_path, forward_id)["bytes_to_destination"] == 0


# -- R: a destination that speaks first -----------------------------------------------------------------------


async def test_the_greeting_of_a_destination_reached_by_a_remote_forward_arrives(
    client: Client, audit_path: Path
) -> None:
    tries = 20  # the greeting races the channel's opening: each try is one more chance to lose it
    greeter = Greeter(linger=True)
    try:
        forward_id, port = opened(await forward(client, f"R:0:127.0.0.1:{greeter.port}"))
        # On the SSH host: connect, read the greeting, send a line, read the answer (bash's /dev/tcp).
        command = (
            f"for i in $(seq {tries}); do exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9; "
            'IFS= read -r -t 5 greeting <&3; echo "greeting=$greeting"; echo "hello $i" >&3; '
            'IFS= read -r -t 5 answer <&3; echo "answer=$answer"; exec 3<&-; done'
        )
        result = await client.call_tool("ssh_exec", {"host": "h01", "command": command})
        text = text_of(result)
        assert fields(result)["exit_code"] == 0, text
        expected = "".join(f"greeting=220 greeter ready\nanswer=250 you said hello {i}\n" for i in range(1, tries + 1))
        assert fields(result)["output"] == expected, text
        await close(client, forward_id)
    finally:
        greeter.close()
    end = end_record(audit_path, forward_id)
    assert end["bytes_from_destination"] == tries * len(GREETING) + sum(
        len(f"250 you said hello {i}\n") for i in range(1, tries + 1)
    )
    assert end["bytes_to_destination"] == sum(len(f"hello {i}\n") for i in range(1, tries + 1))


async def test_a_destination_that_greets_and_closes_at_once_is_heard(client: Client, audit_path: Path) -> None:
    tries = 20
    greeter = Greeter(linger=False)  # the greeting and the EOF may both come before the channel is open
    try:
        forward_id, port = opened(await forward(client, f"R:0:127.0.0.1:{greeter.port}"))
        command = (
            f"for i in $(seq {tries}); do exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9; "
            "timeout 5 cat <&3; exec 3<&-; done"
        )
        result = await client.call_tool("ssh_exec", {"host": "h01", "command": command})
        text = text_of(result)
        assert fields(result)["exit_code"] == 0, text
        assert fields(result)["output"] == (GREETING * tries).decode(), text
        await close(client, forward_id)
    finally:
        greeter.close()
    assert end_record(audit_path, forward_id)["bytes_from_destination"] == tries * len(GREETING)


# -- D: the bytes right after the SOCKS request --------------------------------------------------------------


async def test_socks_bytes_and_eof_sent_with_the_request_are_carried(client: Client, audit_path: Path) -> None:
    sink = HashingSink()
    try:
        forward_id, port = opened(await forward(client, "D:0"))
        data = os.urandom(300 * 1024)  # far more than a handshake (1 KiB at most), read with the request at once
        # SOCKS5: no-authentication greeting, CONNECT 127.0.0.1:sink, then the payload and EOF, all in one go
        request = b"\x05\x01\x00" + b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + sink.port.to_bytes(2, "big")
        answer = await anyio.to_thread.run_sync(ask_at_once, port, request + data, True)
        assert answer[:2] == b"\x05\x00"  # method: no authentication
        assert answer[2:4] == b"\x05\x00", answer[:12]  # CONNECT succeeded
        assert answer[12:].decode() == f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"
        await close(client, forward_id)
    finally:
        sink.close()
    end = end_record(audit_path, forward_id)
    assert end["bytes_to_destination"] == len(data)
    assert end["bytes_from_destination"] == len(answer) - 12  # the SOCKS replies are not the destination's
