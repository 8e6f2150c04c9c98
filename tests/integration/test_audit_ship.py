"""The shipper (offhost/shipper.py) against a real rsyslog: over the datagram targets (a Unix socket, UDP), and with the
log rotated by rename and by copy-truncate while the collector is down (so the shipper is behind when the rotation
happens) or while it keeps up, and with the shipper itself stopped and started again across a rotation: the copy
always ends up with every line of every file."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relay_shell.audit.log import AuditLog
from relay_shell.metrics import Metrics
from relay_shell.offhost.ship_state import state_path_for
from relay_shell.offhost.shipper import Shipper
from relay_shell.offhost.syslog import tls_context
from relay_shell.settings.offhost import SyslogTarget, syslog_target
from tests.journald import Journald
from tests.rsyslog import Rsyslog, make_test_ca


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Rsyslog]:
    with Rsyslog(tmp_path / "collector") as started:
        yield started


def write(log: AuditLog, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        log.write({"v": 1, "ts": "2026-01-01T00:00:00.000000Z", "tool": "shell_exec", "args": {"n": index}})


def lines_of(*paths: Path) -> set[bytes]:
    return {line for path in paths for line in path.read_bytes().splitlines(keepends=True)}


def shipper_for(log: AuditLog, collector: Rsyslog, metrics: Metrics | None = None, url: str = "") -> Shipper:
    shipper = Shipper(log, syslog_target(url or collector.tcp_url), None, metrics or Metrics(enabled=False))
    shipper.start()
    return shipper


def test_rename_rotation_while_behind(tmp_path: Path, collector: Rsyslog) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    shipper = shipper_for(log, collector)
    write(log, 50)
    collector.wait_for(lambda lines: len(lines) == 50)
    collector.stop()
    write(log, 100, 50)
    os.rename(path, tmp_path / "audit.jsonl.1")
    write(log, 100, 150)  # the log reopens the path: audit:continue, then these
    collector.start()
    wanted = lines_of(tmp_path / "audit.jsonl.1", path)
    collector.wait_for(lambda lines: wanted <= set(lines))
    shipper.stop()
    assert shipper.gaps == 0
    assert set(collector.lines()) == wanted


def test_copy_truncate_rotation_while_behind(tmp_path: Path, collector: Rsyslog) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    shipper = shipper_for(log, collector)
    write(log, 50)
    collector.wait_for(lambda lines: len(lines) == 50)
    collector.stop()
    write(log, 100, 50)
    shutil.copyfile(path, tmp_path / "audit.jsonl.1")  # what logrotate's copytruncate does
    os.truncate(path, 0)
    write(log, 100, 150)
    collector.start()
    wanted = lines_of(tmp_path / "audit.jsonl.1", path)
    collector.wait_for(lambda lines: wanted <= set(lines))
    shipper.stop()
    assert shipper.gaps == 0
    assert set(collector.lines()) == wanted


def test_restart_resumes_from_the_state_file_across_a_rotation(tmp_path: Path, collector: Rsyslog) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    shipper = shipper_for(log, collector)
    write(log, 100)
    collector.wait_for(lambda lines: len(lines) == 100)
    shipper.stop()  # a graceful stop: the collector confirmed everything, the position is saved
    assert state_path_for(path).exists()
    write(log, 50, 100)
    os.rename(path, tmp_path / "audit.jsonl.1")
    write(log, 50, 150)
    again = shipper_for(log, collector)
    wanted = lines_of(tmp_path / "audit.jsonl.1", path)
    collector.wait_for(lambda lines: wanted <= set(lines))
    again.stop()
    assert again.gaps == 0
    assert len(collector.lines()) == len(wanted)  # resumed where it stopped: nothing sent twice


def test_a_position_that_is_gone_is_a_counted_gap_and_shipping_goes_on(tmp_path: Path, collector: Rsyslog) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    shipper = shipper_for(log, collector)
    write(log, 20)
    collector.wait_for(lambda lines: len(lines) == 20)
    shipper.stop()
    write(log, 30, 20)
    os.rename(path, tmp_path / "audit.jsonl.1.gz")  # rotated and compressed: its lines can no longer be read
    write(log, 10, 50)
    metrics = Metrics(enabled=True)
    again = shipper_for(log, collector, metrics)
    wanted = lines_of(path)
    collector.wait_for(lambda lines: wanted <= set(lines))
    again.stop()
    assert again.gaps == 1
    assert "no longer at its place" in (again.last_error or "")
    assert metrics.registry.get_sample_value("relay_shell_audit_ship_errors_total", {"target": "syslog"}) >= 1
    assert metrics.registry.get_sample_value("relay_shell_audit_shipped_records_total", {"target": "syslog"}) >= 11


def test_rotations_while_shipping_keeps_up(tmp_path: Path, collector: Rsyslog) -> None:
    """The usual case: the shipper is caught up when logrotate runs, by rename and then by copy-truncate, each
    followed at once by more records (the truncated file grows past the shipper's offset before it looks)."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    shipper = shipper_for(log, collector)
    write(log, 100)
    collector.wait_for(lambda lines: len(lines) == 100)
    os.rename(path, tmp_path / "audit.jsonl.2")
    write(log, 100, 100)
    collector.wait_for(lambda lines: len(lines) == 201)
    shutil.copyfile(path, tmp_path / "audit.jsonl.1")
    os.truncate(path, 0)
    write(log, 300, 200)
    wanted = lines_of(tmp_path / "audit.jsonl.2", tmp_path / "audit.jsonl.1", path)
    collector.wait_for(lambda lines: wanted <= set(lines))
    shipper.stop()
    assert shipper.gaps == 0
    assert set(collector.lines()) == wanted


@pytest.mark.parametrize("scheme", ["unix", "udp"])
def test_datagram_targets_carry_every_record(tmp_path: Path, collector: Rsyslog, scheme: str) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    url = collector.unix_url if scheme == "unix" else collector.udp_url
    shipper = shipper_for(log, collector, url=url)
    write(log, 200)
    large = {"script": "x" * 1000, "env": {f"V{i}": "y" * 900 for i in range(40)}}
    log.write({"v": 1, "tool": "shell_exec", "args": large})
    wanted = path.read_bytes().splitlines(keepends=True)
    assert len(wanted[-1]) > 30_000  # a large record is one datagram too
    if scheme == "unix":  # a Unix datagram sender waits when the receiver's queue is full: nothing is lost
        collector.wait_for(lambda lines: len(lines) >= len(wanted))
        shipper.stop()
        assert collector.lines() == wanted
        return
    # UDP is lossy (documented): a datagram the receiver's buffer had no room for is gone, and nobody knows.
    collector.wait_for(lambda lines: len(lines) >= len(wanted) // 2)
    shipper.stop()
    received = collector.lines()
    assert set(received) <= set(wanted)  # every datagram that arrived is a line of the file, byte for byte
    assert shipper.describe()["lag_records"] == 0  # sent is all it can know


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_tls_refuses_a_collector_whose_certificate_does_not_verify(tmp_path: Path, collector: Rsyslog) -> None:
    """Without the test CA (the system's CAs do not know it) the handshake fails: nothing is sent, the failure is
    counted and shown, and shipping keeps trying."""
    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    write(log, 5)
    metrics = Metrics(enabled=True)
    shipper = shipper_for(log, collector, metrics, url=collector.tls_url)
    wait_until(lambda: shipper.error_count >= 1)
    shipper.stop()
    assert "certificate verify failed" in (shipper.last_error or "")
    assert shipper.records_sent == 0 and shipper.describe()["lag_records"] == 5
    assert metrics.registry.get_sample_value("relay_shell_audit_ship_errors_total", {"target": "syslog"}) >= 1
    assert collector.lines() == []


def test_tls_checks_the_host_name(tmp_path: Path) -> None:
    """A certificate from the trusted CA, but for another name (localhost, dialled as 127.0.0.1): refused."""
    ca, cert, key = make_test_ca(tmp_path, with_ip=False)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:  # a real TLS server: completes its side of the handshake if the client goes on
        with contextlib.suppress(OSError):
            connection, _ = listener.accept()
            with contextlib.suppress(OSError), context.wrap_socket(connection, server_side=True) as tls:
                tls.recv(1)

    threading.Thread(target=serve, daemon=True).start()
    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    write(log, 1)
    shipper = Shipper(log, syslog_target(f"tls://127.0.0.1:{port}"), tls_context(ca), Metrics(enabled=False))
    shipper.start()
    wait_until(lambda: shipper.error_count >= 1)
    shipper.stop()
    listener.close()
    assert "IP address mismatch" in (shipper.last_error or ""), shipper.last_error
    assert shipper.records_sent == 0


def test_journald_gets_every_record_with_its_fields(tmp_path: Path) -> None:
    """A real systemd-journald (tests/journald.py): each record is an entry whose MESSAGE is the line, byte for
    byte, with every field of the record as a journal field of its own."""
    with Journald(tmp_path / "journald") as journald:
        log = AuditLog(tmp_path / "audit.jsonl")
        log.open()
        metrics = Metrics(enabled=True)
        target = SyslogTarget("journald", path=journald.socket_path)
        shipper = Shipper(log, target, None, metrics, target_label="journald")
        shipper.start()
        write(log, 100)
        log.write({"v": 1, "tool": "shell_exec", "denied": True, "call_id": "ab-1", "args": {"env": {"A": "x\ny"}}})
        wanted = log.path.read_bytes().splitlines()
        deadline = time.monotonic() + 15
        while len(entries := journald.entries(SYSLOG_IDENTIFIER="relay-shell")) < len(wanted):
            assert time.monotonic() < deadline, f"{len(entries)} of {len(wanted)} entries"
            time.sleep(0.1)
        shipper.stop()
    assert [entry["MESSAGE"].encode() for entry in entries] == wanted
    last = entries[-1]
    assert last["RELAY_SHELL_TOOL"] == "shell_exec" and last["RELAY_SHELL_CALL_ID"] == "ab-1"
    assert last["RELAY_SHELL_SEQ"] == "100" and last["PRIORITY"] == "5" and last["SYSLOG_FACILITY"] == "13"
    assert last["RELAY_SHELL_ARGS"] == '{"env":{"A":"x\\ny"}}'
    assert entries[0]["PRIORITY"] == "6"
    assert shipper.state_path.name == ".audit.jsonl.journald-state.json"
    assert metrics.registry.get_sample_value("relay_shell_audit_shipped_records_total", {"target": "journald"}) == 101


def test_mutual_tls_refuses_a_client_without_a_certificate_and_takes_one_with(
    tmp_path: Path, collector: Rsyslog
) -> None:
    """rsyslog's listener with authMode="x509/name" and permittedPeer (the README's config): relay-shell without
    a client certificate gets nothing through; with RELAY_SHELL_AUDIT_SYSLOG_CERT/_KEY's certificate, everything."""
    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    write(log, 20)
    without = Shipper(log, syslog_target(collector.mtls_url), tls_context(collector.ca_path), Metrics(enabled=False))
    without.start()
    wait_until(lambda: without.error_count >= 2)  # refused, reconnected, refused again
    # Its TCP acknowledged the bytes before the collector checked the certificate and hung up: nothing is kept,
    # so the lag (what the alert reads) is every record, all the time, not back to 0 after each acknowledgement.
    # Records keep coming (each is sent, acknowledged by its TCP, and lost with the connection).
    lags = []
    for index in range(40):
        write(log, 1, start=20 + index)
        time.sleep(0.05)
        lags.append((without.lag_records(), log.seq + 1))
    without.stop(flush_timeout=0.2)
    assert all(lag == written for lag, written in lags), lags
    refusal = without.last_error or ""
    assert "closed the connection" in refusal or "certificate" in refusal, refusal  # refused, not unreachable
    assert collector.lines() == []
    assert without.describe()["confirmed_seq"] in (None, -1)
    (tmp_path / ".audit.jsonl.ship-state.json").unlink(missing_ok=True)
    context = tls_context(collector.ca_path, collector.client_cert_path, collector.client_key_path)
    shipper = Shipper(log, syslog_target(collector.mtls_url), context, Metrics(enabled=False))
    shipper.start()
    collector.wait_for(lambda lines: len(lines) == 60)
    shipper.stop()
    assert collector.lines() == log.path.read_bytes().splitlines(keepends=True)


def test_the_readme_rsyslog_config_is_valid(tmp_path: Path) -> None:
    """The collector config the README documents passes `rsyslogd -N1` (its certificate paths made to exist)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    start = readme.index("```\nglobal(maxMessageSize=")
    snippet = readme[start + 4 : readme.index("```", start + 4)]
    assert 'authMode="x509/name"' in snippet and "permittedPeer" in snippet and "%hostname%" not in snippet
    assert 'property(name="fromhost-ip" securepath="replace")' in snippet
    for name in ("ca.pem", "collector.pem", "collector.key"):
        (tmp_path / name).write_text("")
    config = tmp_path / "rsyslog.conf"
    config.write_text(snippet.replace("/etc/rsyslog/", f"{tmp_path}/"))
    checked = subprocess.run(["/usr/sbin/rsyslogd", "-N1", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "error" not in checked.stderr.lower(), checked.stderr
