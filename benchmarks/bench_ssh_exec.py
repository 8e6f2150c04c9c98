"""Warm ssh_exec of `true` through a real stdio client against a real sshd: median latency vs a floor of one
trivial MCP round trip on the bare server plus an asyncssh exec of `true` on an already-open connection to the
same sshd, made in this process (≤ 1.10×).

The floor is measured as what it describes, one after the other: each floor sample is a bare round trip
immediately followed by the in-process exec, and the calls rotate one by one (floor, reference, relay-shell).
Summing the medians of two tight loops instead (thousands of back-to-back execs on a hot connection, in a
process that never sleeps) gives a floor that no server can reach: a bare server whose only tool is that
same exec measured 1.23–1.46× such a floor on this machine.

Both sides are warm: relay-shell's pooled connection exists (and sshd has set TCP_NODELAY on it, which it does
only when the first session starts), and the floor's connection has run a few commands too. The floor's
connection uses the options relay-shell's pool passes to asyncssh (user, client key file, parsed known_hosts,
no ssh_config). Everything is measured in interleaved batches so machine noise hits all alike.

For information, the same run also measures a reference: a bare MCPServer (the floor's server, same SDK and
transport) whose only tool awaits `conn.run("true")` on its own warm connection, i.e. the floor's two parts
done by one server in one call. It is this module started with `--serve-reference`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from benchmarks.common import bare_client, measure, median, relay_client, verdict
from tests.sshd import SshFleet, SshHost  # run as `python -m benchmarks.…` from the project root, like the others

CALLS = 250
WARMUP = 20
LIMIT = 1.10
HOST = "h01"
PROJECT = Path(__file__).resolve().parent.parent
REFERENCE_FLAG = "--serve-reference"


def reference_params(fleet: SshFleet, host: SshHost) -> StdioServerParameters:
    env = {
        **os.environ,
        "BENCH_SSH_ADDRESS": host.address,
        "BENCH_SSH_PORT": str(host.port),
        "BENCH_SSH_KEY": str(fleet.client_key),
        "BENCH_SSH_KNOWN_HOSTS": str(fleet.known_hosts),
    }
    return StdioServerParameters(
        command=sys.executable, args=["-m", "benchmarks.bench_ssh_exec", REFERENCE_FLAG], env=env, cwd=str(PROJECT)
    )


def serve_reference() -> None:
    """The reference server: bare_server.py's MCPServer with one tool that runs `true` over a warm asyncssh
    connection (opened on the first call), nothing else."""
    import asyncssh
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name="bare-ssh", log_level="WARNING")
    connections: list[asyncssh.SSHClientConnection] = []

    @server.tool()
    async def ssh_true() -> str:
        if not connections:
            connections.append(
                await asyncssh.connect(
                    os.environ["BENCH_SSH_ADDRESS"],
                    port=int(os.environ["BENCH_SSH_PORT"]),
                    username="root",
                    client_keys=[os.environ["BENCH_SSH_KEY"]],
                    known_hosts=asyncssh.read_known_hosts(os.environ["BENCH_SSH_KNOWN_HOSTS"]),
                    config=None,
                )
            )
        result = await connections[0].run("true")
        return str(result.exit_status)

    server.run("stdio")


async def main() -> bool:
    import asyncssh  # imported here, like relay-shell does on its first SSH call

    with tempfile.TemporaryDirectory(prefix="bench-ssh-exec-") as root, SshFleet(Path(root), 1) as fleet:
        fleet.trust()
        host = fleet.host(HOST)
        conn = await asyncssh.connect(
            host.address,
            port=host.port,
            username="root",
            client_keys=[str(fleet.client_key)],
            known_hosts=asyncssh.read_known_hosts(str(fleet.known_hosts)),
            config=None,
        )
        try:
            async with (
                relay_client(ssh_config=str(fleet.ssh_config)) as relay,
                bare_client() as bare,
                Client(reference_params(fleet, host), mode="legacy") as reference,
            ):

                async def relay_call() -> None:
                    result = await relay.call_tool("ssh_exec", {"host": HOST, "command": "true"})
                    assert not result.is_error, result

                async def bare_call() -> None:
                    await bare.call_tool("noop", {})

                async def direct_call() -> None:
                    result = await conn.run("true")
                    assert result.exit_status == 0, result

                async def reference_call() -> None:
                    result = await reference.call_tool("ssh_true", {})
                    assert not result.is_error, result

                parts: dict[str, list[float]] = {"round trip": [], "exec": []}

                async def floor_call() -> None:
                    started = time.perf_counter()
                    await bare_call()
                    between = time.perf_counter()
                    await direct_call()
                    parts["round trip"].append(between - started)
                    parts["exec"].append(time.perf_counter() - between)

                calls = (floor_call, reference_call, relay_call)
                for _ in range(WARMUP):  # every connection exists and is past its first session
                    for call in calls:
                        await call()
                parts = {"round trip": [], "exec": []}
                samples: dict[Callable[[], Awaitable[None]], list[float]] = {call: [] for call in calls}
                for _ in range(CALLS):
                    for call in calls:
                        samples[call] += await measure(call, 1)
        finally:
            conn.close()
            await conn.wait_closed()
    round_trip = median(parts["round trip"])
    exec_floor = median(parts["exec"])
    floor = median(samples[floor_call])
    ours = median(samples[relay_call])
    reference_median = median(samples[reference_call])
    ratio = ours / floor
    print(
        f"ssh exec: relay-shell {ours * 1000:.2f} ms, floor {floor * 1000:.2f} ms "
        f"(MCP round trip {round_trip * 1000:.2f} ms + asyncssh exec {exec_floor * 1000:.2f} ms), "
        f"ratio {ratio:.3f} (target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    print(
        f"  (for information: the bare server running the same asyncssh exec as its tool {reference_median * 1000:.2f}"
        f" ms, {reference_median / floor:.3f}× the floor; relay-shell is {ours / reference_median:.3f}× that)"
    )
    return ratio <= LIMIT


if __name__ == "__main__":
    if REFERENCE_FLAG in sys.argv[1:]:
        serve_reference()
    else:
        raise SystemExit(0 if anyio.run(main) else 1)
