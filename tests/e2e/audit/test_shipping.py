"""The audit log leaves the host (issue 20, adr/0020): a real rsyslog collector (tests/rsyslog.py) receives every
record of real stdio servers, over TLS byte for byte, and over TCP through a collector outage and a server killed
mid-stream; `audit verify --public-key/--against` then tells an intact log from a truncated or rewritten one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import orjson
import pytest

from relay_shell.audit.log import encode_line
from relay_shell.offhost.ship_state import state_path_for
from tests.conftest import connect, fields, read_records
from tests.journald import Journald
from tests.procs import server_pid
from tests.rsyslog import Rsyslog

pytestmark = pytest.mark.anyio

CALLS = 1000


def relay_shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay_shell", *args], capture_output=True, text=True, timeout=60)


@dataclass
class Shipped:
    audit: Path  # the local log
    copy: Path  # what rsyslog wrote
    public_key: Path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    private = tmp_path_factory.mktemp("keys") / "signing.key"
    made = relay_shell("audit", "keygen", str(private))
    assert made.returncode == 0, made.stderr
    assert private.stat().st_mode & 0o777 == 0o600
    return private


@pytest.fixture(scope="module")
def tls_run(tmp_path_factory: pytest.TempPathFactory, keys: Path) -> Iterator[Shipped]:
    """1,000 shell_exec calls over one client session, shipped over TLS (the test CA) with signed checkpoints."""
    import anyio

    root = tmp_path_factory.mktemp("tls")
    audit = root / "audit.jsonl"
    with Rsyslog(root / "collector") as collector:

        async def calls() -> None:
            settings = {
                "audit_syslog": collector.tls_url,
                "audit_syslog_ca": str(collector.ca_path),
                "audit_signing_key": str(keys),
                "audit_checkpoint_interval": "300",
            }
            async with connect(audit, **settings) as client:
                for _ in range(CALLS):
                    result = await client.call_tool("shell_exec", {"command": "true"})
                    assert not result.is_error
                audit_state = fields(await client.call_tool("server_info", {}))["info"]["audit"]
                assert audit_state["shipping"]["target"] == collector.tls_url
                assert audit_state["shipping"]["state"] == "connected" and audit_state["shipping"]["errors"] == 0
                checkpoints = audit_state["checkpoints"]
                assert checkpoints["written"] == 2 * CALLS // 300 and checkpoints["failures"] == 0, checkpoints
                assert checkpoints["last"]["reason"] == "records"

        anyio.run(calls)
        expected = audit.read_bytes().count(b"\n")
        collector.wait_for(lambda lines: len(lines) >= expected)
        yield Shipped(audit, collector.output, keys.with_name(keys.name + ".pub"))


def test_tls_copy_is_the_file_byte_for_byte(tls_run: Shipped) -> None:
    local = tls_run.audit.read_bytes().splitlines(keepends=True)
    remote = tls_run.copy.read_bytes().splitlines(keepends=True)
    assert len(local) >= 2 * CALLS + 2  # start and end of every call, server:start, the checkpoints
    assert remote == local  # every record, in order, exactly as written; no outage, so no duplicate either
    tools = [orjson.loads(line)["tool"] for line in local]
    assert tools.count("audit:checkpoint") >= CALLS * 2 // 300 + 1  # by count, and the shutdown one
    assert tools[-1] == "audit:checkpoint"  # at shutdown: it covers every record before it, and was shipped


def test_verify_accepts_the_intact_log_its_signatures_and_its_copy(tls_run: Shipped) -> None:
    result = relay_shell(
        "audit", "verify", str(tls_run.audit), "--public-key", str(tls_run.public_key), "--against", str(tls_run.copy)
    )
    assert result.returncode == 0, result.stderr
    assert "signature(s) verified" in result.stdout
    assert "OK: the local log and" in result.stdout


def test_a_truncated_tail_is_reported_against_the_copy(tls_run: Shipped, tmp_path: Path) -> None:
    lines = tls_run.audit.read_bytes().splitlines(keepends=True)
    truncated = tmp_path / "audit.jsonl"
    truncated.write_bytes(b"".join(lines[:-10]))
    alone = relay_shell("audit", "verify", str(truncated), "--public-key", str(tls_run.public_key))
    assert alone.returncode == 0, alone.stderr  # the chain alone cannot see a cut tail: why the copy exists
    against = relay_shell("audit", "verify", str(truncated), "--against", str(tls_run.copy))
    assert against.returncode == 1, against.stdout + against.stderr
    last = orjson.loads(lines[-1])["seq"]
    assert f"MISSING LOCALLY: 10 record(s), seq {last - 9}-{last}" in against.stderr
    assert "tail was truncated" in against.stderr


def test_a_rewritten_tail_with_a_recomputed_chain_is_reported(tls_run: Shipped, tmp_path: Path) -> None:
    lines = tls_run.audit.read_bytes().splitlines(keepends=True)
    forged = lines[:-10]
    prev = orjson.loads(forged[-1])["chain"]
    for line in lines[-10:]:  # the same records, one argument changed, the chain recomputed: a plausible history
        record = orjson.loads(line)
        del record["chain"]
        record["prev"] = prev
        record["args"] = {"command": "echo nothing to see"}
        forged.append(encode_line(record, prev))
        prev = orjson.loads(forged[-1])["chain"]
    rewritten = tmp_path / "audit.jsonl"
    rewritten.write_bytes(b"".join(forged))
    assert relay_shell("audit", "verify", str(rewritten)).returncode == 0  # a consistent chain
    against = relay_shell("audit", "verify", str(rewritten), "--against", str(tls_run.copy))
    assert against.returncode == 1
    assert "MISSING LOCALLY: 10 record(s)" in against.stderr
    assert "history was rewritten" in against.stderr


def test_records_missing_from_the_copy_are_lag_or_loss(tls_run: Shipped, tmp_path: Path) -> None:
    remote = tls_run.copy.read_bytes().splitlines(keepends=True)
    partial = tmp_path / "copy.log"
    partial.write_bytes(b"".join(remote[:100] + remote[105:-3]))
    result = relay_shell("audit", "verify", str(tls_run.audit), "--against", str(partial))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "MISSING REMOTELY: 5 record(s), seq 100-104" in result.stderr and "lost in transit" in result.stderr
    assert "MISSING REMOTELY: 3 record(s)" in result.stderr and "shipping lag" in result.stderr


def test_a_wrong_public_key_fails(tls_run: Shipped, tmp_path: Path) -> None:
    other = tmp_path / "other.key"
    assert relay_shell("audit", "keygen", str(other)).returncode == 0
    result = relay_shell("audit", "verify", str(tls_run.audit), "--public-key", str(other) + ".pub")
    assert result.returncode == 1
    assert "not by the public key given" in result.stderr


def test_a_tampered_checkpoint_fails_even_with_a_recomputed_chain(tls_run: Shipped, tmp_path: Path) -> None:
    lines = tls_run.audit.read_bytes().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if b'"tool":"audit:checkpoint"' in line)
    rebuilt = lines[:index]
    prev = orjson.loads(rebuilt[-1])["chain"]
    for number, line in enumerate(lines[index:]):
        record = orjson.loads(line)
        del record["chain"]
        record["prev"] = prev
        if number == 0:
            record["ts"] = "2020-01-01T00:00:00.000000Z"  # a signed field changed; the chain made to agree again
        rebuilt.append(encode_line(record, prev))
        prev = orjson.loads(rebuilt[-1])["chain"]
    tampered = tmp_path / "audit.jsonl"
    tampered.write_bytes(b"".join(rebuilt))
    assert relay_shell("audit", "verify", str(tampered)).returncode == 0  # the chain is consistent
    result = relay_shell("audit", "verify", str(tampered), "--public-key", str(tls_run.public_key))
    assert result.returncode == 1
    assert f"{tampered}:{index + 1}: checkpoint signature does not verify" in result.stderr


async def wait_for_confirmed(audit: Path, seq: int) -> None:
    """Poll the shipper's state file until its confirmed position reaches `seq`."""
    import anyio

    state = state_path_for(audit)
    with anyio.fail_after(15):
        while not (state.exists() and orjson.loads(state.read_bytes())["seq"] >= seq):
            await anyio.sleep(0.05)


