"""ssh_fanout of `hostname` over real sshd fleets — 32 hosts, and 256 hosts on 127.0.1.1–127.0.2.0 — at the tool's
default concurrency, through a real stdio client: wall time vs a floor measured in the same run (≤ 1.10×), cold
and warm, each judged on its own; at 256 hosts also the server's RSS per connected host and Ansible side by side.

The floor is the best bare implementation at the same concurrency: one trivial MCP round trip on the bare server
plus the same commands issued by asyncio over asyncssh in this process, at most `concurrency` hosts at once (a
semaphore: a host starts the moment another finishes), with the options relay-shell's pool gives asyncssh
(user, client key file, known_hosts parsed once, no ssh_config, its cipher list).

Warm: relay-shell's pool already holds a connection to every host, and the floor's connections are open too;
both have run commands on them (sshd sets TCP_NODELAY only when a connection's first session starts).

Cold: connect, log in and run. For relay-shell, a freshly started server per round would also pay Python's
startup and the asyncssh import (~250 ms, made on a server's first SSH call), which the floor's process paid long
before. Instead one server runs with a short RELAY_SHELL_SSH_IDLE_TIMEOUT (3 s for 32 hosts, 12 s for 256: longer
than a round, so that no connection is reaped, and closed, inside the timed round: the floor closes its own after
the clock stops; checked after every round): before each cold round we wait until its reaper has closed every
pooled connection (server_info's `connections_open` is 0), so the round dials every host as a fresh server
would, in a process that is otherwise warm. That server first ran ssh_exec and ssh_fanout on a
spare host the rounds never touch (asyncssh imported, the code paths warm), as the floor's process first
connected to it. Every cold round of either side starts with sshd quiet: no session processes left from the
previous round. The order of the two alternates from round to round.

RSS per connected host (256 hosts): the cold server's VmRSS with all 256 connections pooled, less its VmRSS
before its first 256-host round (one spare connection made and reaped), over 256; and its peak (VmHWM) during a
cold round over the same base. (Python keeps freed memory for reuse, so the RSS after a later round's reaping is
no base.)

Ansible (256 hosts, for comparison, no target): `ansible -i INVENTORY all -m command -a hostname -f N` with N = 5
(Ansible's default forks) and N = 50, cold (a fresh ControlPersist directory: every host is dialed), over the same
hosts, user, key and known_hosts, once each: its wall time over relay-shell's cold median at the default
concurrency (and at concurrency 50). Needs `ansible-core` in the environment (pip install ansible-core); without
it the row says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from benchmarks.common import (
    FANOUT_32_COLD,
    Options,
    bare_client,
    child_pid_running,
    median,
    ratio_row,
    relay_client,
    reset_peak_rss,
    status_kib,
    verdict,
)
from benchmarks.common import Row as TableRow
from tests.sshd import SshFleet, SshHost  # run as `python -m benchmarks.…` from the project root, like the others

DEFAULT_CONCURRENCY = 16  # ssh_fanout's default (checked against the server's tools/list)
LIMIT = 1.10
COMMAND = "hostname"
QUIET_TIMEOUT = 60.0
ROUND_TRIPS = 20  # MCP round trips measured next to each cold round
ANSIBLE_FORKS = (5, 50)
RELAY_AT = 50  # relay-shell's concurrency for the Ansible -f 50 comparison


@dataclass
class Row:
    hosts: int
    warm_rounds: int
    cold_rounds: int
    first_address: str
    idle_timeout: str  # the cold server's RELAY_SHELL_SSH_IDLE_TIMEOUT: longer than a round
    ansible: bool = False


ROWS = (Row(32, 30, 11, "127.0.0.2", "3"), Row(256, 8, 5, "127.0.1.1", "12", ansible=True))


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


class DirectFleet:
    """The floor's SSH half: asyncssh in this process, at most `concurrency` hosts at once."""

    def __init__(self, fleet: SshFleet, hosts: list[SshHost], concurrency: int) -> None:
        import asyncssh  # relay-shell imports it on its first SSH call too

        from relay_shell.ssh.pool import ENCRYPTION_ALGS

        self.asyncssh = asyncssh
        self.encryption_algs = ENCRYPTION_ALGS
        self.fleet = fleet
        self.hosts = hosts
        self.concurrency = concurrency
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
            encryption_algs=self.encryption_algs,
        )

    async def open_all(self) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(host: SshHost) -> Any:
            async with gate:
                return await self.connect(host)

        self.connections = list(await asyncio.gather(*(one(host) for host in self.hosts)))

    async def run_all(self) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(connection: Any) -> None:
            async with gate:
                result = await connection.run(COMMAND)
            assert result.exit_status == 0 and result.stdout, result

        await asyncio.gather(*(one(connection) for connection in self.connections))

    async def cold(self) -> None:
        """Connect, log in and run on every host, `concurrency` at once (closing afterwards is not timed)."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(host: SshHost) -> Any:
            async with gate:
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


async def relay_fanout(relay: Client, names: list[str], concurrency: int | None = None) -> None:
    arguments: dict[str, Any] = {"command": COMMAND, "hosts": names}
    if concurrency is not None:
        arguments["concurrency"] = concurrency
    result = await relay.call_tool("ssh_fanout", arguments)
    content = result.structured_content or {}
    summary = content.get("summary") or {}
    assert not result.is_error and summary.get("ok") == len(names), (summary, result.content)


async def default_concurrency(relay: Client) -> int:
    tools = await relay.list_tools()
    schema = next(tool.input_schema for tool in tools.tools if tool.name == "ssh_fanout")
    return int(schema["properties"]["concurrency"]["default"])


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


@dataclass
class Samples:
    relay: list[float] = field(default_factory=list)
    direct: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    rss_per_host_kib: float = 0.0
    peak_per_host_kib: float = 0.0
    relay_at_ansible: list[float] = field(default_factory=list)


async def warm_phase(row: Row, names: list[str], direct: DirectFleet, fleet: SshFleet) -> Samples:
    samples = Samples()
    await direct.open_all()
    try:
        async with relay_client(ssh_config=str(fleet.ssh_config)) as relay, bare_client() as bare:
            assert await default_concurrency(relay) == DEFAULT_CONCURRENCY
            for _ in range(3):  # every pooled connection exists and is past its first session
                await relay_fanout(relay, names)
                await direct.run_all()
                await bare.call_tool("noop", {})
            assert await pool_size(relay) == len(names)
            for index in range(row.warm_rounds):  # alternate which goes first, so noise hits both alike
                pair = [(samples.relay, lambda: relay_fanout(relay, names)), (samples.direct, direct.run_all)]
                for into, call in pair if index % 2 == 0 else reversed(pair):
                    into.append(await timed(call))
                for _ in range(2):
                    samples.bare.append(await timed(lambda: bare.call_tool("noop", {})))
            assert await pool_size(relay) == len(names)  # still warm: nothing was reaped or redialed
    finally:
        await direct.close_all()
    return samples


async def cold_phase(row: Row, names: list[str], direct: DirectFleet, fleet: SshFleet, spare: SshHost) -> Samples:
    samples = Samples()
    async with (
        relay_client(ssh_config=str(fleet.ssh_config), ssh_idle_timeout=row.idle_timeout) as relay,
        bare_client() as bare,
    ):
        server = child_pid_running("relay_shell")
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
        empty_kib: list[int] = []
        full_kib: list[int] = []
        peak_kib: list[int] = []

        async def relay_cold() -> None:
            await wait_quiet(fleet, relay)
            empty_kib.append(status_kib(server, "VmRSS"))
            reset_peak_rss(server)
            samples.relay.append(await timed(lambda: relay_fanout(relay, names)))
            full_kib.append(status_kib(server, "VmRSS"))
            peak_kib.append(status_kib(server, "VmHWM"))
            pooled = await pool_size(relay)
            assert pooled == len(names), f"{pooled} of {len(names)} pooled: the reaper closed some inside the round"

        async def direct_cold() -> None:
            await wait_quiet(fleet)
            samples.direct.append(await timed(direct.cold))
            await direct.close_all()

        for index in range(row.cold_rounds):
            for _ in range(ROUND_TRIPS):
                samples.bare.append(await timed(lambda: bare.call_tool("noop", {})))
            for side in (relay_cold, direct_cold) if index % 2 == 0 else (direct_cold, relay_cold):
                await side()
        if row.ansible:
            await wait_quiet(fleet, relay)
            samples.relay_at_ansible.append(await timed(lambda: relay_fanout(relay, names, RELAY_AT)))
        base = float(empty_kib[0])
        samples.rss_per_host_kib = (median([float(value) for value in full_kib]) - base) / len(names)
        samples.peak_per_host_kib = (median([float(value) for value in peak_kib]) - base) / len(names)
    return samples


def ansible_run(fleet: SshFleet, hosts: list[SshHost], forks: int, work: Path) -> float | str:
    """Wall time of one cold `ansible … -m command -a hostname -f forks`, or why it could not run."""
    ansible = shutil.which("ansible", path=os.path.dirname(sys.executable)) or shutil.which("ansible")
    if ansible is None:
        return "ansible-core is not installed in this environment (pip install ansible-core)"
    inventory = work / "inventory.ini"
    lines = ["[fleet]"]
    lines += [
        f"{host.alias} ansible_host={host.address} ansible_port={host.port} ansible_user=root "
        f"ansible_ssh_private_key_file={fleet.client_key} ansible_python_interpreter=/usr/bin/python3"
        for host in hosts
    ]
    inventory.write_text("\n".join(lines) + "\n")
    control = work / f"cp-{forks}"
    control.mkdir()
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(work / "none.cfg"),  # no user or project config
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),  # cold: no ControlPersist master exists yet
        "ANSIBLE_SSH_ARGS": f"-o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile={fleet.known_hosts} "
        "-o StrictHostKeyChecking=yes",
        "ANSIBLE_LOCAL_TEMP": str(work / "local-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
    }
    command = [ansible, "-i", str(inventory), "all", "-m", "command", "-a", COMMAND, "-f", str(forks)]
    started = time.perf_counter()
    finished = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    changed = finished.stdout.count("| CHANGED |")
    if finished.returncode != 0 or changed != len(hosts):
        return f"ansible failed (exit {finished.returncode}, {changed} of {len(hosts)} hosts): {finished.stdout[-500:]}"
    stop_control_masters(control)
    return elapsed


def stop_control_masters(control: Path) -> None:
    """Ansible's ControlPersist masters (ssh processes serving sockets in `control`) would linger for 60 s: stop
    them, by pid, so the fleet is quiet again."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if str(control).encode() in cmdline and cmdline.startswith(b"ssh"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGTERM)


