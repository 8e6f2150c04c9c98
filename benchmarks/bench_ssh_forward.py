"""Throughput of a local port forward (ssh_forward L:…) against a real sshd, both ways, and the server's memory.

Up: bytes go from a sender (a thread here) through the forward's listener, over SSH to sshd, and from sshd to a sink
(its own process) that counts them. Down: a source (its own process) sends them through sshd and the forward to a
reader here that counts them — the way a forward's SSH channel is paused and resumed when the local reader falls
behind (ADR 0029, Round 5). The same transfers run through three forwards to the same sshd, in alternating rounds
so that machine noise hits all alike:

- relay-shell: `ssh_forward(host, "L:0:127.0.0.1:SINK")` (and `…:SOURCE`) through a real stdio client;
- the floor: asyncssh's own `forward_local_port` (the library relay-shell uses, without relay-shell's counting
  data path), in a bare process of its own started as this module with `--serve-reference`;
- for information: OpenSSH's `ssh -N -L` with the same key.

With `--before REV` (run alone) the relay-shell of commit REV is a fourth forward in the same rounds, printed for
information beside this checkout (wall and the server's CPU per GiB): the A/B of a change to the data path.

Targets: relay-shell's median throughput ≥ 0.90× the floor's, each way, and the server's peak RSS growth during a
transfer (VmHWM reset before it) ≤ 32 MiB: flow control keeps a fast sender from filling memory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from mcp import Client

from benchmarks.common import (
    Options,
    Row,
    ServerCode,
    children,
    code_at,
    cpu_seconds,
    median,
    ratio_row,
    relay_client,
    reset_peak_rss,
    run_alone,
    status_kib,
)
from tests.sshd import SshFleet, SshHost, refused_port

TRANSFER_BYTES = 256 * 1024 * 1024
ROUNDS = 3
LIMIT = 0.90
RSS_LIMIT_MIB = 32
MIB = 1024 * 1024
PROJECT = Path(__file__).resolve().parent.parent
REFERENCE_FLAG = "--serve-reference"
DIRECTIONS = ("up", "down")
# The far ends, one process: the sink counts what it receives and answers the count; the source sends
# TRANSFER_BYTES to whoever connects, then closes. Prints the sink's port, then the source's.
ENDS = f"""
import socket, threading
size = {TRANSFER_BYTES}
sink = socket.create_server(("127.0.0.1", 0))
source = socket.create_server(("127.0.0.1", 0))
print(sink.getsockname()[1], source.getsockname()[1], flush=True)

def serve_sink():
    buffer = bytearray(1 << 20)
    while True:
        connection, _ = sink.accept()
        with connection:
            total = 0
            while count := connection.recv_into(buffer):
                total += count
            connection.sendall(f"{{total}}\\n".encode())

