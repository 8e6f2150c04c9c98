"""Sessions with real PTYs and real processes: job control, process-tree kill, the reaper, password prompts,
and ownership between two MCP clients of one server (real SDK clients speaking JSON-RPC over in-memory
streams: the stdio transport has one client per server process, so two clients of one server need this
or HTTP)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay_shell.audit.log import AuditLog
from relay_shell.config import Settings
from relay_shell.server import Assembly, build_server
from relay_shell.sessions.local_pty import LocalPty, session_members
from relay_shell.sessions.registry import Session, SessionRegistry
from relay_shell.sessions.transcript import Transcript
from tests.conftest import read_records, text_of

pytestmark = pytest.mark.anyio

PROMPT = "READY> "
SHELL_ENV = {**os.environ, "PS1": PROMPT, "TERM": "xterm-256color"}


def _registry(ended: list[Session], **limits: Any) -> SessionRegistry:
    options: dict[str, Any] = {
        "max_sessions": 4,
        "buffer_bytes": 65536,
        "idle_timeout": 600.0,
        "max_lifetime": 600.0,
        "kill_grace": 1.0,
    }
    options.update(limits)
    return SessionRegistry(on_end=ended.append, **options)


def _spawn(registry: SessionRegistry, argv: list[str], owner: str = "a") -> Session:
    terminal = LocalPty(argv, None, SHELL_ENV, 80, 24)
    return registry.add(registry.new_id(), owner, "test", " ".join(argv), terminal, 80, 24, None)


async def _type(session: Session, text: str, until: str, timeout: float = 5.0) -> str:
    from relay_shell.sessions.expect import compile_until

    start = session.ring.end
    await session.terminal.write(text.encode(), time.monotonic() + timeout)
    result = await session.wait(start, compile_until(until), timeout, 0.3, False)
    assert result.reason == "match", f"no {until!r} in {session.ring.read(start).data!r}"
    return session.ring.read(start).data.decode(errors="replace")


async def _gone(pids: list[int], within: float) -> list[int]:
    deadline = time.monotonic() + within
    alive = pids
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _running(pid)]
        if not alive:
            return []
        await asyncio.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.parametrize("shell", [["bash", "--norc", "--noprofile"], ["sh"]])
async def test_ctrl_c_interrupts_the_foreground_job(shell: list[str]) -> None:
    registry = _registry([])
    session = _spawn(registry, shell)
    try:
        await _type(session, "", PROMPT)  # the first prompt
        output = await _type(session, "echo job-$((6*7))\r", PROMPT)
        assert "job-42" in output
        assert "job control" not in session.ring.read(0).data.decode()  # it has a controlling terminal
        started = time.monotonic()
        await session.terminal.write(b"sleep 30\r", time.monotonic() + 5)
        await asyncio.sleep(0.3)
        await _type(session, "\x03", PROMPT)
        assert time.monotonic() - started < 5
        assert not [pid for pid in session_members(session.terminal.pid or 0) if _comm(pid) == "sleep"]
    finally:
        await registry.close_all("test over")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def test_close_kills_every_process_of_the_session_even_those_ignoring_term() -> None:
    ended: list[Session] = []
    registry = _registry(ended)
    session = _spawn(registry, ["bash", "--norc", "--noprofile"])
    await _type(session, "", PROMPT)
    await _type(session, "sleep 300 & (trap '' TERM HUP INT; sleep 300) & echo started\r", "started")
    await session.terminal.write(b"sleep 301\r", time.monotonic() + 5)
    await asyncio.sleep(0.3)
    members = session_members(session.terminal.pid or 0)
    assert len(members) >= 4, members  # bash, two background jobs (one a subshell + sleep), foreground sleep
    started = time.monotonic()
    await registry.close(session, "test close")
    assert await _gone(members, 0.1) == []
    assert time.monotonic() - started < 2.5
    assert ended == [session]
    assert session.state == "closed"
    assert session.end_reason == "test close"


async def test_reaper_closes_idle_sessions_on_its_own_schedule() -> None:
    ended: list[Session] = []
    registry = _registry(ended, idle_timeout=1.0)
    session = _spawn(registry, ["sleep", "300"])
    pid = session.terminal.pid or 0
    reaper = asyncio.ensure_future(registry.reap_forever())
    try:
        assert await _gone([pid], 4.0) == []
        for _ in range(40):
            if session.state == "closed":
                break
            await asyncio.sleep(0.05)
        assert session.state == "closed"
        assert session.end_reason == "idle for 1s"
        assert registry.sessions == {}
    finally:
        reaper.cancel()
        await registry.close_all("test over")


async def test_reaper_enforces_the_absolute_lifetime_despite_activity() -> None:
    registry = _registry([], max_lifetime=1.0, idle_timeout=600.0)
    session = _spawn(registry, ["cat"])
    reaper = asyncio.ensure_future(registry.reap_forever())
    try:
        for _ in range(30):  # keep it busy: activity does not extend the lifetime
            session.last_activity = time.monotonic()
            await session.terminal.write(b"x\r", time.monotonic() + 1)
            await asyncio.sleep(0.1)
            if session.state == "closed":
                break
        assert session.state == "closed"
        assert session.end_reason == "max lifetime 1s reached"
    finally:
        reaper.cancel()
        await registry.close_all("test over")


async def test_password_prompt_is_detected_while_echo_is_off() -> None:
    registry = _registry([])
    session = _spawn(registry, ["bash", "--norc", "--noprofile"])
    try:
        await _type(session, "", PROMPT)
        assert not session.terminal.password_mode()  # readline edits with its own echo: not a password prompt
        await _type(session, "read -s -p 'Password: ' pw; echo; echo got ${#pw}\r", "Password: ")
        for _ in range(100):  # bash prints the prompt and turns echo off in either order
            if session.terminal.password_mode():
                break
            await asyncio.sleep(0.01)
        assert session.terminal.password_mode()
        output = await _type(session, "s3cret\r", PROMPT)
        assert "got 6" in output
        assert "s3cret" not in output
        assert not session.terminal.password_mode()
    finally:
        await registry.close_all("test over")


async def test_session_limit_refuses_then_evicts_ended_sessions() -> None:
    from relay_shell.errors import ToolError

    registry = _registry([], max_sessions=2)
    first = _spawn(registry, ["cat"])
    _spawn(registry, ["true"])
    try:
        for _ in range(40):  # `true` ends at once; an ended session makes room
            if len([s for s in registry.sessions.values() if s.state == "running"]) == 1:
                break
            await asyncio.sleep(0.05)
        await registry.reserve()
        _spawn(registry, ["cat"])
        with pytest.raises(ToolError, match="RELAY_SHELL_MAX_SESSIONS=2"):
            await registry.reserve()
        assert first.session_id in registry.sessions
    finally:
        await registry.close_all("test over")


# -- two clients of one server ----------------------------------------------------------------------------


@asynccontextmanager
async def _server(tmp_path: Path) -> AsyncIterator[tuple[Assembly, Path]]:
    audit_path = tmp_path / "audit.jsonl"
    settings = Settings(audit_path=audit_path)
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
            survivors = await _gone(alice_pids, 2.0)
            assert survivors == [], [(pid, _comm(pid), Path(f"/proc/{pid}/stat").read_text()) for pid in survivors]
            assert _running(bobs.structured_content["pid"])
            listed = await bob.call_tool("session_list", {})
            assert [item["state"] for item in listed.structured_content["sessions"]] == ["running"]
        ends = [record for record in read_records(audit_path) if record["tool"] == "session:end"]
        assert {record["reason"] for record in ends} == {"client disconnected"}
        assert len(ends) == 3


async def test_a_transcript_that_cannot_be_written_starts_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    audit_path = tmp_path / "audit.jsonl"
    settings = Settings(audit_path=audit_path, record_dir=blocker / "casts")
    audit_log = AuditLog(audit_path, chain=True, fsync=False)
    audit_log.open()
    assembly = build_server(settings, audit_log)
    async with Client(assembly.mcp, mode="legacy") as client:
        result = await client.call_tool("shell_spawn", {"command": "sleep 313"})
        assert result.is_error
        assert text_of(result).startswith("[ERROR: TranscriptUnavailable: cannot record the session")
        assert assembly.sessions.sessions == {}
    audit_log.close()
    assert not [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _cmdline(pid) == "sleep 313"]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


async def test_programs_in_a_session_get_default_signal_handling() -> None:
    registry = _registry([])
    session = _spawn(registry, ["bash", "--norc", "--noprofile"])
    try:
        await _type(session, "", PROMPT)
        output = await _type(session, "yes | head -1; echo status=${PIPESTATUS[*]}\r", "status=[0-9]+ [0-9]+")
        assert "status=141 0" in output  # yes died of SIGPIPE, as in any terminal
        assert "Broken pipe" not in output
    finally:
        await registry.close_all("test over")


async def test_a_transcript_stops_at_its_limit_with_a_marker(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path, "s-test", "yes", 80, 24, "xterm", max_bytes=1024 * 1024)
    for _ in range(3000):
        transcript.output(b"y" * 1000)
    digest = transcript.close()
    lines = (tmp_path / "s-test.cast").read_bytes().splitlines()
    assert transcript.truncated
    assert (tmp_path / "s-test.cast").stat().st_size < 1024 * 1024 + 2048
    assert b"transcript limit of 1048576 bytes reached" in lines[-1]
    assert hashlib.sha256((tmp_path / "s-test.cast").read_bytes()).hexdigest() == digest


async def test_a_full_disk_ends_the_recording_not_the_session(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path, "s-full", "cat", 80, 24, "xterm", max_bytes=1024 * 1024)
    transcript.file.close()
    transcript.file = open("/dev/full", "wb", buffering=0)  # every write fails with ENOSPC, for real
    for _ in range(3):
        transcript.output(b"output that cannot be stored\r\n")
    assert transcript.close() is None
    assert transcript.error == "No space left on device"
    assert transcript.truncated
