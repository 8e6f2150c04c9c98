"""An in-process relay-shell whose session_send is changed on purpose between its check and its typing: the real
preparation runs, then `change` acts on the session's real terminal (the window is microseconds wide, so a program
would hit it only by chance), then the call goes on. Nothing else is replaced. Used by the tests of what a change in
that window does (ReaderChanged, TerminalChanged, a late echo-off)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
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


@asynccontextmanager
async def changed_after_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Callable[[Any], None]
) -> AsyncIterator[tuple[Client, Path]]:
    """A client of a server whose every session_send runs `change(terminal)` right after it was prepared; the
    server's audit log path beside it."""
    prepare_send = send_plan.prepare_send

    def prepared_then_changed(settings: Settings, registry: SessionRegistry, owner: str, **arguments: Any) -> Plan:
        plan = prepare_send(settings, registry, owner, **arguments)
        change(registry.sessions[arguments["session_id"]].terminal)  # a local session's LocalPty: its fd, pid
        return plan

    # session_send imports prepare_send from its module at each call (loaded by the first: adr/0030, Round 5)
    monkeypatch.setattr(send_plan, "prepare_send", prepared_then_changed)
    audit_path = tmp_path / "audit.jsonl"
    audit_log = AuditLog(audit_path)
    audit_log.open()
    assembly = build_server(Settings(audit={"audit_path": audit_path}), audit_log)
    try:
        async with Client(assembly.mcp, mode="legacy") as client:
            yield client, audit_path
    finally:
        await assembly.shutdown()
        audit_log.close()
