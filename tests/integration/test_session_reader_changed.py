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

from tests.conftest import fields, read_records, text_of
from tests.integration.between_check_and_type import changed_after_check

pytestmark = pytest.mark.anyio


def reading_one_byte(pid: int) -> bool:
    """The process's main thread is in read(2) of one byte from descriptor 0."""
    fields = Path(f"/proc/{pid}/syscall").read_text().split()
    return fields[:2] == ["0", "0x0"] and fields[3:4] == ["0x1"]


async def test_a_line_checked_before_the_shell_began_to_read_one_byte_is_not_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = tmp_path / "made"

    def shell_reads_one_byte(terminal: Any) -> None:
        os.write(terminal.fd, b"read -n1 x\r")
        deadline = time.monotonic() + 10
        while not reading_one_byte(terminal.pid):
            assert time.monotonic() < deadline, "bash never reached its read of one byte"
            time.sleep(0.01)

    async with changed_after_check(tmp_path, monkeypatch, shell_reads_one_byte) as (client, audit_path):
        spawned = await client.call_tool("shell_spawn", {"env": {"PS1": "READY> "}, "until": "READY> $"})
        session_id = fields(spawned)["session_id"]
        sent = await client.call_tool("session_send", {"session_id": session_id, "data": f"touch {made}"})
        assert sent.is_error, text_of(sent)
        assert text_of(sent).startswith("[ERROR: ReaderChanged: "), text_of(sent)
        after = await client.call_tool("session_recv", {"session_id": session_id, "timeout": 1})
        assert "touch" not in text_of(after)  # nothing was typed
    assert not made.exists()
    ends = [r for r in read_records(audit_path) if r["tool"] == "session_send" and r["phase"] == "end"]
    assert len(ends) == 1 and "ReaderChanged" in str(ends[0]), ends
