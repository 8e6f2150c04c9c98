"""Jobs (adr/0028) are contained like any call: session_kill of a job ends every process it started, escapes
included; SIGTERM of the server ends a running job and writes its end record; `kill -9` of the server during a job
leaves its start record (and its `job` note) without an end, reported as interrupted, and the next start ends what
it left. Under both containments (the fixtures of conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import fields, read_records, text_of
from tests.e2e.containment.test_containment import (
    contained,
    end_strays,
    escapes,
    new_token,
    server_pid,
    survivors,
    wait_running,
)
from tests.e2e.containment.test_leftovers import kill_9
from tests.e2e.jobs.helpers import call_of_job, call_records, job_of

pytestmark = pytest.mark.anyio


async def test_session_kill_of_a_job_ends_every_escape(
    tmp_path: Path, mode: str, cgroup: Path | None, token: str
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with contained(audit, mode, cgroup) as client:
        command = escapes(token) + "echo started; sleep 300"
        job_id = job_of(await client.call_tool("shell_exec", {"command": command, "yield_after": 1, "timeout": 600}))
        assert len(wait_running(token)) == 3, "the escapes run while the job does"
        killed = await client.call_tool("session_kill", {"session_id": job_id})
        assert text_of(killed) == f"[closed {job_id}: killed by SIGTERM]", text_of(killed)
        assert survivors(token) == {}
        final = await client.call_tool("session_recv", {"session_id": job_id})
        assert text_of(final).splitlines()[0] == "[CANCELLED: ended by session_kill (SIGTERM)]", text_of(final)
        assert fields(final)["status"] == "cancelled" and fields(final)["result"]["signal"] == "SIGTERM"
    end = call_records(audit, call_of_job(audit, job_id))["end"]
    assert end["outcome"] == "cancelled" and end["reason"] == "ended by session_kill (SIGTERM)", end
    assert end["signal"] == "SIGTERM" and end["raw_len"] == len("started\n"), end
    kills = [record for record in read_records(audit) if record["tool"] == "session_kill"]
    assert [record["phase"] for record in kills] == ["start", "end"] and kills[1]["session_id"] == job_id


async def test_sigterm_ends_a_running_job_and_records_it(
    tmp_path: Path, mode: str, cgroup: Path | None, token: str
) -> None:
    audit = tmp_path / "audit.jsonl"
    counted: dict[int, str] | None = None
    try:
        async with contained(audit, mode, cgroup) as client:
            server = await server_pid(client)
            command = escapes(token) + "sleep 300"
            job_id = job_of(
                await client.call_tool("shell_exec", {"command": command, "yield_after": 1, "timeout": 600})
            )
            assert len(wait_running(token)) == 3
            os.kill(server, signal.SIGTERM)
            counted = await anyio.to_thread.run_sync(survivors, token)
    except Exception:
        if counted is None:  # the client may report its server gone; only what was counted matters
            raise
    assert counted == {}
    end = call_records(audit, call_of_job(audit, job_id))["end"]
    assert end["outcome"] == "cancelled" and end["reason"] == "server stopped: the job was ended", end
    assert end["job_id"] == job_id and end["duration_ms"] >= 1000, end


async def test_kill_9_during_a_job_reports_it_interrupted(tmp_path: Path, mode: str, cgroup: Path | None) -> None:
    token = new_token()
    audit = tmp_path / "audit.jsonl"
    killed: list[int] = []
    try:
        try:
            async with contained(audit, mode, cgroup) as client:
                server = await server_pid(client)
                command = f"sleep {token}1"
                job_id = job_of(
                    await client.call_tool("shell_exec", {"command": command, "yield_after": 0.5, "timeout": 600})
                )
                await anyio.to_thread.run_sync(lambda: wait_running(token, count=1))
                kill_9(server)
                killed.append(server)
        except Exception:  # the client reports its server vanishing; anything before the kill is a failure
            if not killed:
                raise
        call_id = call_of_job(audit, job_id)
        assert list(call_records(audit, call_id)) == ["start", "job"], "no end record: the server died"
        async with contained(audit, mode, cgroup) as client:  # the next start ends what the dead one left
            assert survivors(token, within=2.0) == {}
            assert text_of(await client.call_tool("shell_exec", {"command": "echo serving"})) == "[exit 0]\nserving\n"
        restart = [record for record in read_records(audit) if record["tool"] == "server:start"][-1]
        assert [call["call_id"] for call in restart["interrupted"]] == [call_id], restart["interrupted"]
        verified = subprocess.run(
            [sys.executable, "-m", "relay_shell", "audit", "verify", str(audit)], capture_output=True, text=True
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert f"{call_id} shell_exec started " in verified.stdout, verified.stdout
        assert f", ran on as job {job_id}" in verified.stdout, verified.stdout
        tail = subprocess.run(
            [sys.executable, "-m", "relay_shell", "audit", "tail", "--path", str(audit), "--call-id", call_id],
            capture_output=True,
            text=True,
        )
        assert [line.count('"phase":') for line in tail.stdout.splitlines()] == [1, 1], tail.stdout
        assert '"phase":"start"' in tail.stdout and '"phase":"job"' in tail.stdout, tail.stdout
    finally:
        end_strays(token)
