"""The pieces of adr/0020 on their own: the RFC 5424 message and reading it back, the settings (URL, interval,
journald, chain), the Ed25519 keys, and a checkpoint that cannot be written (a real file-system fault)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from relay_shell.audit.log import AuditLog
from relay_shell.audit.verify import verify_files
from relay_shell.errors import ConfigError
from relay_shell.metrics import Metrics
from relay_shell.offhost.checkpoints import CHECKPOINT_TOOL, Checkpointer, check_checkpoint
from relay_shell.offhost.signing_keys import KeyFileError, generate_keypair, load_public_key, load_signing_key
from relay_shell.offhost.syslog import message_of, syslog_message, tool_class
from relay_shell.settings.load import load_settings
from relay_shell.settings.offhost import CheckpointInterval, checkpoint_interval, syslog_target

LINE = (
    b'{"call_id":"3f9a1b2c4d5e-17","denied":false,"phase":"end","prev":"'
    + b"0" * 64
    + b'","seq":41,"tool":"shell_exec","ts":"2026-11-27T02:00:00.123456Z","chain":"'
    + b"a" * 64
    + b'"}\n'
)


def test_a_record_becomes_one_rfc5424_message_with_the_line_as_msg() -> None:
    message = syslog_message(LINE, b"box.example", b"4242")
    assert message == (
        b"<110>1 2026-11-27T02:00:00.123456Z box.example relay-shell 4242 shell_exec "
        b'[audit@32473 seq="41" call_id="3f9a1b2c4d5e-17"] ' + LINE[:-1]
    )
    denied = LINE.replace(b'"denied":false', b'"denied":true')
    assert syslog_message(denied, b"h", b"1").startswith(b"<109>1 ")  # notice for a denied call


@pytest.mark.parametrize(
    ("tool", "msgid"),
    [
        ("shell_exec", b"shell_exec"),
        ("audit:checkpoint", b"audit:checkpoint"),
        ("resource:runbooks/deploy", b"resource"),
        ("prompt:operating_guide", b"prompt"),
        ("rm -rf /", b"unknown"),  # an unknown tool's name as the client sent it never reaches a collector's routing
        ("x" * 33, b"unknown"),
        (None, b"unknown"),
    ],
)
def test_msgid_is_the_tool_class(tool: object, msgid: bytes) -> None:
    assert tool_class(tool) == msgid


def test_structured_data_values_are_escaped() -> None:
    line = b'{"call_id":"a\\"]\\\\b","seq":1,"tool":"t"}\n'
    message = syslog_message(line, b"h", b"1")
    assert b'call_id="a\\"\\]\\\\b"]' in message
    assert message_of(message) == line[:-1]  # and read back past it


@pytest.mark.parametrize(
    "line",
    [
        LINE,  # the `%msg%` template: the record alone
        b'<110>1 2026-11-27T02:00:00Z h relay-shell 1 shell_exec [audit@32473 seq="41"] ' + LINE,
        b"2026-11-27T02:00:00Z h relay-shell 1 shell_exec - " + LINE,  # RFC 5424 without PRI (rsyslog's file format)
        b"Nov 27 02:00:00 h relay-shell[1]: " + LINE,  # a traditional file line
    ],
)
def test_the_collectors_line_gives_the_record_back(line: bytes) -> None:
    assert message_of(line) == LINE[:-1]


def test_a_line_without_a_record_is_none() -> None:
    assert message_of(b"Nov 27 02:00:00 h kernel: something else\n") is None


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(os.environ):
        if key.startswith("RELAY_SHELL_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("RELAY_SHELL_AUDIT_PATH", str(tmp_path / "audit.jsonl"))
    return tmp_path


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RELAY_SHELL_AUDIT_SYSLOG", "http://collector:514", "must start with tcp://, tls://, udp:// or unix:"),
        ("RELAY_SHELL_AUDIT_SYSLOG", "tcp://collector", "needs HOST:PORT with a port from 1 to 65535"),
        ("RELAY_SHELL_AUDIT_SYSLOG", "tls://collector:0", "needs HOST:PORT with a port from 1 to 65535"),
        ("RELAY_SHELL_AUDIT_SYSLOG", "tcp://coll ector:514", "is not a host name or IP address"),
        ("RELAY_SHELL_AUDIT_SYSLOG", "unix:dev/log", "needs an absolute socket path"),
        ("RELAY_SHELL_AUDIT_SYSLOG_CA", "/nonexistent/ca.pem", "is not a file"),
        ("RELAY_SHELL_AUDIT_SIGNING_KEY", "/nonexistent/key", "is not a file"),
        ("RELAY_SHELL_AUDIT_JOURNALD", "/nonexistent/socket", "no journald socket at /nonexistent/socket"),
        ("RELAY_SHELL_AUDIT_JOURNALD", "yes", "must be off, on or the absolute path of a journald native socket"),
        ("RELAY_SHELL_AUDIT_CHECKPOINT_INTERVAL", "0", "1 to 10000000"),
        ("RELAY_SHELL_AUDIT_CHECKPOINT_INTERVAL", "5d", "neither a record count"),
        ("RELAY_SHELL_AUDIT_CHECKPOINT_INTERVAL", "25h", "1s to 24h"),
        ("RELAY_SHELL_AUDIT_CHECKPOINT_INTERVAL", "10,20", "given once"),
        ("RELAY_SHELL_AUDIT_CHECKPOINT_INTERVAL", "1,2s,3m", "one of each"),
    ],
)
def test_bad_settings_name_the_variable_and_what_is_allowed(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value).startswith(f"{name}={value!r}: ")
    assert fragment in str(raised.value)


def test_shipping_needs_the_chain(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_SHELL_AUDIT_CHAIN", "false")
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG", "tcp://127.0.0.1:514")
    with pytest.raises(ConfigError, match="need the hash chain"):
        load_settings()


def test_good_settings_parse() -> None:
    assert syslog_target("tls://[::1]:6514").url() == "tls://[::1]:6514"
    assert syslog_target("unix:/dev/log").path == "/dev/log"
    assert checkpoint_interval("1000") == CheckpointInterval(1000, None)
    assert checkpoint_interval("90s") == CheckpointInterval(None, 90.0)
    assert checkpoint_interval("1000, 5m") == CheckpointInterval(1000, 300.0)


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_replaces_one(tmp_path: Path) -> None:
    private = tmp_path / "signing.key"
    public = generate_keypair(private)
    assert private.stat().st_mode & 0o777 == 0o600
    assert load_signing_key(private).public_key() == load_public_key(public)
    with pytest.raises(KeyFileError, match="refusing to replace"):
        generate_keypair(private)


def test_an_openssh_ed25519_key_works_and_other_keys_are_refused(tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "ed")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(tmp_path / "ec")], check=True)
    assert load_signing_key(tmp_path / "ed").public_key() == load_public_key(tmp_path / "ed.pub")
    with pytest.raises(KeyFileError, match="not an Ed25519 key"):
        load_signing_key(tmp_path / "ec")
    with pytest.raises(KeyFileError, match="is a private key"):
        load_public_key(tmp_path / "ed")


def test_a_checkpoint_that_cannot_be_written_is_counted_and_loses_no_record(tmp_path: Path) -> None:
    directory = tmp_path / "logs"
    log = AuditLog(directory / "audit.jsonl")
    log.open()
    key_path = tmp_path / "signing.key"
    public = load_public_key(generate_keypair(key_path))
    metrics = Metrics(enabled=True)
    checkpointer = Checkpointer(log, load_signing_key(key_path), CheckpointInterval(3, None), metrics)
    checkpointer.start()
    for index in range(3):
        log.write({"v": 1, "tool": "shell_exec", "index": index})  # the third brings a checkpoint
    assert checkpointer.written == 1
    log.write({"v": 1, "tool": "shell_exec", "index": 3})
    saved = (directory / "audit.jsonl").read_bytes()
    shutil.rmtree(directory)  # the log can no longer be opened, even by root: a real fault, no mock
    directory.write_text("not a directory")
    assert checkpointer.checkpoint("time") is False
    assert checkpointer.failures == 1 and checkpointer.last_error is not None
    assert metrics.registry.get_sample_value("relay_shell_audit_checkpoint_failures_total") == 1
    directory.unlink()
    directory.mkdir()
    (directory / "audit.jsonl").write_bytes(saved)  # every record written before the failure is there
    checkpointer.stop()  # the shutdown checkpoint, once the log is writable again, covers them
    assert metrics.registry.get_sample_value("relay_shell_audit_checkpoints_total") == 2
    records = [orjson.loads(line) for line in (directory / "audit.jsonl").read_bytes().splitlines()]
    checkpoints = [record for record in records if record["tool"] == CHECKPOINT_TOOL]
    assert [record["reason"] for record in checkpoints] == ["records", "shutdown"]
    assert all(check_checkpoint(record, public) is None for record in checkpoints)
    assert verify_files([directory / "audit.jsonl"]).ok


def test_time_checkpoints_come_only_when_records_were_written(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    key_path = tmp_path / "signing.key"
    generate_keypair(key_path)
    checkpointer = Checkpointer(log, load_signing_key(key_path), CheckpointInterval(None, 0.05), Metrics(enabled=False))
    checkpointer.start()
    log.write({"v": 1, "tool": "shell_exec"})
    deadline = time.monotonic() + 10
    while checkpointer.written == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # six more ticks with nothing new written: no further checkpoint
    checkpointer.stop()  # nothing since the last one: no shutdown checkpoint either
    tools = [orjson.loads(line)["tool"] for line in log.path.read_bytes().splitlines()]
    assert tools == ["shell_exec", CHECKPOINT_TOOL]
    assert checkpointer.describe()["last"]["reason"] == "time"


def test_verify_takes_the_key_of_each_period(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The signing key was replaced between two runs: each checkpoint names its key, and verify needs them all."""
    from relay_shell.cli import main

    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    for name in ("old.key", "new.key"):
        generate_keypair(tmp_path / name)
        checkpointer = Checkpointer(
            log, load_signing_key(tmp_path / name), CheckpointInterval(2, None), Metrics(enabled=False)
        )
        checkpointer.start()
        for index in range(3):
            log.write({"v": 1, "tool": "shell_exec", "index": index})
        checkpointer.stop()
    path = str(log.path)
    both = ["--public-key", f"{tmp_path}/old.key.pub", "--public-key", f"{tmp_path}/new.key.pub"]
    assert main(["audit", "verify", path, *both]) == 0
    assert "4 signature(s) verified" in capsys.readouterr().out
    assert main(["audit", "verify", path, "--public-key", f"{tmp_path}/new.key.pub"]) == 1
    assert "not by the public key given" in capsys.readouterr().err


