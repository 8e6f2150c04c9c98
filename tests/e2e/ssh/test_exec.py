"""End to end: ssh_exec, host-key trust and the connection pool, through a real relay-shell stdio server
against a real OpenSSH fleet (tests/sshd.py; the servers: tests/e2e/ssh/conftest.py).

One fleet and one server serve the whole module (a server costs ~0.7 s to start); a second server in
guarded policy mode checks that `known_hosts="ignore"` is refused there. Hosts have fixed roles so that the
tests do not depend on each other's trust side effects:

    h01 h02 h03   trusted from the start: exec, timeouts, pool, jump hosts
    h04           unknown: the first call trusts it (accept-new) and appends one known_hosts line
    h05           unknown: strict mode refuses it (HostKeyUnknown), it must never be appended
    h06           trusted, then its host key is rotated (HostKeyMismatch; `ignore` still works)
    h07           trusted, then stopped after a warm call (ConnectionRefused on a pooled host)
    h08           trusted: a connection whose every channel times out at once

The fleet's ssh_config gives every alias its address, port, user root, the client key and
`UserKnownHostsFile fleet.known_hosts`; the server reads it through RELAY_SHELL_SSH_CONFIG.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import assert_error, fields, text_of
from tests.e2e.ssh.exec_helpers import (
    fingerprint,
    host_key_fingerprint,
    last_record,
    marker,
    pids_running,
    ssh_connections,
    ssh_exec,
    wait_gone,
)
from tests.sshd import Blackhole, SshFleet, refused_port

CONNECT_TIMEOUT = "1"  # RELAY_SHELL_SSH_CONNECT_TIMEOUT: the blackhole test waits this long
TRUSTED = ("h01", "h02", "h03", "h06", "h07", "h08")

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=8, trusted=TRUSTED)]  # `fleet`: tests/conftest.py


@pytest.fixture(scope="module")
def open_settings() -> dict[str, str]:
    return {"ssh_connect_timeout": CONNECT_TIMEOUT}


# -- 1. ssh_exec: exit status, stderr, stdin, signals -----------------------------------------------------


async def test_nonzero_exit_merges_stderr_into_output(client: Client, fleet: SshFleet) -> None:
    result = await ssh_exec(client, "h01", "echo out; echo err >&2; exit 3")
    assert not result.is_error, text_of(result)  # a non-zero exit is an answer, not a failure
    assert text_of(result) == "[exit 3]\nout\nerr\n"
    got = fields(result)
    assert (got["status"], got["exit_code"], got["output"], got["output_bytes"]) == ("exit_nonzero", 3, "out\nerr\n", 8)
    assert got["host"] == "h01"
    assert got["host_key"] == host_key_fingerprint(fleet, "h01")
    assert got["stderr"] is None  # merged: every field is present, stderr at its default


async def test_separate_stderr_is_its_own_field(client: Client) -> None:
    result = await ssh_exec(client, "h01", "echo out; echo err >&2; echo more-err >&2", merge_stderr=False)
    got = fields(result)
    assert (got["status"], got["exit_code"]) == ("ok", 0), text_of(result)
    # The pid line the server prefixes on stderr (for timeouts) is consumed, never shown.
    assert got["output"] == "out\n"
    assert got["stderr"] == "err\nmore-err\n"
    assert got["stderr_bytes"] == len("err\nmore-err\n")
    assert text_of(result).startswith("[exit 0]\nout\n")
    assert "err\nmore-err\n" in text_of(result)


async def test_stdin_is_delivered_then_eof(client: Client) -> None:
    result = await ssh_exec(client, "h01", "cat", stdin="line one\nline two\n", timeout=10)
    assert text_of(result) == "[exit 0]\nline one\nline two\n"

    text = "héllo wörld\n" * 25_000  # 350 000 bytes of UTF-8: many SSH packets
    result = await ssh_exec(client, "h01", "wc -c", stdin=text, timeout=20)
    assert text_of(result).split() == ["[exit", "0]", str(len(text.encode()))]


async def test_command_reading_stdin_without_stdin_gets_eof_at_once(client: Client) -> None:
    result = await ssh_exec(client, "h01", "cat; read line; echo read-status=$?", timeout=10)
    got = fields(result)
    assert got["status"] == "ok", text_of(result)
    assert got.get("timed_out", False) is False
    assert got["output"] == "read-status=1\n"  # read hit EOF instead of waiting for the timeout


async def test_exit_by_signal_names_the_signal(client: Client) -> None:
    result = await ssh_exec(client, "h01", "echo before; kill -TERM $$; echo after")
    assert not result.is_error, text_of(result)
    assert text_of(result) == "[signal SIGTERM]\nbefore\n"
    got = fields(result)
    assert got["signal"] == "SIGTERM"
    assert got.get("exit_code") is None
    assert got["status"] == "exit_nonzero"


# -- 2. timeouts kill the remote work ---------------------------------------------------------------------


async def run_and_watch(client: Client, command: str, sleeps: list[str], host: str = "h01") -> CallToolResult:
    """Run a command with timeout=1 while watching /proc: every marked sleep must be seen running remotely
    during the call (so that 'gone afterwards' means killed, not never started)."""
    result: list[CallToolResult] = []
    seen: set[str] = set()

    async def call() -> None:
        result.append(await ssh_exec(client, host, command, timeout=1))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        while not result:
            seen |= {argument for argument in sleeps if pids_running(argument)}
            await anyio.sleep(0.02)
    assert seen == set(sleeps), f"never saw {set(sleeps) - seen} running during the call"
    return result[0]


async def test_timeout_kills_the_remote_command_and_keeps_partial_output(client: Client, audit_path: Path) -> None:
    sleep = marker()
    result = await run_and_watch(client, f"echo before-sleep; sleep {sleep}", [sleep])
    assert result.is_error
    assert text_of(result) == "[TIMEOUT after 1s]\nbefore-sleep\n"
    got = fields(result)
    assert (got["status"], got["timed_out"], got["output"]) == ("timeout", True, "before-sleep\n")
    assert got.get("exit_code") is None
    assert await wait_gone([sleep]) == {}, "the remote sleep outlived the timeout"
    record = last_record(audit_path)
    assert (record["outcome"], record["args"]["timeout"]) == ("timeout", 1)


async def test_timeout_kills_background_jobs_and_later_commands(client: Client) -> None:
    background, foreground = marker(), marker()
    command = f"echo partial; sleep {background} & sleep {foreground}; echo never"
    result = await run_and_watch(client, command, [background, foreground])
    assert text_of(result) == "[TIMEOUT after 1s]\npartial\n"
    assert fields(result)["timed_out"] is True
    assert await wait_gone([background, foreground]) == {}, "remote processes outlived the timeout"
    # The connection is still good afterwards.
    after = await ssh_exec(client, "h01", "echo still-here")
    assert text_of(after) == "[exit 0]\nstill-here\n"


async def test_timeouts_on_a_full_connection_kill_everything_and_leave_the_host_usable(client: Client) -> None:
    """Ten calls to one host hang at once (a stuck mount, say): all ten time out on one connection whose
    every channel (sshd MaxSessions 10) is in use. Each remote command must still be killed, and the host
    must still answer afterwards. (sshd refuses SSH `signal` requests for root logins, so the kill has to
    come from a command on another channel.)"""
    count = 10
    assert text_of(await ssh_exec(client, "h08", "true")) == "[exit 0]"  # one warm connection, all free
    sleeps = [marker() for _ in range(count)]
    results: dict[int, str] = {}
    seen: set[str] = set()

    async def one(index: int) -> None:
        result = await ssh_exec(client, "h08", f"echo hung{index}; sleep {sleeps[index]}", timeout=1)
        results[index] = text_of(result)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)
        while len(results) < count:
            seen |= {argument for argument in sleeps if pids_running(argument)}
            await anyio.sleep(0.02)
    assert seen == set(sleeps), "not every remote command was seen running"
    assert results == {index: f"[TIMEOUT after 1s]\nhung{index}\n" for index in range(count)}
    left = await wait_gone(sleeps)
    after = await ssh_exec(client, "h08", "echo still-usable")
    assert (len(left), text_of(after)) == (0, "[exit 0]\nstill-usable\n"), (
        f"{len(left)} of {count} remote commands outlived their timeout; next call: {text_of(after)}"
    )


# -- 5. the pool -------------------------------------------------------------------------------------------


async def test_more_concurrent_execs_than_max_sessions_all_succeed(
    client: Client, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """sshd allows 10 channels per connection (MaxSessions default): 15 calls that can only finish when all
    15 run at the same time (a barrier on the remote side) must all succeed, over more than one connection."""
    count = 15
    barrier = tmp_path_factory.mktemp("barrier")
    warm = await ssh_exec(client, "h01", "true")
    assert text_of(warm) == "[exit 0]"
    before = await ssh_connections(client)
    command = (
        f"touch {barrier}/$ID; i=0; "
        f'while [ "$(ls {barrier} | wc -l)" -lt {count} ]; do i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.05; done; '
        "sleep 1; echo ok"
    )
    results: dict[int, CallToolResult] = {}

    async def one(index: int) -> None:
        results[index] = await ssh_exec(client, "h01", command.replace("$ID", f"call{index}"), timeout=30)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)
    texts = {index: text_of(result) for index, result in results.items()}
    assert texts == {index: "[exit 0]\nok\n" for index in range(count)}
    assert sorted(os.listdir(barrier)) == sorted(f"call{index}" for index in range(count))
    after = await ssh_connections(client)
    assert after >= before + 1, f"15 concurrent channels on one connection? {before} -> {after}"

    # A warm call reuses a pooled connection: no new dial.
    again = await ssh_exec(client, "h01", "echo warm")
    assert text_of(again) == "[exit 0]\nwarm\n"
    assert await ssh_connections(client) == after


# -- 6. jump hosts -----------------------------------------------------------------------------------------


async def test_jump_host(client: Client, fleet: SshFleet, audit_path: Path) -> None:
    result = await ssh_exec(client, "h02", "echo via-jump", jump="h01")
    assert text_of(result) == "[exit 0]\nvia-jump\n"
    assert fields(result)["host_key"] == host_key_fingerprint(fleet, "h02")
    target = last_record(audit_path)["target"]
    h01, h02 = fleet.host("h01"), fleet.host("h02")
    assert (target["host"], target["address"], target["port"]) == ("h02", h02.address, h02.port)
    assert target["jump"] == [f"root@{h01.address}:{h01.port}"]


async def test_two_hop_jump(client: Client, fleet: SshFleet, audit_path: Path) -> None:
    result = await ssh_exec(client, "h03", "echo two-hops", jump="h01,h02")
    assert text_of(result) == "[exit 0]\ntwo-hops\n"
    assert fields(result)["host_key"] == host_key_fingerprint(fleet, "h03")
    h01, h02 = fleet.host("h01"), fleet.host("h02")
    assert last_record(audit_path)["target"]["jump"] == [
        f"root@{h01.address}:{h01.port}",
        f"root@{h02.address}:{h02.port}",
    ]


async def test_jump_is_really_used(client: Client, fleet: SshFleet) -> None:
    """A jump host that refuses makes the call fail, though the target itself is up: the jump is not ignored."""
    h01 = fleet.host("h01")
    dead = refused_port(h01.address)
    result = await ssh_exec(client, "h02", "echo direct", jump=f"root@{h01.address}:{dead}")
    message = assert_error(result, "ConnectionRefused")
    assert f"{h01.address}:{dead}" in message


@pytest.mark.parametrize("jump", ["h01,,h02", "-oProxyCommand=x", "h01, ,h02", "h01 h02"])
async def test_bad_jump_spec_is_invalid_argument(client: Client, jump: str) -> None:
    result = await ssh_exec(client, "h03", "echo never", jump=jump)
    message = assert_error(result, "InvalidArgument")
    assert message.startswith("jump: ")
    assert "allowed:" in message


# -- 7. bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "argument", "fragment"),
    [
        ({"host": "root@h01:abc"}, "host", "port 'abc' is out of range; allowed: 1 to 65535"),
        ({"host": "root@@h01"}, "host", "'root@@h01'"),
        ({"host": "h 01"}, "host", "'h 01' is malformed"),
        ({"host": "-oProxyCommand=x"}, "host", "malformed"),
        ({"host": ""}, "host", "is empty"),
        ({"host": "h01:0"}, "host", "port '0' is out of range; allowed: 1 to 65535"),
        ({"host": "h01:70000"}, "host", "port '70000' is out of range; allowed: 1 to 65535"),
        ({"host": "h01", "port": 0}, "port", "port 0 is out of range; allowed: 1 to 65535"),
        ({"host": "h01", "port": 70000}, "port", "port 70000 is out of range; allowed: 1 to 65535"),
        ({"host": "h01", "key_path": "/nonexistent/relay-e2e-key"}, "key_path", "does not exist"),
        ({"host": "h01", "command": ""}, "command", "is empty"),
        ({"host": "h01", "command": "  \n "}, "command", "is empty"),
        ({"host": "h01", "command": "echo a\x00b"}, "command", "NUL"),
        ({"host": "h01", "command": "cat", "stdin": "a\x00b"}, "stdin", "NUL"),
        ({"host": "h01", "known_hosts": "maybe"}, "known_hosts", "'maybe' is not a mode"),
        ({"host": "h01", "user": ""}, "user", "is empty"),
    ],
)
async def test_bad_input_is_invalid_argument_naming_it(
    client: Client, audit_path: Path, arguments: dict[str, Any], argument: str, fragment: str
) -> None:
    call = {"command": "echo never", **arguments}
    result = await client.call_tool("ssh_exec", call)
    message = assert_error(result, "InvalidArgument")
    assert message.startswith(f"{argument}: "), message
    assert fragment in message, message
    assert "allowed" in message, message
    record = last_record(audit_path)
    assert (record["outcome"], record["denied"]) == ("error", False)
    assert record["reason"] == fields(result)["error"]


# -- 3. connection errors by kind -------------------------------------------------------------------------


async def test_refused_port(client: Client, fleet: SshFleet) -> None:
    address = fleet.host("h01").address
    port = refused_port(address)
    result = await ssh_exec(client, f"root@{address}:{port}", "true", key_path=str(fleet.client_key))
    message = assert_error(result, "ConnectionRefused")
    assert message.startswith(f"root@{address}:{port}: connection refused"), message


async def test_host_that_went_down_is_refused(client: Client, fleet: SshFleet, audit_path: Path) -> None:
    warm = await ssh_exec(client, "h07", "echo up")
    assert text_of(warm) == "[exit 0]\nup\n"
    fleet.stop_host("h07")  # also ends the pooled connection's sshd process
    h07 = fleet.host("h07")
    result = await ssh_exec(client, "h07", "echo up")
    message = assert_error(result, "ConnectionRefused")
    assert f"{h07.address}:{h07.port}" in message
    assert last_record(audit_path)["outcome"] == "error"


async def test_blackhole_is_connect_timeout(client: Client) -> None:
    with Blackhole("127.0.0.1") as hole:
        result = await ssh_exec(client, f"root@127.0.0.1:{hole.port}", "true", timeout=30)
        message = assert_error(result, "ConnectTimeout")
        assert message.startswith(f"root@127.0.0.1:{hole.port}: ")
        assert "connect timeout" in message  # the connect timeout fired, not the 30 s command timeout
        assert hole.connections >= 1


async def test_unauthorized_key_is_auth_failed(
    client: Client, fleet: SshFleet, tmp_path: Path, audit_path: Path
) -> None:
    """A warm, authenticated h01 connection is in the pool; another key must not ride on it."""
    assert text_of(await ssh_exec(client, "h01", "true")) == "[exit 0]"
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    result = await ssh_exec(client, "h01", "true", key_path=str(stranger))
    message = assert_error(result, "AuthFailed")
    assert str(stranger) in message
    assert last_record(audit_path)["target"]["key"] == fingerprint(Path(f"{stranger}.pub"))


async def test_unknown_alias_is_unknown_host(client: Client) -> None:
    result = await ssh_exec(client, "relay-e2e-no-such-host", "true")
    message = assert_error(result, "UnknownHost")
    assert "'relay-e2e-no-such-host'" in message


async def test_accept_new_appends_one_line_and_says_so(client: Client, fleet: SshFleet, audit_path: Path) -> None:
    h04 = fleet.host("h04")
    before = fleet.known_hosts.read_bytes()
    assert f"[{h04.address}]:{h04.port} ".encode() not in before
    first = await ssh_exec(client, "h04", "echo first")
    new_key = host_key_fingerprint(fleet, "h04")
    assert not first.is_error, text_of(first)
    lines = text_of(first).splitlines()
    assert lines[0] == "[exit 0]"
    assert lines[1].startswith("[NOTE: host key ") and new_key in lines[1] and "accept-new" in lines[1], lines
    assert lines[2:] == ["first"]
    assert any(new_key in note for note in fields(first)["notes"])
    after = fleet.known_hosts.read_bytes()
    assert after.startswith(before)
    assert after[len(before) :].decode() == h04.host_key_line() + "\n"  # exactly one line, for this host
    assert last_record(audit_path)["target"]["host_key"] == new_key

    second = await ssh_exec(client, "h04", "echo second")
    assert text_of(second) == "[exit 0]\nsecond\n"  # the NOTE comes once
    assert "notes" not in fields(second) or fields(second)["notes"] == []
    assert fleet.known_hosts.read_bytes() == after


async def test_strict_refuses_unknown_host_and_writes_nothing(
    client: Client, fleet: SshFleet, audit_path: Path
) -> None:
    before = fleet.known_hosts.read_bytes()
    result = await ssh_exec(client, "h05", "echo never", known_hosts="strict")
    message = assert_error(result, "HostKeyUnknown")
    assert host_key_fingerprint(fleet, "h05") in message
    assert fleet.known_hosts.read_bytes() == before
    assert last_record(audit_path)["target"]["host_key_mode"] == "strict"


async def test_changed_host_key_is_refused_and_ignore_is_audited_tier_2(
    client: Client, guarded: Client, fleet: SshFleet, audit_path: Path, guarded_audit_path: Path
) -> None:
    warm = await ssh_exec(client, "h06", "echo trusted")
    assert text_of(warm) == "[exit 0]\ntrusted\n"
    old_key = host_key_fingerprint(fleet, "h06")
    fleet.rotate_host_key("h06")
    new_key = host_key_fingerprint(fleet, "h06")
    assert new_key != old_key
    before = fleet.known_hosts.read_bytes()

    for mode in (None, "accept-new", "strict"):
        extra = {} if mode is None else {"known_hosts": mode}
        result = await ssh_exec(client, "h06", "echo never", **extra)
        message = assert_error(result, "HostKeyMismatch")
        assert new_key in message, message
        record = last_record(audit_path)
        assert (record["outcome"], record["target"]["host_key_mode"]) == ("error", mode or "accept-new")
        assert new_key in record["reason"]  # the presented key is evidence: it is in the audit record
        assert fleet.known_hosts.read_bytes() == before, f"known_hosts modified under {mode}"

    ignored = await ssh_exec(client, "h06", "echo unchecked", known_hosts="ignore")
    assert not ignored.is_error, text_of(ignored)
    assert text_of(ignored).splitlines()[0] == "[exit 0]"
    assert fields(ignored)["output"] == "unchecked\n"
    assert fields(ignored)["tier"] >= 2
    assert fields(ignored)["host_key"] == new_key
    record = last_record(audit_path)
    assert record["tier"] >= 2
    assert record["target"]["host_key_mode"] == "ignore"
    assert record["target"]["host_key"] == new_key
    assert fleet.known_hosts.read_bytes() == before

    # The connection made under `ignore` is never handed to a checked call.
    result = await ssh_exec(client, "h06", "echo never")
    assert_error(result, "HostKeyMismatch")

    # Guarded mode refuses `ignore` (tier 2) without contacting the host; checking calls still get the error.
    denied = await ssh_exec(guarded, "h06", "echo unchecked", known_hosts="ignore")
    assert denied.is_error
    assert text_of(denied).startswith("[DENIED tier 2 "), text_of(denied)
    assert (fields(denied)["status"], fields(denied)["tier"]) == ("denied", 2)
    record = last_record(guarded_audit_path)
    assert (record["denied"], record["outcome"], record["tier"]) == (True, "denied", 2)
    assert record["target"]["host_key_mode"] == "ignore"
    checked = await ssh_exec(guarded, "h06", "echo never")
    assert_error(checked, "HostKeyMismatch")
    assert fleet.known_hosts.read_bytes() == before


# -- 8. audit ----------------------------------------------------------------------------------------------


async def test_audit_target_names_the_full_identity(client: Client, fleet: SshFleet, audit_path: Path) -> None:
    h01 = fleet.host("h01")
    client_key = fingerprint(Path(f"{fleet.client_key}.pub"))
    result = await ssh_exec(
        client, f"root@{h01.address}:{h01.port}", "echo audited; exit 4", key_path=str(fleet.client_key)
    )
    assert text_of(result) == "[exit 4]\naudited\n"
    record = last_record(audit_path)
    assert record["target"] == {
        "host": h01.address,
        "address": h01.address,
        "port": h01.port,
        "user": "root",
        "key": client_key,
        "host_key_mode": "accept-new",
        "host_key": host_key_fingerprint(fleet, "h01"),
    }
    assert (record["outcome"], record["exit_code"], record["denied"]) == ("exit_nonzero", 4, False)
    assert record["args"]["command"] == "echo audited; exit 4"
    assert record["raw_sha256"] == fields(result)["output_sha256"]
    assert record["raw_len"] == len("audited\n")
    assert "output" not in record and "stdout" not in record  # digests, never the body

    # Through the ssh_config alias: address, port and key come from the config.
    result = await ssh_exec(client, "h02", "echo alias")
    assert text_of(result) == "[exit 0]\nalias\n"
    h02 = fleet.host("h02")
    target = last_record(audit_path)["target"]
    assert (target["host"], target["address"], target["port"], target["user"]) == ("h02", h02.address, h02.port, "root")
    assert target["key"] == client_key
    assert target["host_key"] == host_key_fingerprint(fleet, "h02")
    assert "jump" not in target


async def test_audit_log_verifies(client: Client, audit_path: Path, guarded_audit_path: Path) -> None:
    assert text_of(await ssh_exec(client, "h01", "echo last")) == "[exit 0]\nlast\n"
    for path in (audit_path, guarded_audit_path):
        if path == guarded_audit_path and not path.exists():
            continue  # only written when the guarded test ran
        verified = subprocess.run(
            [sys.executable, "-m", "relay_shell", "audit", "verify", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
