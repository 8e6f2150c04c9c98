"""A terminal that turns echo off after a session_send was prepared but before it types (a program at its password
prompt turning echo off at that instant): the input is typed, and the call's end record withholds it (adr/0014,
adr/0026). The start record, written before the terminal changed, keeps what the call sent.

A real program would turn echo off in that window only by chance (it is microseconds wide: no await separates
preparing, the start record and the write), so the test makes the change itself at that moment: the real
preparation runs, then the test turns ECHO off on the session's real PTY. Nothing else is replaced.
"""

from __future__ import annotations

import termios
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fields, read_records, text_of
from tests.integration.between_check_and_type import changed_after_check

pytestmark = pytest.mark.anyio

READ_A_LINE = (
    "python3 -c \"import sys; print('ready'); sys.stdout.write('Password: '); sys.stdout.flush(); "
    "line = sys.stdin.readline(); print('got', len(line))\""
)


async def test_echo_turned_off_after_preparing_withholds_the_input_from_the_end_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def echo_off(terminal: Any) -> None:
        attributes = termios.tcgetattr(terminal.fd)
        attributes[3] &= ~termios.ECHO
        termios.tcsetattr(terminal.fd, termios.TCSANOW, attributes)

    async with changed_after_check(tmp_path, monkeypatch, echo_off) as (client, audit_path):
        spawned = await client.call_tool("shell_spawn", {"command": READ_A_LINE, "until": "Password: ", "timeout": 10})
        session_id = fields(spawned)["session_id"]
        sent = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "hunter2", "until": r"got \d+\r?\n", "timeout": 10}
        )
        assert not sent.is_error, text_of(sent)
        assert "got 8" in text_of(sent) and "hunter2" not in text_of(sent)  # typed, and not echoed
    records = [record for record in read_records(audit_path) if record["tool"] == "session_send"]
    assert [record["phase"] for record in records] == ["start", "end"]
    start, end = records
    assert start["call_id"] == end["call_id"]
    assert start["args"]["data"] == "hunter2"  # on disk before the terminal changed: the documented limit
    assert end["args"]["data"] == "[withheld: 7 characters typed at the password prompt 'Password:']", end["args"]
