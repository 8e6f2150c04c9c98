"""End to end (attack 5; adr/0025 Round 9): spellings a real relay-shell over stdio admitted on main — a write into
/etc by a relative path after `cd`, the live log moved through the server's own /proc root, and the signing key read
in readonly mode through a parameter's default, a loop variable and a recursive grep."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from tests.conftest import connect, fields, read_records, text_of

pytestmark = pytest.mark.anyio


async def test_relative_paths_after_cd_and_the_servers_proc_root_are_refused_in_guarded_mode(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    probe = Path("/etc/relay-shell-e2e-attack5-probe")  # main wrote it: `cd /etc && … > NAME` was tier 1
    try:
        async with connect(log, policy_mode="guarded") as client:
            written = await client.call_tool("shell_exec", {"command": f"cd /etc && echo probe > {probe.name}"})
            assert "DENIED tier 2" in text_of(written) and "/etc/" in text_of(written), text_of(written)
            moved = await client.call_tool("shell_exec", {"command": f"mv /proc/$PPID/root{log} {tmp_path}/moved"})
            assert "DENIED tier 3" in text_of(moved) and "own file" in text_of(moved), text_of(moved)
            beside = await client.call_tool("shell_exec", {"command": f"cd {tmp_path} && echo kept > notes.txt"})
            assert fields(beside)["status"] == "ok", text_of(beside)
        assert not probe.exists()
    finally:
        probe.unlink(missing_ok=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["audit.jsonl", "notes.txt"]
    records = read_records(log)
    assert [record["seq"] for record in records] == list(range(len(records)))  # the live log, unbroken
    assert len(records) == 5  # the server start, two refusals, the write's start and end


async def test_the_signing_key_cannot_be_read_by_run_time_spellings_in_readonly_mode(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "signing.key"
    key.write_bytes(Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    key.chmod(0o600)
    async with connect(log, policy_mode="readonly", audit_signing_key=str(key)) as client:
        for command in (
            f"cat ${{K:-{key}}}",
            f'for f in {keys}/*; do cat "$f"; done',
            f"grep -r PRIVATE {keys}",
            f"ls {keys} | xargs -I{{}} cat {keys}/{{}}",
        ):
            result = await client.call_tool("shell_exec", {"command": command})
            assert "DENIED tier 3" in text_of(result) and "secret" in text_of(result), (command, text_of(result))
            assert "PRIVATE KEY" not in text_of(result)
        listed = await client.call_tool("shell_exec", {"command": f"ls {tmp_path}"})
        assert fields(listed)["status"] == "ok", text_of(listed)


async def test_the_working_directory_the_caller_gives_is_read_by_the_policy(tmp_path: Path) -> None:
    """Attack 5, C1: the call's `cwd` and a session's earlier `cd` were not the classifier's, so a relative write
    landed in /etc at tier 1 (`echo … > NAME` with `cwd: /etc`; `cd /etc` typed, then `echo … > NAME`). And a shell
    started in /etc by the session's own shell (`sh -c 'cd /etc && exec sh'`), whose leader stays where it was: the
    foreground program's directory counts too (found in review: it wrote into /etc with the shell's directory alone)."""
    probes = [Path(f"/etc/relay-shell-e2e-c1-probe-{index}") for index in (1, 2, 3)]
    try:
        async with connect(tmp_path / "audit.jsonl", policy_mode="guarded") as client:
            command = f"echo probe > {probes[0].name}"
            written = await client.call_tool("shell_exec", {"command": command, "cwd": "/etc"})
            assert "DENIED tier 2" in text_of(written) and "/etc/" in text_of(written), text_of(written)
            spawned = await client.call_tool(
                "shell_spawn", {"command": ["sh"], "env": {"PS1": "C1> "}, "until": "C1> $"}
            )
            session_id = fields(spawned)["session_id"]
            moved = await client.call_tool(
                "session_send", {"session_id": session_id, "data": "cd /etc", "until": "C1> $"}
            )
            assert fields(moved)["wait"] == "match", text_of(moved)
            typed = await client.call_tool(
                "session_send", {"session_id": session_id, "data": f"echo probe > {probes[1].name}", "until": "C1> $"}
            )
            assert "DENIED tier 2" in text_of(typed) and "/etc/" in text_of(typed), text_of(typed)
            await client.call_tool("session_send", {"session_id": session_id, "data": "cd /tmp", "until": "C1> $"})
            nested = "sh -c 'cd /etc && PS1=\"C2> \" exec sh'"
            started = await client.call_tool(
                "session_send", {"session_id": session_id, "data": nested, "until": "C2> $"}
            )
            assert fields(started)["wait"] == "match", text_of(started)
            typed = await client.call_tool(
                "session_send", {"session_id": session_id, "data": f"echo probe > {probes[2].name}", "until": "C2> $"}
            )
            assert "DENIED tier 2" in text_of(typed) and "/etc/" in text_of(typed), text_of(typed)
            here = await client.call_tool("shell_exec", {"command": "echo kept > notes.txt", "cwd": str(tmp_path)})
            assert fields(here)["status"] == "ok", text_of(here)
            await client.call_tool("session_kill", {"session_id": session_id})
        assert not any(probe.exists() for probe in probes)
    finally:
        for probe in probes:
            probe.unlink(missing_ok=True)
    assert (tmp_path / "notes.txt").read_text() == "kept\n"