def test_a_ca_file_without_a_certificate_is_a_config_error_at_check_and_start(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file exists but holds no PEM certificate: --check-config and start-up both refuse, naming the setting
    (before, both said OK and the shipper then failed every connection with an error naming nothing)."""
    from relay_shell.cli import EXIT_CONFIG, main

    garbage = clean_env / "ca.pem"
    garbage.write_text("garbage\n")
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG", "tls://127.0.0.1:6514")
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_CA", str(garbage))
    for argv in (["--check-config"], []):
        assert main(argv) == EXIT_CONFIG
        error = capsys.readouterr().err
        assert "configuration error: RELAY_SHELL_AUDIT_SYSLOG_CA:" in error and str(garbage) in error, error
        assert "Traceback" not in error


def test_a_client_certificate_that_does_not_load_is_a_config_error(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from relay_shell.cli import EXIT_CONFIG, main
    from tests.rsyslog import make_test_ca

    ca, cert, key = make_test_ca(clean_env)
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG", "tls://127.0.0.1:6514")
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_CA", str(ca))
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_CERT", str(cert))
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_KEY", str(ca))  # a certificate, not its key
    assert main(["--check-config"]) == EXIT_CONFIG
    error = capsys.readouterr().err
    assert "RELAY_SHELL_AUDIT_SYSLOG_CERT / RELAY_SHELL_AUDIT_SYSLOG_KEY:" in error, error
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_KEY", str(key))
    assert main(["--check-config"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"AUDIT_SYSLOG": "tcp://127.0.0.1:514", "AUDIT_SYSLOG_CA": "FILE"}, "AUDIT_SYSLOG_CA is set"),
        ({"AUDIT_SYSLOG_CERT": "FILE", "AUDIT_SYSLOG_KEY": "FILE"}, "AUDIT_SYSLOG_CERT is set"),
        ({"AUDIT_SYSLOG": "tls://h:6514", "AUDIT_SYSLOG_CERT": "FILE"}, "AUDIT_SYSLOG_KEY is empty"),
    ],
)
def test_tls_files_for_a_target_without_tls_or_half_a_client_certificate_are_refused(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str], fragment: str
) -> None:
    existing = clean_env / "some.pem"
    existing.write_text("x")
    for name, value in settings.items():
        monkeypatch.setenv(f"RELAY_SHELL_{name}", str(existing) if value == "FILE" else value)
    with pytest.raises(ConfigError, match=fragment):
        load_settings()


def test_verify_tells_not_signed_yet_and_a_copy_without_records_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An intact chain without any checkpoint is exit 4 (not 1, tampering); a copy holding no audit record at all
    (the wrong file) is exit 2 (not 3, lag)."""
    from relay_shell.cli import EXIT_CONFIG, EXIT_NOT_SIGNED, main

    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    for index in range(3):
        log.write({"v": 1, "tool": "shell_exec", "index": index})
    generate_keypair(tmp_path / "signing.key")
    assert main(["audit", "verify", str(log.path), "--public-key", f"{tmp_path}/signing.key.pub"]) == EXIT_NOT_SIGNED
    assert "NOT SIGNED YET: the chain is intact" in capsys.readouterr().err
    copy = tmp_path / "copy.log"
    copy.write_text("hello\n")
    assert main(["audit", "verify", str(log.path), "--against", str(copy)]) == EXIT_CONFIG
    error = capsys.readouterr().err
    assert f"{copy} holds no audit record (1 line(s): {copy}:1: no audit record in this line)" in error, error


def test_a_signing_key_others_can_read_is_refused(tmp_path: Path) -> None:
    generate_keypair(tmp_path / "signing.key")
    (tmp_path / "signing.key").chmod(0o640)
    with pytest.raises(KeyFileError, match=r"accessible by group or others \(mode 0640\).*chmod 600"):
        load_signing_key(tmp_path / "signing.key")
    (tmp_path / "signing.key").chmod(0o600)
    assert load_signing_key(tmp_path / "signing.key").public_key() is not None


def test_keygen_that_cannot_write_the_private_key_leaves_no_public_key(tmp_path: Path) -> None:
    """A real failure after the .pub is written: a dangling symlink at PATH (it does not "exist", but O_EXCL
    refuses it). No public key without its private key is left behind, and the symlink is not ours to remove."""
    target = tmp_path / "signing.key"
    target.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        generate_keypair(target)
    assert not (tmp_path / "signing.key.pub").exists()
    assert target.is_symlink()


def test_against_keeps_compact_tables_and_counts_duplicates_and_conflicts_in_any_order(tmp_path: Path) -> None:
    """A copy out of order with every record twice: one entry per seq, duplicates counted, exit 0; memory a few
    dozen bytes per record (a dict of ints took ~350). A second log's record for a seq the copy already has: a
    conflict, exit 1."""
    import random
    import tracemalloc

    from relay_shell.offhost.copy_verifier import LocalChains, compare, read_copy

    count = 20_000
    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    for index in range(count):
        log.write({"v": 1, "tool": "shell_exec", "index": index})
    lines = log.path.read_bytes().splitlines(keepends=True)
    shuffled = lines * 2
    random.Random(7).shuffle(shuffled)
    copy_path = tmp_path / "copy.log"
    copy_path.write_bytes(b"".join(shuffled))
    local = LocalChains()
    for line in lines:
        local(orjson.loads(line))
    in_order = tmp_path / "in-order.log"
    in_order.write_bytes(b"".join(lines))
    tracemalloc.start()
    kept = read_copy(in_order)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(kept.chains) == len(lines)
    assert held / len(lines) < 60 and peak / len(lines) < 60, (held, peak)  # the first version: 117 and 117
    del kept
    tracemalloc.start()
    copy = read_copy(copy_path)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(copy.chains) == len(lines) and copy.duplicates == len(lines) and copy.conflicting == []
    assert held / len(lines) < 60, held  # sorting it took more for a moment (the order of 40,000 lines)
    agreed = compare(local.chains, copy, copy_path)
    assert agreed.exit_code == 0 and agreed.lines[0].startswith("OK:"), agreed.lines

    other = AuditLog(tmp_path / "other.jsonl")
    other.open()
    for index in range(3):
        other.write({"v": 1, "tool": "shell_exec", "other": index})
    copy_path.write_bytes(b"".join(shuffled) + other.path.read_bytes().splitlines(keepends=True)[2])
    conflicted = compare(local.chains, read_copy(copy_path), copy_path)
    assert conflicted.exit_code == 1
    assert any(line.startswith("CONFLICT: 1 record(s), seq 2 appear") for line in conflicted.lines), conflicted.lines


def test_a_copy_record_with_a_seq_no_log_reaches_is_unreadable_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy is the collector's input: a record with seq 2**63 and a chain that checks out is named as not a
    chained audit record (the compact table keeps seqs as signed 64-bit), never a traceback."""
    import hashlib

    from relay_shell.cli import main

    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    log.write({"v": 1, "tool": "shell_exec"})
    prev = "0" * 64
    body = orjson.dumps({"v": 1, "tool": "shell_exec", "prev": prev, "seq": 2**63})
    chain = hashlib.sha256(prev.encode() + body).hexdigest()
    copy = tmp_path / "copy.log"
    copy.write_bytes(log.path.read_bytes() + body[:-1] + b',"chain":"' + chain.encode() + b'"}\n')
    assert main(["audit", "verify", str(log.path), "--against", str(copy)]) in (0, 1, 3)
    output = capsys.readouterr()
    assert f"{copy}:2: not a chained audit record" in output.out + output.err, output


def test_an_encrypted_client_key_is_a_config_error_at_once_not_a_passphrase_prompt(tmp_path: Path) -> None:
    """OpenSSL would prompt for the passphrase and read it from stdin: the MCP channel of a stdio server. A real
    `--check-config` with stdin an open pipe that never sends anything must answer at once."""
    import sys

    from cryptography.hazmat.primitives import serialization

    from tests.rsyslog import make_test_ca

    ca, cert, key = make_test_ca(tmp_path)
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    encrypted.chmod(0o600)
    env = {name: value for name, value in os.environ.items() if not name.startswith("RELAY_SHELL_")}
    env.update(
        RELAY_SHELL_AUDIT_PATH=str(tmp_path / "audit.jsonl"),
        RELAY_SHELL_AUDIT_SYSLOG="tls://127.0.0.1:6514",
        RELAY_SHELL_AUDIT_SYSLOG_CA=str(ca),
        RELAY_SHELL_AUDIT_SYSLOG_CERT=str(cert),
        RELAY_SHELL_AUDIT_SYSLOG_KEY=str(encrypted),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "relay_shell", "--check-config"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # no controlling terminal, as an MCP client starts it: OpenSSL would read stdin
    )
    try:
        process.wait(timeout=20)  # stdin stays open (communicate() would close it): a prompt would wait for it
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail("--check-config waited for a passphrase on stdin")
    finally:
        assert process.stdin is not None and process.stderr is not None and process.stdout is not None
        process.stdin.close()
        process.stdout.close()
    error = process.stderr.read()
    process.stderr.close()
    assert process.returncode == 2, error
    assert b"RELAY_SHELL_AUDIT_SYSLOG_CERT / RELAY_SHELL_AUDIT_SYSLOG_KEY" in error and b"encrypted" in error, error


def test_a_client_key_others_can_read_is_a_config_error(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from relay_shell.cli import EXIT_CONFIG, main
    from tests.rsyslog import make_test_ca

    ca, cert, key = make_test_ca(clean_env)
    key.chmod(0o644)
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG", "tls://127.0.0.1:6514")
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_CA", str(ca))
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_CERT", str(cert))
    monkeypatch.setenv("RELAY_SHELL_AUDIT_SYSLOG_KEY", str(key))
    assert main(["--check-config"]) == EXIT_CONFIG
    error = capsys.readouterr().err
    assert f"RELAY_SHELL_AUDIT_SYSLOG_KEY: {key} is accessible by group or others (mode 0644): chmod 600" in error
    key.chmod(0o600)
    assert main(["--check-config"]) == 0, capsys.readouterr().err
