"""End to end (attack 3, L1; adr/0025 Round 7): in guarded mode the audit log cannot be moved aside and replaced
by a forged one, nor appended to; a real relay-shell over stdio, the log checked on disk afterwards."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from tests.conftest import connect, fields, read_records, text_of

pytestmark = pytest.mark.anyio


async def test_the_audit_log_cannot_be_replaced_or_forged_in_guarded_mode(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    async with connect(log, policy_mode="guarded") as client:
        for command in (
            f"mv {log} {tmp_path}/a.old && echo '{{\"seq\": 0}}' > {log}",
            f"echo '{{\"seq\": 99}}' >> {log}",
            f"cp /dev/null {log}.1",
        ):
            result = await client.call_tool("shell_exec", {"command": command})
            assert "DENIED tier 3" in text_of(result) and "own file" in text_of(result), text_of(result)
        copied = await client.call_tool("shell_exec", {"command": f"cp {log} {tmp_path}/copy.jsonl"})
        assert fields(copied)["status"] == "ok", text_of(copied)
    assert not (tmp_path / "a.old").exists()
    records = read_records(log)
    sequence = [record["seq"] for record in records]
    assert sequence == list(range(sequence[0], sequence[0] + len(sequence)))  # the server's own, unbroken
    assert len(records) == 6  # the server start, three refusals, the copy's start and end


async def test_other_spellings_of_the_log_are_refused_in_guarded_mode(tmp_path: Path) -> None:
    """Attack 4, O1–O5: each spelling moved the log aside or forged a line on main (a real guarded server)."""
    log = tmp_path / "audit.jsonl"
    source = tmp_path / "src"
    source.mkdir()
    (source / "audit.jsonl").write_text('{"seq": 0}\n')
    with tarfile.open(tmp_path / "f.tar", "w") as archive:
        archive.add(source / "audit.jsonl", arcname="audit.jsonl")
    async with connect(log, policy_mode="guarded") as client:
        for arguments in (
            {"command": f"mv /proc/self/root{log} {tmp_path}/p1.old"},
            {"command": f"cd {tmp_path} && mv audit.jsonl p2.old"},
            {"command": "mv audit.jsonl p3.old", "cwd": str(tmp_path)},
            {"command": f"mv {source}/audit.jsonl {tmp_path}/"},
            {"command": f"mv {tmp_path}/audit.js?n* {tmp_path}/p4.old"},
            {"command": "echo '{\"seq\": 99}' >> /proc/$PPID/fd/3"},
            {"command": "for f in /proc/$PPID/fd/*; do case $(readlink $f) in *audit.jsonl) echo x >> $f;; esac; done"},
            {"command": f"tar -xf {tmp_path}/f.tar -C {tmp_path}"},
            {"command": f"cp -rT {source} {tmp_path}"},
        ):
            result = await client.call_tool("shell_exec", arguments)
            assert "DENIED tier 3" in text_of(result) and "own file" in text_of(result), (arguments, text_of(result))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["audit.jsonl", "f.tar", "src"]
    records = read_records(log)
    assert [record["seq"] for record in records] == list(range(len(records)))
    assert len(records) == 10  # the server start and nine refusals


async def test_the_signing_key_cannot_be_read_in_readonly_mode(tmp_path: Path) -> None:
    """Attack 4, O6: readonly admitted `cat KEY` and the model got the Ed25519 key that signs the log's checkpoints."""
    log = tmp_path / "audit.jsonl"
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "signing.key"
    private = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    key.write_bytes(private)
    key.chmod(0o600)
    async with connect(log, policy_mode="readonly", audit_signing_key=str(key)) as client:
        for arguments in (
            {"command": f"cat {key}"},
            {"command": "cat signing.key", "cwd": str(keys)},
            {"command": f"base64 < {key}"},
        ):
            result = await client.call_tool("shell_exec", arguments)
            assert "DENIED tier 3" in text_of(result) and "secret" in text_of(result), (arguments, text_of(result))
            assert "PRIVATE KEY" not in text_of(result)
        read = await client.call_tool("shell_exec", {"command": f"cat {log}"})
        assert fields(read)["status"] == "ok", text_of(read)