async def test_outage_and_a_killed_server_lose_nothing_over_tcp(tmp_path: Path, keys: Path) -> None:
    """rsyslog killed (SIGKILL: what it held in memory is gone) and started again mid-run; then, with rsyslog down
    again and a backlog, the server itself killed (no flush) and started again: the copy ends up holding every
    record, byte for byte, duplicates allowed."""
    audit = tmp_path / "audit.jsonl"
    settings = {
        "audit_syslog": "",
        "audit_signing_key": str(keys),
        "audit_checkpoint_interval": "250",
        "metrics_addr": "127.0.0.1:0",
    }
    with Rsyslog(tmp_path / "collector") as collector:
        settings["audit_syslog"] = collector.tcp_url
        with contextlib.suppress(Exception):  # the session ends with its server killed under it
            async with connect(audit, **settings) as client:
                for number in range(CALLS // 2):
                    if number == 150:
                        collector.stop()
                    if number == 300:
                        collector.start()
                    if number == 400:
                        # Once the collector has confirmed what it got since it came back (2 s after its TCP
                        # acknowledged it), down again: what follows piles up unshipped.
                        written = read_records(audit)[-1]["seq"]
                        await wait_for_confirmed(audit, written)
                        collector.stop()
                    result = await client.call_tool("shell_exec", {"command": "true"})
                    assert not result.is_error
                info = fields(await client.call_tool("server_info", {}))["info"]
                shipping = info["audit"]["shipping"]
                assert shipping["lag_records"] >= 2 * 99 and shipping["errors"] >= 1, shipping
                assert "127.0.0.1" in str(shipping["last_error"])
                scrape = f"http://127.0.0.1:{info['metrics']['listen_port']}/metrics"
                exposition = urllib.request.urlopen(scrape).read().splitlines()
                lag = next(line for line in exposition if line.startswith(b"relay_shell_audit_ship_lag_records "))
                assert float(lag.split()[1]) >= 2 * 99
                os.kill(server_pid(audit), signal.SIGKILL)
        collector.start()
        async with connect(audit, **settings) as client:
            for _ in range(CALLS // 2):
                result = await client.call_tool("shell_exec", {"command": "true"})
                assert not result.is_error
        local = audit.read_bytes().splitlines(keepends=True)
        wanted = set(local)
        remote = collector.wait_for(lambda lines: wanted <= set(lines))
    assert set(remote) == wanted  # nothing missing, nothing that is not a line of the file
    assert len(remote) > len(local)  # the resends after the outages: at-least-once
    # Each line at most twice: the restarted server resumed from the saved position, not from the file's start
    # (which would send the early records a third time).
    assert max(Counter(remote).values()) == 2
    copy = str(collector.output)
    result = relay_shell("audit", "verify", str(audit), "--public-key", f"{keys}.pub", "--against", copy)
    assert result.returncode == 0, result.stderr
    assert "duplicate(s)" in result.stdout


async def test_a_real_server_ships_to_journald_and_syslog_at_once(tmp_path: Path) -> None:
    """Both targets on: each has its own position and state file; every record reaches both."""
    audit = tmp_path / "audit.jsonl"
    with Journald(tmp_path / "journald") as journald, Rsyslog(tmp_path / "collector") as collector:
        async with connect(audit, audit_journald=journald.socket_path, audit_syslog=collector.tcp_url) as client:
            for _ in range(50):
                assert not (await client.call_tool("shell_exec", {"command": "true"})).is_error
            info = fields(await client.call_tool("server_info", {}))["info"]["audit"]
            assert info["journald"]["target"] == f"journald:{journald.socket_path}"
            assert info["shipping"]["target"] == collector.tcp_url
        local = audit.read_bytes().splitlines(keepends=True)
        collector.wait_for(lambda lines: lines == local)
        messages: list[bytes] = []
        with anyio.fail_after(15):
            while len(messages) < len(local):
                entries = journald.entries(SYSLOG_IDENTIFIER="relay-shell")
                messages = [entry["MESSAGE"].encode() + b"\n" for entry in entries]
                await anyio.sleep(0.1)
    assert messages == local
    assert state_path_for(audit, "journald").exists() and state_path_for(audit).exists()
