"""A download over the remote `scp -f` (relay_shell/ssh/transfers/scp_stream.py) into a destination slower than
the network holds a bounded amount of memory, whatever the two speeds (ADR 0029, Round 4).

The flake it pins down: `test_one_gib_up_and_down_with_bounded_server_memory` failed about once in five runs
with the server's RSS +52–89 MiB, when the hashing and writing fell behind the network on a loaded machine.
The destination here is slow for real: the file's bytes go into a pipe that a thread drains at DRAIN_RATE, so
the Sink's worker blocks in `os.write` as it would on a slow disk, while a real sshd sends as fast as it may.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.pool import SshPool
from relay_shell.ssh.target import resolve_route
from relay_shell.ssh.transfers.local_io import Sink
from relay_shell.ssh.transfers.scp_stream import stream_file
from tests.procs import status_kib
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]  # `fleet`: tests/conftest.py

MIB = 1024 * 1024
SIZE = 96 * MIB
DRAIN_RATE = 32 * MIB  # bytes a second: the "disk"; loopback sshd sends ten times that
GROWTH_LIMIT_KIB = 16 * 1024  # the stream holds ~8 MiB (ADR 0029, Round 4): 9–12 measured; 51–59 before


def _drain(descriptor: int, digest: Any) -> None:
    """Read the pipe at DRAIN_RATE into one reused buffer (so the drain itself holds nothing) until its end."""
    buffer = bytearray(64 * 1024)
    view = memoryview(buffer)
    started = time.monotonic()
    drained = 0
    while count := os.readv(descriptor, [buffer]):
        digest.update(view[:count])
        drained += count
        ahead = drained / DRAIN_RATE - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)


async def test_a_slow_destination_holds_the_network_back(fleet: SshFleet, tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    block = os.urandom(4 * MIB)
    with source.open("wb") as out:
        for _ in range(SIZE // len(block)):
            out.write(block)
    expected = hashlib.sha256(source.read_bytes()).hexdigest()

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
    connection = await pool.acquire(route, timeout=10)
    reading, writing = os.pipe()
    drained = hashlib.sha256()
    drainer = threading.Thread(target=_drain, args=(reading, drained))
    counted = 0

    async def count(size: int) -> None:
        nonlocal counted
        counted += size

    try:
        drainer.start()
        sink = Sink(writing, SIZE)
        baseline = status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
        started = time.monotonic()
        try:
            size = await stream_file(pool, connection, str(source), sink, count)
            digest = await sink.finish()
        finally:
            await sink.stop()
        elapsed = time.monotonic() - started
        growth = status_kib("VmHWM") - baseline
    finally:
        os.close(writing)
        await asyncio.to_thread(drainer.join)
        os.close(reading)
        pool.release(connection)
        await pool.close_all()

    assert (size, counted, digest, drained.hexdigest()) == (SIZE, SIZE, expected, expected)
    assert elapsed > 0.8 * SIZE / DRAIN_RATE, f"the destination was not the slow side ({elapsed:.1f} s)"
    assert growth <= GROWTH_LIMIT_KIB, f"RSS grew {growth} KiB while {SIZE // MIB} MiB streamed into a slow pipe"
