"""The SSH connection pool against real sshd: identity keys, shared dials, channel limits (the server's
MaxSessions), eviction and the idle reaper."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.pool import ConnectFailed, SshPool
from relay_shell.ssh.remote_exec import run_remote
from relay_shell.ssh.target import Route, resolve_route
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=2)]  # `fleet`: tests/conftest.py


@pytest.fixture(scope="module")
def tight_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshFleet]:
    """A server that allows only 2 channels per connection (sshd MaxSessions 2)."""
    with SshFleet(tmp_path_factory.mktemp("tight"), 1, first_octet=40, max_sessions=2) as running:
        running.trust()
        yield running


def _pool(**overrides: float) -> SshPool:
    settings: dict[str, float] = {
        "max_connections": 16,
        "max_channels": 10,
        "idle_timeout": 300,
        "connect_timeout": 5,
        "keepalive": 30,
    }
    settings.update(overrides)
    return SshPool(**settings)  # type: ignore[arg-type]


def _route(fleet: SshFleet, alias: str, known_hosts: str | None = None) -> Route:
    inventory = Inventory(fleet.ssh_config, None)
    return resolve_route(
        inventory,
        alias,
        user=None,
        port=None,
        key_path=None,
        known_hosts=known_hosts,
        jump=None,
        default_mode="accept-new",
    )


async def _run(pool: SshPool, route: Route, command: str) -> str:
    outcome = await run_remote(
        pool, route, command, stdin=None, timeout=10, budget=4096, merge_stderr=True, progress=None
    )
    assert outcome.exit_code == 0, outcome
    return outcome.stdout.text


async def test_concurrent_calls_share_one_dial(fleet: SshFleet) -> None:
    pool = _pool()
    route = _route(fleet, "h01")
    outputs = await asyncio.gather(*(_run(pool, route, f"echo {number}") for number in range(8)))
    assert outputs == [f"{number}\n" for number in range(8)]
    assert pool.count() == 1  # eight cold calls, one connection attempt
    await pool.close_all()


async def test_more_calls_than_channels_open_a_second_connection(fleet: SshFleet) -> None:
    pool = _pool()
    route = _route(fleet, "h01")
    outputs = await asyncio.gather(*(_run(pool, route, f"sleep 0.5; echo {number}") for number in range(15)))
    assert outputs == [f"{number}\n" for number in range(15)]
    assert pool.count() == 2  # 10 channels on the first, 5 on the second
    await pool.close_all()


async def test_a_server_with_fewer_sessions_lowers_the_limit(tight_fleet: SshFleet) -> None:
    pool = _pool()
    route = _route(tight_fleet, "h01")
    outputs = await asyncio.gather(*(_run(pool, route, f"sleep 0.3; echo {number}") for number in range(6)))
    assert outputs == [f"{number}\n" for number in range(6)]
    # Refused connections were retired (their limit fell to what they held) and fresh ones dialed instead.
    assert all(connection.in_use == 0 for items in pool.connections.values() for connection in items)
    await pool.close_all()


async def test_identity_decides_reuse(fleet: SshFleet) -> None:
    pool = _pool()
    await _run(pool, _route(fleet, "h01"), "true")
    await _run(pool, _route(fleet, "h01", known_hosts="strict"), "true")
    await _run(pool, _route(fleet, "h01", known_hosts="ignore"), "true")
    await _run(pool, _route(fleet, "h01", known_hosts="strict"), "true")
    assert pool.count() == 3  # one per host-key mode; the second strict call reused its own
    identities = {identity[-1].known_hosts_mode for identity in pool.connections}
    assert identities == {"accept-new", "strict", "ignore"}
    await pool.close_all()


async def test_full_pool_evicts_the_idle_connection(fleet: SshFleet) -> None:
    pool = _pool(max_connections=1)
    await _run(pool, _route(fleet, "h01"), "true")
    await _run(pool, _route(fleet, "h02"), "true")
    assert pool.count() == 1
    assert next(iter(pool.connections))[-1].name == "h02"
    await pool.close_all()


async def test_full_pool_waits_for_a_busy_connection(fleet: SshFleet) -> None:
    pool = _pool(max_connections=1)
    busy = asyncio.create_task(_run(pool, _route(fleet, "h01"), "sleep 0.5; echo first"))
    await asyncio.sleep(0.2)
    second = await _run(pool, _route(fleet, "h02"), "echo second")
    assert (await busy, second) == ("first\n", "second\n")
    await pool.close_all()


async def test_reaper_closes_idle_connections(fleet: SshFleet) -> None:
    pool = _pool(idle_timeout=0.2)
    await _run(pool, _route(fleet, "h01"), "true")
    connection = next(iter(pool.connections.values()))[0]
    await asyncio.sleep(0.3)
    pool.reap()
    assert pool.count() == 0
    await asyncio.wait_for(connection.connection.wait_closed(), 2)


async def test_a_lost_connection_leaves_the_pool(fleet: SshFleet, tmp_path: Path) -> None:
    pool = _pool()
    route = _route(fleet, "h02")
    await _run(pool, route, "true")
    connection = next(iter(pool.connections.values()))[0]
    connection.connection.abort()
    await asyncio.wait_for(connection.connection.wait_closed(), 2)
    assert await _run(pool, route, "echo again") == "again\n"  # a new connection, not the dead one
    assert pool.count() == 1
    await pool.close_all()


async def test_proxy_command_from_ssh_config_carries_the_connection(tmp_path: Path) -> None:
    """ssh_config's ProxyCommand (here real OpenSSH `ssh -W` through h01) is how the host is reached."""
    with SshFleet(tmp_path / "fleet", 2, first_octet=60) as proxy_fleet:
        proxy_fleet.trust()
        marker = tmp_path / "proxy-ran"
        target = proxy_fleet.hosts[1]
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host viaproxy\n  HostName {target.address}\n  Port {target.port}\n  User root\n"
            f"  IdentityFile {proxy_fleet.client_key}\n"
            f"  ProxyCommand sh -c 'touch {marker}; exec ssh -F {proxy_fleet.ssh_config} -o BatchMode=yes "
            "-W %h:%p h01'\n" + proxy_fleet.ssh_config.read_text()
        )
        route = resolve_route(
            Inventory(config, None),
            "viaproxy",
            user=None,
            port=None,
            key_path=None,
            known_hosts=None,
            jump=None,
            default_mode="strict",
        )
        assert route.target.proxy_command is not None and "-W 127.0.0.61:" in route.target.proxy_command
        pool = _pool()
        assert await _run(pool, route, "echo through-proxy") == "through-proxy\n"
        assert marker.exists()
        await pool.close_all()
        proxy_fleet.stop_host("h01")  # without the proxy's hop the host cannot be reached this way
        pool = _pool(connect_timeout=3)
        with pytest.raises(ConnectFailed):
            await _run(pool, route, "echo unreachable")
        await pool.close_all()


async def test_a_full_pool_still_dials_the_jump_host_its_targets_need(fleet: SshFleet) -> None:
    """Every slot may be taken by target dials waiting for their jump connection: that one must not wait too."""
    pool = _pool(max_connections=1)
    inventory = Inventory(fleet.ssh_config, None)
    route = resolve_route(
        inventory, "h02", user=None, port=None, key_path=None, known_hosts=None, jump="h01", default_mode="accept-new"
    )
    assert await _run(pool, route, "echo via-h01") == "via-h01\n"
    await pool.close_all()
