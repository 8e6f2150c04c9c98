"""A reader of parts that takes the terminal after a session_send was checked but before it types (review W2,
adr/0026 Round 6): nothing is typed, the call fails with ReaderChanged. The check under the input lock reads the
foreground group again unless nothing below the terminal's leader has run since it was read (sessions/
foreground.py): here the shell itself becomes the reader of one byte (`read -n1`, the same process and group), so
only the processes' own runs show the change.

A program in the session changes in that window only by chance, so the test makes the change at that moment: the
real preparation runs, then the test types `read -n1 x` straight into the session's real PTY (as a job timed to the
window would make the shell read) and waits until bash is in its read of one byte. Nothing else is replaced.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay_shell.audit.log import AuditLog
from relay_shell.plan import Plan
from relay_shell.server import build_server
from relay_shell.sessions import send_plan
from relay_shell.sessions.registry import SessionRegistry
from relay_shell.settings.model import Settings
from tests.conftest import fields, read_records, text_of

pytestmark = pytest.mark.anyio


def reading_one_byte(pid: int) -> bool:
    """The process's main thread is in read(2) of one byte from descriptor 0."""
    fields = Path(f"/proc/{pid}/syscall").read_text().split()
    return fields[:2] == ["0", "0x0"] and fields[3:4] == ["0x1"]


async def test_a_line_checked_before_the_shell_began_to_read_one_byte_is_not_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare_send = send_plan.prepare_send
    made = tmp_path / "made"

    def prepared_then_changed(settings: Settings, registry: SessionRegistry, owner: str, **arguments: Any) -> Plan:
        plan = prepare_send(settings, registry, owner, **arguments)
        terminal = registry.sessions[arguments["session_id"]].terminal
        os.write(terminal.fd, b"read -n1 x\r")
        deadline = time.monotonic() + 10
        while not reading_one_byte(terminal.pid):
            assert time.monotonic() < deadline, "bash never reached its read of one byte"
            time.sleep(0.01)
        return plan

    # session_send imports prepare_send from its module at each call (loaded by the first: adr/0030, Round 5)
    monkeypatch.setattr(send_plan, "prepare_send", prepared_then_changed)
    audit_path = tmp_path / "audit.jsonl"
    audit_log = AuditLog(audit_path)
    audit_log.open()
    assembly = build_server(Settings(audit={"audit_path": audit_path}), audit_log)
    try:
        async with Client(assembly.mcp, mode="legacy") as client:
            spawned = await client.call_tool("shell_spawn", {"env": {"PS1": "READY> "}, "until": "READY> $"})
            session_id = fields(spawned)["session_id"]
            sent = await client.call_tool("session_send", {"session_id": session_id, "data": f"touch {made}"})
            assert sent.is_error, text_of(sent)
            assert text_of(sent).startswith("[ERROR: ReaderChanged: "), text_of(sent)
            after = await client.call_tool("session_recv", {"session_id": session_id, "timeout": 1})
            assert "touch" not in text_of(after)  # nothing was typed
    finally:
        await assembly.shutdown()
        audit_log.close()
    assert not made.exists()
    ends = [r for r in read_records(audit_path) if r["tool"] == "session_send" and r["phase"] == "end"]
    assert len(ends) == 1 and "ReaderChanged" in str(ends[0]), ends
