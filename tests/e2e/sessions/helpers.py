"""PTY sessions as a client drives them (spawn, type a line and wait for the prompt), and the processes they
leave, read from /proc."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_types import CallToolResult
from ptyprocess import PtyProcess

from tests.conftest import fields, read_records, text_of
from tests.procs import alive, stat_fields

PROMPT = "READY> "
AT_PROMPT = r"^READY> $"  # the prompt alone on the last line: the command has finished


async def call(client: Client, tool: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(tool, arguments)


async def spawn(client: Client, **arguments: Any) -> tuple[str, CallToolResult]:
    result = await call(client, "shell_spawn", **arguments)
    assert not result.is_error, text_of(result)
    return fields(result)["session_id"], result


async def spawn_bash(client: Client, **arguments: Any) -> str:
    session_id, result = await spawn(client, env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10, **arguments)
    assert fields(result)["wait"] == "match", text_of(result)
    return session_id


async def run_in(client: Client, session_id: str, line: str, until: str = AT_PROMPT, timeout: float = 10) -> str:
    """Type a line, wait for `until`, return the text; the wait must end on the match."""
    result = await call(client, "session_send", session_id=session_id, data=line, until=until, timeout=timeout)
    assert not result.is_error, text_of(result)
    assert fields(result)["wait"] == "match", text_of(result)
    return text_of(result)


def plain(text: str) -> str:
    """Terminal text without escape codes and with LF line ends (what `until` matches)."""
    text = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()=>][0-9A-Za-z]?|\x1b\][^\x07]*\x07", "", text)
    return text.replace("\r\n", "\n").replace("\r", "")


def session_members(leader: int) -> list[int]:
    """Live processes whose session id (field 6 of /proc/PID/stat) is `leader`."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = stat_fields(int(entry))
            if found is not None and found[0] != "Z" and int(found[3]) == leader:
                members.append(int(entry))
    return members


def wait_members(leader: int, predicate: Any, within: float = 5.0) -> list[int]:
    """Poll the session's processes until `predicate(members)` holds."""
    deadline = time.monotonic() + within
    while True:
        members = session_members(leader)
        if predicate(members) or time.monotonic() > deadline:
            return members
        time.sleep(0.02)


def survivors(pids: set[int], within: float) -> set[int]:
    deadline = time.monotonic() + within
    while True:
        left = {pid for pid in pids if alive(pid)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def run_in_terminal(argv: list[str]) -> tuple[int | None, str]:
    """Run a program on a fresh PTY (its controlling terminal) to the end: exit status and output."""
    process = PtyProcess.spawn(argv, dimensions=(40, 120))
    chunks = []
    while True:
        try:
            chunks.append(process.read(65536))
        except EOFError:
            break
    process.wait()
    return process.exitstatus, b"".join(chunks).decode(errors="replace")


def session_records(audit_path: Path, session_id: str) -> list[dict[str, Any]]:
    return [record for record in read_records(audit_path) if record.get("session_id") == session_id]


def end_record(audit_path: Path, session_id: str) -> dict[str, Any]:
    ends = [record for record in session_records(audit_path, session_id) if record["tool"] == "session:end"]
    assert len(ends) == 1, ends
    return ends[0]
