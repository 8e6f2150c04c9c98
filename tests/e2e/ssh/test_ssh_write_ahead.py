"""Write-ahead audit for the SSH tools, end to end against the real sshd fleet (tests/sshd.py): every SSH tool
that acts writes its start record, then its end record with the same call_id; a log that cannot be written
refuses ssh_exec and a line typed into an SSH session before anything reaches the host, and once writable again
the next call runs and the chain verifies.

The fleet's hosts are this machine (127.0.0.2, …, user root), so a command run there sees this machine's files:
ssh_exec and ssh_fanout read the audit log while they run and find their own start record already in it.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import connect, fields, read_records, text_of
from tests.e2e.audit.test_write_ahead import audit_verify, scrape
from tests.e2e.ssh.fleet_helpers import LOGIN_PROMPT, plain, run_in, spawn_shell
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=2)]  # `fleet`: tests/conftest.py, both hosts trusted


async def acted(client: Client, audit_path: Path, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    """Make a call that must run; check that it wrote a start record and then an end record with the same call_id
    (and no other record under its name), the start record admitting it before any outcome existed."""
    before = len(read_records(audit_path))
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    mine = [record for record in read_records(audit_path)[before:] if record["tool"] == tool]
    assert [record["phase"] for record in mine] == ["start", "end"], mine
    start, end = mine
    assert start["call_id"] == end["call_id"], mine
    assert start["decision"] == "admitted" and "outcome" not in start, start
    assert end["outcome"] == fields(result)["status"], end
    return result


async def test_every_ssh_tool_that_acts_writes_start_then_end(
    client: Client, audit_path: Path, fleet: SshFleet, tmp_path: Path
) -> None:
    token = secrets.token_hex(6)
    # The command counts the log lines that hold its own text: its start record is on disk before it runs.
    ran = await acted(client, audit_path, "ssh_exec", {"host": "h01", "command": f"grep -c {token}-exec {audit_path}"})
    assert text_of(ran) == "[exit 0]\n1\n"
    fanned = await acted(
        client, audit_path, "ssh_fanout", {"command": f"grep -c {token}-fan {audit_path}", "hosts": ["h01", "h02"]}
    )
    assert [(host["host"], host["output"]) for host in fields(fanned)["hosts"]] == [("h01", "1\n"), ("h02", "1\n")]
    await acted(client, audit_path, "ssh_check", {"hosts": ["h01", "h02"], "timeout": 10})
    await acted(client, audit_path, "ssh_keyscan", {"hosts": ["h01"], "timeout": 10})

    source = tmp_path / "source.txt"
    source.write_text(token)
    copy, back = tmp_path / "remote-copy.txt", tmp_path / "back.txt"
    await acted(client, audit_path, "ssh_upload", {"host": "h01", "local_path": str(source), "remote_path": str(copy)})
    await acted(client, audit_path, "ssh_download", {"host": "h01", "remote_path": str(copy), "local_path": str(back)})
    assert back.read_text() == token

    opened = await acted(client, audit_path, "ssh_forward", {"host": "h01", "spec": "L:0:127.0.0.1:9"})
    await acted(client, audit_path, "ssh_forward_close", {"forward_id": fields(opened)["forward_id"]})

    spawned = await acted(client, audit_path, "ssh_spawn", {"host": "h01", "until": LOGIN_PROMPT, "timeout": 15})
    session_id = fields(spawned)["session_id"]
    await acted(client, audit_path, "session_send", {"session_id": session_id, "data": "true", "timeout": 1})
    await acted(client, audit_path, "session_kill", {"session_id": session_id})


async def test_a_log_that_cannot_be_written_refuses_ssh_exec_and_typed_input(
    tmp_path: Path, fleet: SshFleet, chattr: Any
) -> None:
    """`chattr +i` on the log while serving: ssh_exec and a line typed into an SSH session are refused and did
    not run (marker files), the refusals are counted in /metrics; writable again, the next call runs and the
    chain verifies."""
    audit_path = tmp_path / "logs" / "audit.jsonl"
    by_exec, by_typing = tmp_path / "M-exec", tmp_path / "M-typed"
    async with connect(audit_path, ssh_config=str(fleet.ssh_config), metrics_addr="127.0.0.1:0") as client:
        session_id = await spawn_shell(client, "h01")
        info = await client.call_tool("server_info", {})
        port = fields(info)["info"]["metrics"]["listen_port"]
        chattr("i", audit_path)

        refused = await client.call_tool("ssh_exec", {"host": "h01", "command": f"touch {by_exec}"})
        assert refused.is_error and text_of(refused).startswith("[ERROR: AuditUnavailable: "), text_of(refused)
        assert "nothing ran" in text_of(refused)
        typed = await client.call_tool("session_send", {"session_id": session_id, "data": f"touch {by_typing}"})
        assert typed.is_error and text_of(typed).startswith("[ERROR: AuditUnavailable: "), text_of(typed)
        assert scrape(port, "relay_shell_audit_refused_calls_total") == 2.0

        subprocess.run(["chattr", "-i", str(audit_path)], check=True)
        again = await client.call_tool("ssh_exec", {"host": "h01", "command": f"test ! -e {by_exec} && echo after"})
        assert text_of(again) == "[exit 0]\nafter\n", text_of(again)
        # The shell reads its input in order: had the refused line been typed, it would have run before this one.
        checked = await run_in(client, session_id, f"test -e {by_typing} || echo never-typed")
        assert "\nnever-typed\n" in plain(checked), checked
        assert not by_exec.exists() and not by_typing.exists()
    verified = audit_verify(audit_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    texts = [str(record.get("args")) for record in read_records(audit_path)]
    assert not any(str(by_exec) in text and "touch" in text for text in texts), "a refused call has a record of running"
    assert not any(f"touch {by_typing}" in text for text in texts)
