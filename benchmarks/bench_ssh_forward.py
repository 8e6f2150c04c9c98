"""Throughput of a local port forward (ssh_forward L:…) against a real sshd, and the server's memory meanwhile.

Bytes go from a sender (a thread here) through the forward's listener, over SSH to sshd, and from sshd to a sink
(its own process) that counts them. The same transfer runs through three forwards to the same sshd, in
alternating rounds so that machine noise hits all alike:

- relay-shell: `ssh_forward(host, "L:0:127.0.0.1:SINK")` through a real stdio client;
- the floor: asyncssh's own `forward_local_port` (the library relay-shell uses, without relay-shell's counting
  data path), in a bare process of its own started as this module with `--serve-reference`;
- for information: OpenSSH's `ssh -N -L` with the same key.

Target: relay-shell's median throughput ≥ 0.90× the floor's, and the server's peak RSS growth during a transfer
(VmHWM reset before it) ≤ 32 MiB: flow control keeps a fast sender from filling memory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks.common import child_pid_running, median, relay_client, reset_peak_rss, status_kib, verdict
from tests.sshd import SshFleet, SshHost, refused_port

TRANSFER_BYTES = 256 * 1024 * 1024
ROUNDS = 3
LIMIT = 0.90
RSS_LIMIT_MIB = 32
PROJECT = Path(__file__).resolve().parent.parent
REFERENCE_FLAG = "--serve-reference"
SINK = """
import socket
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
buffer = bytearray(1 << 20)
while True:
    connection, _ = listener.accept()
    with connection:
        total = 0
        while count := connection.recv_into(buffer):
            total += count
        connection.sendall(f"{total}\\n".encode())
"""


def transfer(port: int) -> float:
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
    """The floor: asyncssh's forward_local_port on one connection, nothing else; prints its port."""
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
        listener = await connection.forward_local_port("127.0.0.1", 0, "127.0.0.1", int(os.environ["BENCH_SINK"]))
        print(listener.get_port(), flush=True)
        await connection.wait_closed()

    asyncio.run(run())


def start_reference(fleet: SshFleet, host: SshHost, sink_port: int) -> tuple[subprocess.Popen[str], int]:
    env = {
        **os.environ,
        "BENCH_SSH_ADDRESS": host.address,
        "BENCH_SSH_PORT": str(host.port),
        "BENCH_SSH_KEY": str(fleet.client_key),
        "BENCH_SSH_KNOWN_HOSTS": str(fleet.known_hosts),
        "BENCH_SINK": str(sink_port),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_ssh_forward", REFERENCE_FLAG],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(PROJECT),
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def start_openssh(fleet: SshFleet, host: SshHost, sink_port: int) -> tuple[subprocess.Popen[bytes], int]:
    port = refused_port("127.0.0.1")
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
            "-L",
            f"127.0.0.1:{port}:127.0.0.1:{sink_port}",
            f"root@{host.address}",
        ],
        stdin=subprocess.DEVNULL,
    )
    wait_listening(port)
    return process, port


async def main() -> bool:
    with tempfile.TemporaryDirectory() as root, SshFleet(Path(root) / "fleet", 1) as fleet:
        fleet.trust()
        host = fleet.host("h01")
        sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
        assert sink.stdout is not None
        sink_port = int(sink.stdout.readline())
        reference, reference_port = start_reference(fleet, host, sink_port)
        openssh, openssh_port = start_openssh(fleet, host, sink_port)
        try:
            async with relay_client(ssh_config=str(fleet.ssh_config)) as client:
                opened = await client.call_tool("ssh_forward", {"host": "h01", "spec": f"L:0:127.0.0.1:{sink_port}"})
                assert opened.structured_content is not None and not opened.is_error, opened.content
                relay_port = opened.structured_content["listen_port"]
                server = child_pid_running("relay_shell")
                speeds: dict[str, list[float]] = {"relay-shell": [], "asyncssh": [], "openssh": []}
                growth: list[float] = []
                ports = {"relay-shell": relay_port, "asyncssh": reference_port, "openssh": openssh_port}
                for port in ports.values():  # warm-up: TCP_NODELAY, windows, code paths
                    await anyio.to_thread.run_sync(transfer, port)
                for _ in range(ROUNDS):
                    for name, port in ports.items():
                        if name == "relay-shell":
                            before = status_kib(server, "VmRSS")
                            reset_peak_rss(server)
                        speeds[name].append(await anyio.to_thread.run_sync(transfer, port))
                        if name == "relay-shell":
                            growth.append((status_kib(server, "VmHWM") - before) / 1024)
        finally:
            for process in (reference, openssh, sink):
                process.kill()
                process.wait()
    mib = 1024 * 1024
    relay, floor, ssh = (median(speeds[name]) / mib for name in ("relay-shell", "asyncssh", "openssh"))
    ratio = relay / floor
    peak = max(growth)
    print(
        f"ssh_forward L throughput: relay-shell {relay:.0f} MiB/s, asyncssh forward_local_port (floor) "
        f"{floor:.0f} MiB/s, OpenSSH ssh -L {ssh:.0f} MiB/s (for information)"
    )
    print(f"  ratio {ratio:.2f}x floor (target >= {LIMIT:.2f}x) {verdict(ratio, LIMIT, higher_is_better=True)}")
    print(
        f"  server peak RSS growth during a transfer {peak:.1f} MiB (target <= {RSS_LIMIT_MIB}) "
        f"{verdict(peak, RSS_LIMIT_MIB)}"
    )
    return ratio >= LIMIT and peak <= RSS_LIMIT_MIB


if __name__ == "__main__":
    if REFERENCE_FLAG in sys.argv:
        serve_reference()
    else:
        raise SystemExit(0 if anyio.run(main) else 1)
