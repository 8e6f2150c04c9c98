"""Sessions with real PTYs and real processes, driven through the registry: job control, process-tree kill,
the reaper, password prompts, the session limit and transcripts. Ownership between two MCP clients of one
server: tests/e2e/sessions/test_in_process_server.py."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from relay_shell.containment.start import start_containment
from relay_shell.launch import Launcher, TraceOff
from relay_shell.sessions.local_pty import session_members, start_local_pty
from relay_shell.sessions.registry import Session, SessionRegistry
from relay_shell.sessions.transcript import Transcript
from tests.procs import comm, gone

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
    launcher = Launcher(
        start_containment("off", "test"), TraceOff("RELAY_SHELL_EXEC_TRACE=off", 0, 64)
    )  # each terminal its session alone
    return SessionRegistry(on_end=ended.append, launcher=launcher, **options)


async def _spawn(registry: SessionRegistry, argv: list[str], owner: str = "a") -> Session:
    tree = registry.launcher.session_tree(registry.new_id())
    terminal = await start_local_pty(tree, argv, None, SHELL_ENV, 80, 24)
    return registry.add(registry.new_id(), owner, "test", " ".join(argv), terminal, 80, 24, None)


async def _type(session: Session, text: str, until: str, timeout: float = 5.0) -> str:
    from relay_shell.sessions.expect import compile_until

    start = session.ring.end
    await session.terminal.write(text.encode(), time.monotonic() + timeout)
    result = await session.wait(start, compile_until(until), timeout, 0.3, False)
    assert result.reason == "match", f"no {until!r} in {session.ring.read(start).data!r}"
    return session.ring.read(start).data.decode(errors="replace")


@pytest.mark.parametrize("shell", [["bash", "--norc", "--noprofile"], ["sh"]])
async def test_ctrl_c_interrupts_the_foreground_job(shell: list[str]) -> None:
    registry = _registry([])
    session = await _spawn(registry, shell)
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
        assert not [pid for pid in session_members(session.terminal.pid or 0) if comm(pid) == "sleep"]
    finally:
        await registry.close_all("test over")


async def test_close_kills_every_process_of_the_session_even_those_ignoring_term() -> None:
    ended: list[Session] = []
    registry = _registry(ended)
    session = await _spawn(registry, ["bash", "--norc", "--noprofile"])
    await _type(session, "", PROMPT)
    await _type(session, "sleep 300 & (trap '' TERM HUP INT; sleep 300) & echo started\r", "started")
    await session.terminal.write(b"sleep 301\r", time.monotonic() + 5)
    await asyncio.sleep(0.3)
    members = session_members(session.terminal.pid or 0)
    assert len(members) >= 4, members  # bash, two background jobs (one a subshell + sleep), foreground sleep
    started = time.monotonic()
    await registry.close(session, "test close")
    assert await gone(members, 0.1) == []
    assert time.monotonic() - started < 2.5
    assert ended == [session]
    assert session.state == "closed"
    assert session.end_reason == "test close"


async def test_reaper_closes_idle_sessions_on_its_own_schedule() -> None:
    ended: list[Session] = []
    registry = _registry(ended, idle_timeout=1.0)
    session = await _spawn(registry, ["sleep", "300"])
    pid = session.terminal.pid or 0
    reaper = asyncio.ensure_future(registry.reap_forever())
    try:
        assert await gone([pid], 4.0) == []
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
    session = await _spawn(registry, ["cat"])
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
    session = await _spawn(registry, ["bash", "--norc", "--noprofile"])
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
    first = await _spawn(registry, ["cat"])
    await _spawn(registry, ["true"])
    try:
        for _ in range(40):  # `true` ends at once; an ended session makes room
            if len([s for s in registry.sessions.values() if s.state == "running"]) == 1:
                break
            await asyncio.sleep(0.05)
        await registry.reserve()
        await _spawn(registry, ["cat"])
        with pytest.raises(ToolError, match="RELAY_SHELL_MAX_SESSIONS=2"):
            await registry.reserve()
        assert first.session_id in registry.sessions
    finally:
        await registry.close_all("test over")


async def test_programs_in_a_session_get_default_signal_handling() -> None:
    registry = _registry([])
    session = await _spawn(registry, ["bash", "--norc", "--noprofile"])
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
