"""The case jobs exist for (adr/0028): a 70-second command with the server's default settings, through a real
stdio client and over HTTP at once. Each call returns a job handle before 50 s (RELAY_SHELL_YIELD_AFTER, 45 s by
default: below a client's usual 60 s request timeout), the command completes, and the end record and the final
session_recv agree."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import connect, fields, text_of
from tests.e2e.http.server import TOKENS, HttpServer, client
from tests.e2e.jobs.helpers import RUNNING, call_of_job, call_records, job_of

pytestmark = pytest.mark.anyio

COMMAND = "for i in $(seq 1 14); do echo step $i; sleep 5; done; echo finished"
OUTPUT = "".join(f"step {i}\n" for i in range(1, 15)) + "finished\n"


async def run_70_seconds(connected: Client, audit: Path) -> None:
    started = time.monotonic()
    result = await connected.call_tool("shell_exec", {"command": COMMAND, "timeout": 120})
    returned_after = time.monotonic() - started
    job_id = job_of(result)
    assert 44 < returned_after < 50, f"the handle came after {returned_after:.1f}s"
    found = RUNNING.match(text_of(result))
    assert found is not None and 45 <= float(found.group(2)) < 50, text_of(result)
    assert fields(result)["output"].startswith("step 1\nstep 2\n"), fields(result)["output"]
    final = None
    while final is None or fields(final)["running"]:  # as a client would: waits shorter than its timeout
        final = await connected.call_tool("session_recv", {"session_id": job_id, "until": "finished", "timeout": 40})
    assert time.monotonic() - started >= 70
    assert text_of(final).splitlines()[0] == "[exit 0]", text_of(final)
    whole = fields(final)["result"]
    assert whole["output"] == OUTPUT and whole["exit_code"] == 0 and whole["duration_ms"] >= 70000, whole
    end = call_records(audit, call_of_job(audit, job_id))["end"]
    assert end["exit_code"] == 0 and end["outcome"] == "ok", end
    assert end["raw_sha256"] == whole["output_sha256"] == hashlib.sha256(OUTPUT.encode()).hexdigest()
    assert end["raw_len"] == whole["output_bytes"] == len(OUTPUT)
    # The end record's output digest is of the text the one-shot call would have returned.
    assert end["output_sha256"] == hashlib.sha256(f"[exit 0]\n{OUTPUT}".encode()).hexdigest(), end


async def test_a_70_second_command_with_default_settings(tmp_path: Path, authed: HttpServer) -> None:
    async def over_stdio() -> None:
        async with connect(tmp_path / "audit.jsonl") as connected:
            await run_70_seconds(connected, tmp_path / "audit.jsonl")

    async def over_http() -> None:
        async with client(authed, TOKENS["alice"]) as connected:
            await run_70_seconds(connected, authed.audit_path)

    async with anyio.create_task_group() as group:
        group.start_soon(over_stdio)
        group.start_soon(over_http)
