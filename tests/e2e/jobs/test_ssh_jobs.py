"""ssh_exec yields like shell_exec (adr/0028), against a real sshd: the long remote command runs on as a job read
with session_recv, its stdin open for session_send, session_kill ends its whole remote session, and a cut result
pages like a local one."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import connect, fields, text_of
from tests.e2e.jobs.helpers import call_of_job, call_records, job_of, until_ended
from tests.e2e.jobs.test_outputs import page_all
from tests.e2e.ssh.exec_helpers import marker, pids_running
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]


@pytest.fixture
def audit(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


@pytest.fixture
async def client(fleet: SshFleet, audit: Path) -> AsyncIterator[Client]:
    async with connect(audit, ssh_config=str(fleet.ssh_config)) as server:
        yield server


async def test_a_long_remote_command_yields_then_ends(client: Client, audit: Path) -> None:
    assert fields(await client.call_tool("ssh_exec", {"host": "h01", "command": "true"}))["exit_code"] == 0  # dialled
    started = time.monotonic()
    command = "echo start; sleep 3; echo done"
    result = await client.call_tool("ssh_exec", {"host": "h01", "command": command, "yield_after": 1})
    returned_after = time.monotonic() - started
    job_id = job_of(result)
    assert returned_after < 1.5, f"the call returned after {returned_after:.2f}s"
    assert fields(result)["host"] == "h01" and fields(result)["host_key"], fields(result)
    final = await client.call_tool("session_recv", {"session_id": job_id, "until": "done", "timeout": 10})
    assert text_of(final).splitlines()[0] == "[exit 0]" and fields(final)["output"] == "done\n", text_of(final)
    assert fields(final)["result"]["host"] == "h01"
    listed = {item["session_id"]: item for item in fields(await client.call_tool("session_list", {}))["sessions"]}
    assert listed[job_id]["kind"] == "ssh job" and listed[job_id]["command"].endswith(f": {command}")
    end = call_records(audit, call_of_job(audit, job_id))["end"]
    assert end["exit_code"] == 0 and end["raw_sha256"] == hashlib.sha256(b"start\ndone\n").hexdigest(), end
    assert end["target"]["host"] == "h01" and end["job_id"] == job_id


async def test_session_kill_ends_the_remote_session(client: Client) -> None:
    sleep = marker()
    command = f"sleep {sleep} & sleep {sleep}"  # a background job of the remote shell, and its foreground
    job_id = job_of(await client.call_tool("ssh_exec", {"host": "h01", "command": command, "yield_after": 0.5}))
    deadline = time.monotonic() + 10
    while len(pids_running(sleep)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids_running(sleep)) == 2, "the remote sleeps run while the job does"
    killed = await client.call_tool("session_kill", {"session_id": job_id})
    assert not killed.is_error and text_of(killed).startswith(f"[closed {job_id}: "), text_of(killed)
    deadline = time.monotonic() + 10
    while pids_running(sleep) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_running(sleep) == set(), "the job's whole remote session is ended (`pkill -s`, as on a timeout)"
    final = await client.call_tool("session_recv", {"session_id": job_id})
    assert text_of(final).splitlines()[0] == "[CANCELLED: ended by session_kill (SIGTERM)]", text_of(final)


async def test_stdin_open_over_ssh(client: Client) -> None:
    job_id = job_of(
        await client.call_tool("ssh_exec", {"host": "h01", "command": "cat", "yield_after": 0.5, "stdin_open": True})
    )
    sent = await client.call_tool("session_send", {"session_id": job_id, "data": "over ssh", "until": "over ssh"})
    assert "over ssh" in text_of(sent), text_of(sent)
    closed = await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-d"], "timeout": 5})
    final = closed if not fields(closed)["running"] else await until_ended(client, job_id)
    assert text_of(final).splitlines()[0] == "[exit 0]" and fields(final)["result"]["output"] == "over ssh\n"


async def test_a_cut_remote_result_pages_in_full(client: Client, audit: Path) -> None:
    result = await client.call_tool("ssh_exec", {"host": "h01", "command": "seq 1 300000", "max_output": 1000})
    output_id = fields(result)["output_id"]
    assert output_id and fields(result)["truncated"]
    data, _ = await page_all(client, output_id, 1024 * 1024)
    assert data == b"".join(b"%d\n" % number for number in range(1, 300001))
    assert hashlib.sha256(data).hexdigest() == fields(result)["output_sha256"]