def serve_source():
    chunk = bytes(1 << 20)
    while True:
        connection, _ = source.accept()
        with connection:
            try:
                for _ in range(size // len(chunk)):
                    connection.sendall(chunk)
            except OSError:  # a reader that went away: a readiness probe
                pass

threading.Thread(target=serve_sink, daemon=True).start()
serve_source()
"""


def transfer_up(port: int) -> float:
    """Send TRANSFER_BYTES through 127.0.0.1:port, half-close, wait for the sink's count; bytes per second."""
    chunk = os.urandom(1 << 20)
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as connection:
        sent = 0
        while sent < TRANSFER_BYTES:
            connection.sendall(chunk)
            sent += len(chunk)
        connection.shutdown(socket.SHUT_WR)
        answer = connection.makefile("rb").readline()
    elapsed = time.perf_counter() - started
    if int(answer) != TRANSFER_BYTES:
        raise RuntimeError(f"the sink counted {answer!r}, expected {TRANSFER_BYTES}")
    return TRANSFER_BYTES / elapsed


def transfer_down(port: int) -> float:
    """Read what the source sends through 127.0.0.1:port until it closes; bytes per second."""
    buffer = bytearray(1 << 20)
    received = 0
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as connection:
        while count := connection.recv_into(buffer):
            received += count
    elapsed = time.perf_counter() - started
    if received != TRANSFER_BYTES:
        raise RuntimeError(f"received {received} bytes from the source, expected {TRANSFER_BYTES}")
    return TRANSFER_BYTES / elapsed


TRANSFERS = {"up": transfer_up, "down": transfer_down}


def wait_listening(port: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def serve_reference() -> None:
    """The floor: asyncssh's forward_local_port on one connection, nothing else; prints its two ports."""
    import asyncio

    import asyncssh

    async def run() -> None:
        connection = await asyncssh.connect(
            os.environ["BENCH_SSH_ADDRESS"],
            port=int(os.environ["BENCH_SSH_PORT"]),
            username="root",
            client_keys=[os.environ["BENCH_SSH_KEY"]],
            known_hosts=os.environ["BENCH_SSH_KNOWN_HOSTS"],
            config=None,
        )
        ports = []
        for destination in os.environ["BENCH_DESTINATIONS"].split():
            listener = await connection.forward_local_port("127.0.0.1", 0, "127.0.0.1", int(destination))
            ports.append(str(listener.get_port()))
        print(" ".join(ports), flush=True)
        await connection.wait_closed()

    asyncio.run(run())


def start_reference(
    fleet: SshFleet, host: SshHost, destinations: tuple[int, int]
) -> tuple[subprocess.Popen[str], tuple[int, int]]:
    env = {
        **os.environ,
        "BENCH_SSH_ADDRESS": host.address,
        "BENCH_SSH_PORT": str(host.port),
        "BENCH_SSH_KEY": str(fleet.client_key),
        "BENCH_SSH_KNOWN_HOSTS": str(fleet.known_hosts),
        "BENCH_DESTINATIONS": " ".join(str(port) for port in destinations),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_ssh_forward", REFERENCE_FLAG],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(PROJECT),
    )
    assert process.stdout is not None
    up, down = (int(port) for port in process.stdout.readline().split())
    return process, (up, down)


def start_openssh(
    fleet: SshFleet, host: SshHost, destinations: tuple[int, int]
) -> tuple[subprocess.Popen[bytes], tuple[int, int]]:
    up, down = refused_port("127.0.0.1"), refused_port("127.0.0.1")
    forwards = [
        option
        for port, destination in zip((up, down), destinations, strict=True)
        for option in ("-L", f"127.0.0.1:{port}:127.0.0.1:{destination}")
    ]
    process = subprocess.Popen(
        [
            "ssh",
            "-N",
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={fleet.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-i",
            str(fleet.client_key),
            "-p",
            str(host.port),
            *forwards,
            f"root@{host.address}",
        ],
        stdin=subprocess.DEVNULL,
    )
    wait_listening(up)
    wait_listening(down)
    return process, (up, down)


class Contender:
    """One forward under test: its ports (up, down), the process whose CPU and memory are read, and its samples."""

    def __init__(self, name: str, ports: tuple[int, int], pid: int, relay: bool) -> None:
        self.name = name
        self.ports = dict(zip(DIRECTIONS, ports, strict=True))
        self.pid = pid
        self.relay = relay  # a relay-shell server: its peak RSS growth is measured
        self.speeds: dict[str, list[float]] = {direction: [] for direction in DIRECTIONS}
        self.cpu: dict[str, list[float]] = {direction: [] for direction in DIRECTIONS}  # seconds per GiB
        self.growth: list[float] = []  # MiB

    async def run(self, direction: str) -> None:
        transfer = TRANSFERS[direction]
        before = status_kib(self.pid, "VmRSS")
        reset_peak_rss(self.pid)
        cpu = cpu_seconds(self.pid)
        speed = await anyio.to_thread.run_sync(transfer, self.ports[direction])
        self.cpu[direction].append((cpu_seconds(self.pid) - cpu) * (1 << 30) / TRANSFER_BYTES)
        self.speeds[direction].append(speed)
        if self.relay:
            self.growth.append((status_kib(self.pid, "VmHWM") - before) / 1024)

    def line(self, direction: str) -> str:
        return (
            f"{self.name} {median(self.speeds[direction]) / MIB:.0f} MiB/s "
            f"({median(self.cpu[direction]):.2f} CPU s/GiB)"
        )


async def open_relay_forwards(client: Client, destinations: tuple[int, int]) -> tuple[int, int]:
    ports = []
    for destination in destinations:
        opened = await client.call_tool("ssh_forward", {"host": "h01", "spec": f"L:0:127.0.0.1:{destination}"})
        assert opened.structured_content is not None and not opened.is_error, opened.content
        ports.append(int(opened.structured_content["listen_port"]))
    return ports[0], ports[1]


async def measure(before: str | None) -> list[Contender]:
    """Every contender's transfers, both ways, in alternating rounds after a warm-up of each."""
    async with AsyncExitStack() as stack:
        root = stack.enter_context(tempfile.TemporaryDirectory())
        fleet = stack.enter_context(SshFleet(Path(root) / "fleet", 1))
        fleet.trust()
        host = fleet.host("h01")
        ends = subprocess.Popen([sys.executable, "-c", ENDS], stdout=subprocess.PIPE, text=True)
        stack.callback(stop, ends)
        assert ends.stdout is not None
        sink, source = (int(port) for port in ends.stdout.readline().split())
        reference, reference_ports = start_reference(fleet, host, (sink, source))
        stack.callback(stop, reference)
        openssh, openssh_ports = start_openssh(fleet, host, (sink, source))
        stack.callback(stop, openssh)
        codes: list[ServerCode | None] = [None]
        if before is not None:
            codes.append(stack.enter_context(code_at(before)))
        contenders = []
        for code in codes:  # one server at a time: each is the one new child of this process
            existing = children()
            client = await stack.enter_async_context(relay_client(code, ssh_config=str(fleet.ssh_config)))
            (pid,) = children() - existing
            ports = await open_relay_forwards(client, (sink, source))
            contenders.append(Contender(code.label if code else "relay-shell", ports, pid, relay=True))
        contenders.append(Contender("asyncssh forward_local_port (floor)", reference_ports, reference.pid, False))
        contenders.append(Contender("OpenSSH ssh -L", openssh_ports, openssh.pid, False))
        for contender in contenders:  # warm-up: TCP_NODELAY, windows, code paths
            for direction in DIRECTIONS:
                await anyio.to_thread.run_sync(TRANSFERS[direction], contender.ports[direction])
        for _ in range(ROUNDS):
            for direction in DIRECTIONS:
                for contender in contenders:
                    await contender.run(direction)
    return contenders


def stop(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def report(contenders: list[Contender]) -> list[Row]:
    relay, floor = contenders[0], contenders[-2]
    rows = []
    for direction in DIRECTIONS:
        print(f"ssh_forward L {direction}: " + ", ".join(contender.line(direction) for contender in contenders))
        ratio = median(relay.speeds[direction]) / median(floor.speeds[direction])
        rows.append(ratio_row(f"ssh_forward L {direction} throughput vs asyncssh", ratio, LIMIT, higher_is_better=True))
        for other in contenders[1:-2]:  # the code before, when asked for
            wall = median(relay.speeds[direction]) / median(other.speeds[direction])
            cpu = median(relay.cpu[direction]) / median(other.cpu[direction])
            print(f"  this checkout vs {other.name}: {wall:.3f}x throughput, {cpu:.3f}x server CPU per GiB")
    peak = max(relay.growth)
    print(f"  relay-shell's peak RSS growth during a transfer {peak:.1f} MiB (both ways, {ROUNDS} rounds)")
    rows.append(
        Row("ssh_forward server peak RSS growth", f"{peak:.1f} MiB", f"≤ {RSS_LIMIT_MIB} MiB", peak <= RSS_LIMIT_MIB)
    )
    return rows


def rows(options: Options) -> list[Row]:
    """run_all's rows: `--before` there names the commit before the renovation, which is not this A/B."""
    return report(anyio.run(measure, None))


def main(argv: list[str] | None = None) -> int:
    return run_alone(lambda options: report(anyio.run(measure, options.before)), argv)


if __name__ == "__main__":
    if REFERENCE_FLAG in sys.argv:
        serve_reference()
    else:
        raise SystemExit(main())
