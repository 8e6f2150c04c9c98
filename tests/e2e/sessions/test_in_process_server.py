"""Sessions through an in-process server and real SDK clients speaking JSON-RPC over in-memory streams, with
real PTYs: ownership between two clients of one server (the stdio transport has one client per server process,
so two clients of one server need this or HTTP), and a transcript that cannot be written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client

from relay_shell.audit.log import AuditLog
from relay_shell.server import Assembly, build_server
from relay_shell.sessions.local_pty import session_members
from relay_shell.settings.model import Settings
from tests.conftest import read_records, text_of
from tests.procs import alive, cmdline, comm, gone, pids

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _server(tmp_path: Path) -> AsyncIterator[tuple[Assembly, Path]]:
    audit_path = tmp_path / "audit.jsonl"
    settings = Settings(audit={"audit_path": audit_path})
    audit_log = AuditLog(audit_path, chain=True, fsync=False)
    audit_log.open()
    try:
        yield build_server(settings, audit_log), audit_path
    finally:
        audit_log.close()


async def test_a_session_belongs_to_the_client_that_spawned_it(tmp_path: Path) -> None:
    async with _server(tmp_path) as (assembly, audit_path):
        async with Client(assembly.mcp, mode="legacy") as alice, Client(assembly.mcp, mode="legacy") as mallory:
            spawned = await alice.call_tool("shell_spawn", {"command": "cat"})
            session_id = spawned.structured_content["session_id"]
            await alice.call_tool("session_send", {"session_id": session_id, "data": "alice-private"})

            listed = await mallory.call_tool("session_list", {})
            assert listed.structured_content["sessions"] == []
            for tool, arguments in [
                ("session_recv", {"session_id": session_id, "since": 0}),
                ("session_send", {"session_id": session_id, "data": "intrusion"}),
                ("session_resize", {"session_id": session_id, "cols": 100, "rows": 30}),
                ("session_kill", {"session_id": session_id}),
            ]:
                result = await mallory.call_tool(tool, arguments)
                assert result.is_error, tool
                assert "SessionNotOwned" in text_of(result)
                assert "alice-private" not in text_of(result)

            mine = await alice.call_tool("session_recv", {"session_id": session_id, "since": 0, "timeout": 0})
            assert "alice-private" in text_of(mine)
            assert "intrusion" not in text_of(mine)
            assert [
                item["session_id"]
                for item in (await alice.call_tool("session_list", {})).structured_content["sessions"]
            ] == [session_id]
        records = read_records(audit_path)
        refused = [
            record
            for record in records
            if record.get("outcome") == "error" and record.get("args", {}).get("session_id") == session_id
        ]
        assert len(refused) == 4


async def test_disconnect_closes_only_that_clients_sessions(tmp_path: Path) -> None:
    async with _server(tmp_path) as (assembly, audit_path):
        async with Client(assembly.mcp, mode="legacy") as bob:
            bobs = await bob.call_tool("shell_spawn", {"command": "sleep 300"})
            async with Client(assembly.mcp, mode="legacy") as alice:
                first = await alice.call_tool(
                    "shell_spawn", {"command": ["bash", "--norc", "-c", "sleep 300 & sleep 301"]}
                )
                second = await alice.call_tool("shell_spawn", {"command": "cat"})
                alice_pids = []
                for result in (first, second):
                    alice_pids += session_members(result.structured_content["pid"])
                assert len(alice_pids) >= 3
            survivors = await gone(alice_pids, 2.0)
            assert survivors == [], [(pid, comm(pid), Path(f"/proc/{pid}/stat").read_text()) for pid in survivors]
            assert alive(bobs.structured_content["pid"])
            listed = await bob.call_tool("session_list", {})
            assert [item["state"] for item in listed.structured_content["sessions"]] == ["running"]
        ends = [record for record in read_records(audit_path) if record["tool"] == "session:end"]
        assert {record["reason"] for record in ends} == {"client disconnected"}
        assert len(ends) == 3


async def test_a_transcript_that_cannot_be_written_starts_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    audit_path = tmp_path / "audit.jsonl"
    settings = Settings(audit={"audit_path": audit_path}, sessions={"record_dir": blocker / "casts"})
    audit_log = AuditLog(audit_path, chain=True, fsync=False)
    audit_log.open()
    assembly = build_server(settings, audit_log)
    async with Client(assembly.mcp, mode="legacy") as client:
        result = await client.call_tool("shell_spawn", {"command": "sleep 313"})
        assert result.is_error
        assert text_of(result).startswith("[ERROR: TranscriptUnavailable: cannot record the session")
        assert assembly.sessions.sessions == {}
    audit_log.close()
    assert not [pid for pid in pids() if cmdline(pid) == "sleep 313"]
