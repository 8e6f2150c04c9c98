"""What the job tests share: reading a result's job handle, a call's records by phase, and waiting on a job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import fields, read_records, text_of

# A job's first line: the yield's is exactly this; a read's may add how its wait ended (` | match 0 'x'`).
RUNNING = re.compile(r"\[RUNNING: job (j-[0-9a-f]{12}) after ([0-9.]+)s \| cursor (\d+)(\]| \| )")


def job_of(result: CallToolResult) -> str:
    """The job a yielded call names, checked in its text and its structured content alike."""
    text = text_of(result)
    found = RUNNING.match(text)
    assert found is not None and found.group(4) == "]", text
    got = fields(result)
    assert not result.is_error, text
    assert got["status"] == "running" and got["running"] is True, got
    assert got["job_id"] == found.group(1) and got["cursor"] == int(found.group(3)), (got, text)
    assert got["exit_code"] is None and got["signal"] is None, got
    return found.group(1)


def call_records(audit_path: Path, call_id: str) -> dict[str, dict[str, Any]]:
    """A call's records by phase (start, job, end)."""
    return {record["phase"]: record for record in read_records(audit_path) if record.get("call_id") == call_id}


def call_of_job(audit_path: Path, job_id: str) -> str:
    notes = [record for record in read_records(audit_path) if record.get("phase") == "job"]
    found = [record["call_id"] for record in notes if record.get("job_id") == job_id]
    assert len(found) == 1, notes
    return str(found[0])


async def until_ended(client: Client, job_id: str, within: float = 30.0) -> CallToolResult:
    """session_recv until the job's end: its last read, whose first line is the call's own."""
    result = await client.call_tool("session_recv", {"session_id": job_id, "until": "(?!)", "timeout": within})
    assert not fields(result)["running"], text_of(result)
    return result