def report(label: str, samples: Samples) -> tuple[float, str]:
    round_trip = median(samples.bare)
    ssh_floor = median(samples.direct)
    floor = round_trip + ssh_floor
    ours = median(samples.relay)
    ratio = ours / floor
    spread = f"{min(samples.relay) / floor:.2f}–{max(samples.relay) / floor:.2f}"
    line = (
        f"{label}: relay-shell {ours * 1000:.0f} ms, floor {floor * 1000:.0f} ms (MCP round trip "
        f"{round_trip * 1000:.2f} ms + asyncssh {ssh_floor * 1000:.0f} ms), ratio {ratio:.3f} (rounds {spread}) "
        f"(target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    return ratio, line


async def measure_row(row: Row) -> list[TableRow]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-ssh-fanout-") as root,
        SshFleet(Path(root) / "fleet", row.hosts + 1, first_address=row.first_address) as fleet,
    ):
        fleet.trust()
        hosts, spare = fleet.hosts[: row.hosts], fleet.hosts[row.hosts]
        names = [host.alias for host in hosts]
        direct = DirectFleet(fleet, hosts, DEFAULT_CONCURRENCY)
        warm = await warm_phase(row, names, direct, fleet)
        await wait_quiet(fleet)
        cold = await cold_phase(row, names, direct, fleet, spare)
        ansible: dict[int, float | str] = {}
        if row.ansible:
            for forks in ANSIBLE_FORKS:
                await wait_quiet(fleet)
                work = Path(root) / f"ansible-{forks}"
                work.mkdir()
                ansible[forks] = await anyio.to_thread.run_sync(ansible_run, fleet, hosts, forks, work)
    what = f"ssh fanout ({row.hosts} hosts, concurrency {DEFAULT_CONCURRENCY} = default)"
    warm_ratio, warm_line = report("warm", warm)
    cold_ratio, cold_line = report("cold", cold)
    print(f"{what} {warm_line}")
    print(f"{what} {cold_line}")
    if row.hosts >= 256:
        print(
            f"  server RSS per connected host: {cold.rss_per_host_kib:.0f} KiB with {row.hosts} pooled "
            f"(peak during a cold round {cold.peak_per_host_kib:.0f} KiB per host)"
        )
    for forks, outcome in ansible.items():
        if isinstance(outcome, str):
            print(f"  ansible -f {forks}: not measured: {outcome}")
            continue
        ours = median(cold.relay) if forks == 5 else cold.relay_at_ansible[0]
        at = DEFAULT_CONCURRENCY if forks == 5 else RELAY_AT
        print(
            f"  ansible -m command -f {forks}, cold: {outcome:.1f} s; relay-shell (concurrency {at}, cold) "
            f"{ours:.2f} s: Ansible takes {outcome / ours:.1f}× as long"
        )
    named = f"fan-out, {row.hosts} hosts, default concurrency, {{}}, vs the asyncio floor"
    cold_name = FANOUT_32_COLD if row.hosts == 32 else named.format("cold")
    return [ratio_row(named.format("warm"), warm_ratio, LIMIT), ratio_row(cold_name, cold_ratio, LIMIT)]


async def measure(hosts: tuple[int, ...] = (32, 256)) -> list[TableRow]:
    measured: list[TableRow] = []
    for row in ROWS:
        if row.hosts in hosts:
            measured += await measure_row(row)
    return measured


def rows(options: Options) -> list[TableRow]:
    return anyio.run(measure)


async def main(hosts: tuple[int, ...] = (32, 256)) -> bool:
    return all(row.passed for row in await measure(hosts))


if __name__ == "__main__":
    chosen = tuple(int(value) for value in sys.argv[1:]) or (32, 256)
    raise SystemExit(0 if anyio.run(main, chosen) else 1)
