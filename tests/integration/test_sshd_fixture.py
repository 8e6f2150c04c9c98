"""The real-sshd test helper (tests/sshd.py) works, checked with asyncssh directly."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import asyncssh
import pytest

from tests.procs import alive
from tests.sshd import Blackhole, SshFleet, SshHost, refused_port


async def connect(fleet: SshFleet, host: SshHost, **options: object) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        host.address,
        port=host.port,
        username="root",
        client_keys=[fleet.client_key],
        known_hosts=str(fleet.known_hosts),
        config=None,
        **options,
    )


@pytest.mark.anyio
async def test_fleet_hosts_run_commands(tmp_path: Path) -> None:
    with SshFleet(tmp_path, 3) as fleet:
        assert [h.alias for h in fleet.hosts] == ["h01", "h02", "h03"]
        assert [h.address for h in fleet.hosts] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        assert fleet.known_hosts.read_text() == ""
        assert "Host h02\n" in fleet.ssh_config.read_text()
        assert (fleet.client_key.stat().st_mode & 0o777) == 0o600
        assert all((h.host_key.stat().st_mode & 0o777) == 0o600 for h in fleet.hosts)
        assert len({h.host_key_line().split()[2] for h in fleet.hosts}) == 3  # one key per host
        fleet.trust()
        for host in fleet.hosts:
            assert host.pid is not None
            async with await connect(fleet, host) as conn:
                result = await conn.run("hostname; echo ok; echo $SHLVL", check=True)
                assert isinstance(result.stdout, str)
                assert result.stdout.splitlines()[1:] == ["ok", "2"]
        with anyio.fail_after(5):  # closed connections: their sshd processes exit
            while fleet.descendants():
                await anyio.sleep(0.01)
    assert all(h.pid is None for h in fleet.hosts)


@pytest.mark.anyio
async def test_rotated_host_key_is_not_trusted(tmp_path: Path) -> None:
    with SshFleet(tmp_path, 2) as fleet:
        fleet.trust()
        host = fleet.host("h01")
        old_line, port = host.host_key_line(), host.port
        fleet.rotate_host_key("h01")
        assert host.port == port and host.host_key_line() != old_line
        with pytest.raises(asyncssh.HostKeyNotVerifiable):
            await connect(fleet, host)
        async with await connect(fleet, fleet.host("h02")) as conn:  # the other host is untouched
            assert (await conn.run("echo ok", check=True)).stdout == "ok\n"
        fleet.trust("h01")
        async with await connect(fleet, host) as conn:
            assert (await conn.run("echo ok", check=True)).stdout == "ok\n"


@pytest.mark.anyio
async def test_stopped_host_refuses(tmp_path: Path) -> None:
    with SshFleet(tmp_path, 2) as fleet:
        fleet.trust()
        fleet.stop_host("h02")
        assert fleet.host("h02").pid is None
        with pytest.raises(ConnectionRefusedError):
            await connect(fleet, fleet.host("h02"))
        async with await connect(fleet, fleet.host("h01")) as conn:
            assert (await conn.run("echo ok", check=True)).stdout == "ok\n"


def test_refused_port() -> None:
    port = refused_port("127.0.0.5")
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.5", port))


@pytest.mark.anyio
async def test_blackhole_times_out() -> None:
    with Blackhole("127.0.0.6") as hole:
        with anyio.fail_after(5), pytest.raises(TimeoutError):
            await asyncssh.connect(
                hole.address, port=hole.port, username="root", known_hosts=None, config=None, connect_timeout=0.5
            )
        assert hole.connections == 1
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect((hole.address, hole.port))


@pytest.mark.anyio
async def test_stop_kills_sessions(tmp_path: Path) -> None:
    fleet = SshFleet(tmp_path, 2)
    with fleet:
        fleet.trust()
        conn = await connect(fleet, fleet.host("h01"))
        try:
            # Foreground session: `exec` keeps the pid, so $$ is the pid of sleep.
            process = await conn.create_process("echo $$; exec sleep 300")
            pid = int(await process.stdout.readline())
            # Detached session process: reparented to init, found by sshd's marker variable.
            result = await conn.run("setsid sleep 301 </dev/null >/dev/null 2>&1 & echo $!", check=True)
            assert isinstance(result.stdout, str)
            detached = int(result.stdout)
            with anyio.fail_after(5):
                while detached not in fleet.descendants():
                    await anyio.sleep(0.01)
            assert alive(pid) and alive(detached)
            assert pid in fleet.descendants()
        finally:
            conn.abort()
    assert fleet.descendants() == []
    assert not alive(pid), "the foreground session process survived stop()"
    assert not Path(f"/proc/{pid}").exists(), "its parent should have reaped it"
    assert not alive(detached), "the detached session process survived stop()"
    fleet.stop()  # idempotent
    assert (tmp_path / "h01.log").exists()
