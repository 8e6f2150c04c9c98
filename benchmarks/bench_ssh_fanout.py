"""ssh_fanout of `hostname` over 32 real sshd hosts (concurrency 32) through a real stdio client: wall time vs a
floor of one trivial MCP round trip on the bare server plus the same 32 commands issued at once with
asyncio.gather over asyncssh in this process (≤ 1.10×), warm and cold, each reported and judged on its own.

Warm: relay-shell's pool already holds a connection to every host, and the floor's 32 connections are open
too; both have run commands on them (sshd sets TCP_NODELAY only when a connection's first session starts).

Cold: connect, log in and run. The floor is 32 concurrent `asyncssh.connect` + `run`. For relay-shell, a
freshly started server per round would also pay Python's startup and the asyncssh import (~250 ms, made on a
server's first SSH call), which the floor's process paid long before; a different spelling of each host per
round would get new pool entries but leave the earlier connections open, so sshd would serve more and more of
them. Instead one server runs with RELAY_SHELL_SSH_IDLE_TIMEOUT=1: before each cold round we wait until its
reaper has closed every pooled connection (server_info's `connections_open` is 0), so the round dials all 32
hosts exactly as a fresh server would, in a process that is otherwise warm. That server first ran ssh_exec and
ssh_fanout on a 33rd host that the rounds never touch (asyncssh imported, the code paths warm), as the floor's
process first connected to that host. Every cold round of either side starts with sshd quiet: no session
processes left from the previous round (closed connections' sshd children have exited). The order of the two
alternates from round to round.

Both floors use the options relay-shell's pool gives asyncssh: user, client key file, known_hosts parsed once,
no ssh_config. The warm phase uses its own server with default settings, closed before the cold phase starts.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from benchmarks.common import bare_client, median, relay_client, verdict
from tests.sshd import SshFleet, SshHost  # run as `python -m benchmarks.…` from the project root, like the others

HOSTS = 32
WARM_ROUNDS = 30
WARMUP = 5
COLD_ROUNDS = 11
ROUND_TRIPS = 20  # MCP round trips measured next to each cold round
LIMIT = 1.10
COMMAND = "hostname"
IDLE_TIMEOUT = "1"
QUIET_TIMEOUT = 15.0


async def timed(call: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


class DirectFleet:
    """The floor's SSH half: asyncssh in this process, connected with the options relay-shell's pool uses."""

    def __init__(self, fleet: SshFleet, hosts: list[SshHost]) -> None:
        import asyncssh  # relay-shell imports it on its first SSH call too

        self.asyncssh = asyncssh
        self.fleet = fleet
        self.hosts = hosts
        self.known_hosts = asyncssh.read_known_hosts(str(fleet.known_hosts))
        self.connections: list[Any] = []

    async def connect(self, host: SshHost) -> Any:
        return await self.asyncssh.connect(
            host.address,
            port=host.port,
            username="root",
            client_keys=[str(self.fleet.client_key)],
            known_hosts=self.known_hosts,
            config=None,
        )

    async def open_all(self) -> None:
        self.connections = list(await asyncio.gather(*(self.connect(host) for host in self.hosts)))

    async def run_all(self) -> None:
        results = await asyncio.gather(*(connection.run(COMMAND) for connection in self.connections))
        assert all(result.exit_status == 0 and result.stdout for result in results), results

    async def cold(self) -> None:
        """Connect, log in and run on every host at once (the closing afterwards is not timed)."""

        async def one(host: SshHost) -> Any:
            connection = await self.connect(host)
            result = await connection.run(COMMAND)
            assert result.exit_status == 0 and result.stdout, result
            return connection

        self.connections = list(await asyncio.gather(*(one(host) for host in self.hosts)))

    async def close_all(self) -> None:
        for connection in self.connections:
            connection.close()
        await asyncio.gather(*(connection.wait_closed() for connection in self.connections))
        self.connections = []


def fanout_args(names: list[str]) -> dict[str, Any]:
    return {"command": COMMAND, "hosts": names, "concurrency": len(names)}


async def relay_fanout(relay: Client, names: list[str]) -> None:
    result = await relay.call_tool("ssh_fanout", fanout_args(names))
    content = result.structured_content or {}
    summary = content.get("summary") or {}
    assert not result.is_error and summary.get("ok") == len(names), (summary, result.content)


async def pool_size(relay: Client) -> int:
    result = await relay.call_tool("server_info", {})
    assert result.structured_content is not None, result
    return int(result.structured_content["info"]["ssh"]["connections_open"])


async def wait_quiet(fleet: SshFleet, relay: Client | None = None) -> None:
    """Until relay-shell's pool is empty (if given) and no sshd session process is left from earlier rounds."""
    deadline = time.monotonic() + QUIET_TIMEOUT
    while (relay is not None and await pool_size(relay)) or fleet.descendants():
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd fleet or relay-shell's pool not idle after {QUIET_TIMEOUT:.0f} s")
        await anyio.sleep(0.05)


