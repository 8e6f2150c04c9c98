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

from tests.conftest import fields, read_records, text_of
from tests.integration.between_check_and_type import changed_after_check

pytestmark = pytest.mark.anyio


async def test_a_line_checked_before_the_terminal_changed_is_not_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = tmp_path / "made"

    def erase_is_q(terminal: Any) -> None:
        attributes = termios.tcgetattr(terminal.fd)
        attributes[6][termios.VERASE] = b"Q"
        termios.tcsetattr(terminal.fd, termios.TCSANOW, attributes)

    async with changed_after_check(tmp_path, monkeypatch, erase_is_q) as (client, audit_path):
        spawned = await client.call_tool(
            "shell_spawn", {"command": ["sh"], "env": {"PS1": "READY> "}, "until": "READY> $", "timeout": 10}
        )
        session_id = fields(spawned)["session_id"]
        sent = await client.call_tool("session_send", {"session_id": session_id, "data": f"touch {made}xQ"})
        assert sent.is_error, text_of(sent)
        assert text_of(sent).startswith("[ERROR: TerminalChanged: "), text_of(sent)
        after = await client.call_tool("session_recv", {"session_id": session_id, "timeout": 1})
        assert "touch" not in text_of(after)  # nothing was typed
    assert not made.exists() and not Path(f"{made}x").exists()
    ends = [r for r in read_records(audit_path) if r["tool"] == "session_send" and r["phase"] == "end"]
    assert len(ends) == 1 and "TerminalChanged" in str(ends[0]), ends
