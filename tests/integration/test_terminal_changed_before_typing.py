"""A terminal whose special characters change after a session_send was checked but before it types (review P1,
adr/0026): nothing is typed, the call fails with TerminalChanged, and its records say so.

A program in the session changes them in that window only by chance (a background job timed to it: a race the
agent could win only by luck), so the test makes the change itself at that moment: the real preparation runs,
then the test sets the erase character on the session's real PTY, as `tset -e Q` would. Nothing else is replaced.
"""

from __future__ import annotations

import termios
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


async def test_a_line_checked_before_the_terminal_changed_is_not_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare_send = send_plan.prepare_send
    made = tmp_path / "made"

    def prepared_then_changed(settings: Settings, registry: SessionRegistry, owner: str, **arguments: Any) -> Plan:
        plan = prepare_send(settings, registry, owner, **arguments)
        descriptor = registry.sessions[arguments["session_id"]].terminal.fd
        attributes = termios.tcgetattr(descriptor)
        attributes[6][termios.VERASE] = b"Q"
        termios.tcsetattr(descriptor, termios.TCSANOW, attributes)
        return plan

    # session_send imports prepare_send from its module at each call (loaded by the first: adr/0030, Round 5)
    monkeypatch.setattr(send_plan, "prepare_send", prepared_then_changed)
    audit_path = tmp_path / "audit.jsonl"
    audit_log = AuditLog(audit_path)
    audit_log.open()
    assembly = build_server(Settings(audit={"audit_path": audit_path}), audit_log)
    try:
        async with Client(assembly.mcp, mode="legacy") as client:
            spawned = await client.call_tool(
                "shell_spawn", {"command": ["sh"], "env": {"PS1": "READY> "}, "until": "READY> $", "timeout": 10}
            )
            session_id = fields(spawned)["session_id"]
            sent = await client.call_tool("session_send", {"session_id": session_id, "data": f"touch {made}xQ"})
            assert sent.is_error, text_of(sent)
            assert text_of(sent).startswith("[ERROR: TerminalChanged: "), text_of(sent)
            after = await client.call_tool("session_recv", {"session_id": session_id, "timeout": 1})
            assert "touch" not in text_of(after)  # nothing was typed
    finally:
        await assembly.shutdown()
        audit_log.close()
    assert not made.exists() and not Path(f"{made}x").exists()
    ends = [r for r in read_records(audit_path) if r["tool"] == "session_send" and r["phase"] == "end"]
    assert len(ends) == 1 and "TerminalChanged" in str(ends[0]), ends
