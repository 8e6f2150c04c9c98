"""Host-key trust against real sshd: a key known under one spelling of a host is that host's key under every
spelling, directly and through a jump host; readonly mode never trusts a new key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.pool import ConnectFailed, SshPool
from relay_shell.ssh.remote_exec import run_remote
from relay_shell.ssh.target import resolve_route
from tests.conftest import connect, text_of
from tests.sshd import SshFleet

pytestmark = pytest.mark.anyio


@pytest.fixture
def fresh_fleet(tmp_path: Path) -> Iterator[SshFleet]:
    """Three sshd hosts on 127.0.0.50-52 (the spellings below are of these addresses), started for each test
    and trusted by none: each test changes host keys or known_hosts and starts from an empty known_hosts, which
    the shared `fleet` (one per module, all hosts trusted by default) cannot give."""
    with SshFleet(tmp_path / "fleet", 3, first_octet=50) as running:
        yield running


async def _run(fleet: SshFleet, host: str, jump: str | None = None, key: bool = False) -> str:
    pool = SshPool(max_connections=8, max_channels=10, idle_timeout=60, connect_timeout=5, keepalive=30)
    route = resolve_route(
        Inventory(fleet.ssh_config, None),
        host,
        user=None,
        port=None,
        key_path=str(fleet.client_key) if key else None,
        known_hosts=None,
        jump=jump,
        default_mode="accept-new",
    )
    try:
        outcome = await run_remote(
            pool, route, "echo reached", stdin=None, timeout=10, budget=1024, merge_stderr=True, progress=None
        )
        return outcome.stdout.text
    except ConnectFailed as exc:
        return f"{exc.kind}: {exc}"
    finally:
        await pool.close_all()


async def test_a_changed_key_is_refused_under_every_spelling(fresh_fleet: SshFleet) -> None:
    first = fresh_fleet.hosts[0]
    fresh_fleet.trust(first.alias)
    fresh_fleet.rotate_host_key(first.alias)
    before = fresh_fleet.known_hosts.read_bytes()
    for spelling in ["h01", first.address, "0x7f000032", "2130706482", "127.50", f"[::ffff:{first.address}]"]:
        host = spelling if spelling == "h01" else f"root@{spelling}:{first.port}"
        result = await _run(fresh_fleet, host)
        assert result.startswith("HostKeyMismatch"), (spelling, result)
    assert fresh_fleet.known_hosts.read_bytes() == before  # a changed key is never appended


async def test_a_changed_key_behind_a_jump_host_is_refused(fresh_fleet: SshFleet) -> None:
    fresh_fleet.trust()
    target = fresh_fleet.hosts[2]
    fresh_fleet.rotate_host_key(target.alias)
    before = fresh_fleet.known_hosts.read_bytes()
    for spelling in [target.address, "127.52", "2130706484"]:
        result = await _run(fresh_fleet, f"root@{spelling}:{target.port}", jump="h02")
        assert result.startswith("HostKeyMismatch"), (spelling, result)
    assert await _run(fresh_fleet, "h01", jump="h02") == "reached\n"  # the jump itself works
    assert fresh_fleet.known_hosts.read_bytes() == before


async def test_readonly_mode_does_not_trust_new_host_keys(fresh_fleet: SshFleet, tmp_path: Path) -> None:
    async with connect(
        tmp_path / "audit.jsonl", ssh_config=str(fresh_fleet.ssh_config), policy_mode="readonly"
    ) as client:
        result = await client.call_tool("ssh_check", {"hosts": "h01,h02"})
        text = text_of(result)
        assert text.startswith("[ERROR: NoHostReached: check 2 hosts: 2 hostkey_rejected"), text  # adr/0016
        assert "HostKeyUnknown" in text
    assert fresh_fleet.known_hosts.read_bytes() == b""


async def test_revoked_keys_are_refused_under_every_spelling(fresh_fleet: SshFleet) -> None:
    first = fresh_fleet.hosts[0]
    key_line = first.host_key_line().split(" ", 1)[1]
    for revoked_as, dialed in [
        (f"[h01]:{first.port}", "h01"),  # revoked under the alias, dialed by the alias
        (f"[{first.address}]:{first.port}", f"root@127.50:{first.port}"),  # under the address, dialed in short form
        (f"[{first.address}]:{first.port}", "h01"),
    ]:
        fresh_fleet.known_hosts.write_text(f"@revoked {revoked_as} {key_line}\n")
        result = await _run(fresh_fleet, dialed, key=True)
        assert result.startswith("HostKeyRevoked"), (revoked_as, dialed, result)
        assert fresh_fleet.known_hosts.read_text() == f"@revoked {revoked_as} {key_line}\n"  # nothing appended


async def test_the_same_key_under_another_spelling_is_trusted_and_other_ports_are_other_hosts(
    fresh_fleet: SshFleet,
) -> None:
    first, second = fresh_fleet.hosts[0], fresh_fleet.hosts[1]
    # h01's own key, recorded under its alias (as `ssh h01` with HostKeyAlias would): the same host.
    fresh_fleet.known_hosts.write_text(f"[h01]:{first.port} {first.host_key_line().split(' ', 1)[1]}\n")
    assert await _run(fresh_fleet, f"root@{first.address}:{first.port}", key=True) == "reached\n"
    # A key recorded for port 22 of an address says nothing about another sshd on another port of it.
    fresh_fleet.known_hosts.write_text(f"{second.address} {first.host_key_line().split(' ', 1)[1]}\n")
    assert await _run(fresh_fleet, "h02") == "reached\n"
    assert f"[{second.address}]:{second.port}" in fresh_fleet.known_hosts.read_text()  # trusted on first use