async def warm_phase(fleet: SshFleet, names: list[str], direct: DirectFleet) -> tuple[list[float], ...]:
    relay_samples: list[float] = []
    direct_samples: list[float] = []
    bare_samples: list[float] = []
    await direct.open_all()
    try:
        async with relay_client(ssh_config=str(fleet.ssh_config)) as relay, bare_client() as bare:
            for _ in range(WARMUP):  # every pooled connection exists and is past its first session
                await relay_fanout(relay, names)
                await direct.run_all()
                await bare.call_tool("noop", {})
            assert await pool_size(relay) == len(names)
            for index in range(WARM_ROUNDS):  # alternate which goes first, so noise hits both alike
                pair = [
                    (relay_samples, lambda: relay_fanout(relay, names)),
                    (direct_samples, direct.run_all),
                ]
                for samples, call in pair if index % 2 == 0 else reversed(pair):
                    samples.append(await timed(call))
                for _ in range(2):
                    bare_samples.append(await timed(lambda: bare.call_tool("noop", {})))
            assert await pool_size(relay) == len(names)  # still warm: nothing was reaped or redialed
    finally:
        await direct.close_all()
    return relay_samples, direct_samples, bare_samples


async def cold_phase(fleet: SshFleet, names: list[str], direct: DirectFleet, spare: SshHost) -> tuple[list[float], ...]:
    relay_samples: list[float] = []
    direct_samples: list[float] = []
    bare_samples: list[float] = []
    async with (
        relay_client(ssh_config=str(fleet.ssh_config), ssh_idle_timeout=IDLE_TIMEOUT) as relay,
        bare_client() as bare,
    ):
        # asyncssh imported and the connect paths run, in both processes, on a host the rounds never touch.
        exec_result = await relay.call_tool("ssh_exec", {"host": spare.alias, "command": COMMAND})
        assert not exec_result.is_error, exec_result
        await relay_fanout(relay, [spare.alias])
        connection = await direct.connect(spare)
        await connection.run(COMMAND)
        connection.close()
        await connection.wait_closed()
        for _ in range(ROUND_TRIPS):
            await bare.call_tool("noop", {})

        async def relay_cold() -> None:
            await wait_quiet(fleet, relay)
            relay_samples.append(await timed(lambda: relay_fanout(relay, names)))

        async def direct_cold() -> None:
            await wait_quiet(fleet)
            direct_samples.append(await timed(direct.cold))
            await direct.close_all()

        for index in range(COLD_ROUNDS):
            for _ in range(ROUND_TRIPS):
                bare_samples.append(await timed(lambda: bare.call_tool("noop", {})))
            for side in (relay_cold, direct_cold) if index % 2 == 0 else (direct_cold, relay_cold):
                await side()
    return relay_samples, direct_samples, bare_samples


def report(label: str, samples: tuple[list[float], ...]) -> tuple[float, str]:
    relay_samples, direct_samples, bare_samples = samples
    round_trip = median(bare_samples)
    ssh_floor = median(direct_samples)
    floor = round_trip + ssh_floor
    ours = median(relay_samples)
    ratio = ours / floor
    line = (
        f"{label}: relay-shell {ours * 1000:.1f} ms, floor {floor * 1000:.1f} ms (MCP round trip "
        f"{round_trip * 1000:.2f} ms + asyncssh gather {ssh_floor * 1000:.1f} ms), ratio {ratio:.3f} "
        f"(target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    return ratio, line


async def main() -> bool:
    with tempfile.TemporaryDirectory(prefix="bench-ssh-fanout-") as root, SshFleet(Path(root), HOSTS + 1) as fleet:
        fleet.trust()
        hosts, spare = fleet.hosts[:HOSTS], fleet.hosts[HOSTS]
        names = [host.alias for host in hosts]
        direct = DirectFleet(fleet, hosts)
        warm = await warm_phase(fleet, names, direct)
        await wait_quiet(fleet)
        cold = await cold_phase(fleet, names, direct, spare)
    warm_ratio, warm_line = report("warm", warm)
    cold_ratio, cold_line = report("cold", cold)
    ok = warm_ratio <= LIMIT and cold_ratio <= LIMIT
    print(f"ssh fanout ({HOSTS} hosts, concurrency {HOSTS}) {warm_line}")
    print(f"ssh fanout ({HOSTS} hosts, concurrency {HOSTS}) {cold_line}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
