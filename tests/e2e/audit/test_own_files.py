"""End to end (attack 3, L1; adr/0025 Round 7): in guarded mode the audit log cannot be moved aside and replaced
by a forged one, nor appended to; a real relay-shell over stdio, the log checked on disk afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import connect, fields, read_records, text_of

pytestmark = pytest.mark.anyio


async def test_the_audit_log_cannot_be_replaced_or_forged_in_guarded_mode(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    async with connect(log, policy_mode="guarded") as client:
        for command in (
            f"mv {log} {tmp_path}/a.old && echo '{{\"seq\": 0}}' > {log}",
            f"echo '{{\"seq\": 99}}' >> {log}",
            f"cp /dev/null {log}.1",
        ):
            result = await client.call_tool("shell_exec", {"command": command})
            assert "DENIED tier 3" in text_of(result) and "own file" in text_of(result), text_of(result)
        copied = await client.call_tool("shell_exec", {"command": f"cp {log} {tmp_path}/copy.jsonl"})
        assert fields(copied)["status"] == "ok", text_of(copied)
    assert not (tmp_path / "a.old").exists()
    records = read_records(log)
    sequence = [record["seq"] for record in records]
    assert sequence == list(range(sequence[0], sequence[0] + len(sequence)))  # the server's own, unbroken
    assert len(records) == 6  # the server start, three refusals, the copy's start and end
