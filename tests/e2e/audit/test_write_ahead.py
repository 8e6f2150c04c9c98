"""Write-ahead audit end to end, through a real stdio client: nothing runs unless its start record is on disk.

The log fails for real while the server is serving: a small tmpfs that the test fills up (the kernel's own
short write and ENOSPC), and the log file made immutable with `chattr +i`. The server is killed with SIGKILL in
the middle of a call, and the next start names what it left interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay_shell.audit.verify import verify_files
from tests.conftest import connect, read_records, text_of
from tests.integration.test_stdio_transport import INITIALIZE, INITIALIZED, exchange, start_server

pytestmark = pytest.mark.anyio

PAGE = 4096


def audit_verify(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", *map(str, paths)], capture_output=True, text=True
    )


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: a real file system to fill up (needs root, as on the project's machines and in CI)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    assert mounted.returncode == 0, (
        f"cannot mount a 256 KiB tmpfs for the disk-full test (needs root): {mounted.stderr}"
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_up(directory: Path) -> Path:
    """Write a file until the file system has no byte left (big blocks, then small ones, then single bytes)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, PAGE, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


async def calls_until_refused(client: Any, tmp_path: Path) -> str:
    """Call until the full file system refuses one; that one must not have run. Returns its refusal.

    The log's last page still has room: calls run while their records fit in it. The first record that does not
    fit is cut short by the kernel; the call whose start record that is must not run."""
    for index in range(60):
        marker = tmp_path / f"ran-{index}"
        result = await client.call_tool("shell_exec", {"command": f"touch {marker}"})
        text = text_of(result)
        if text.startswith("[ERROR: AuditUnavailable: "):
            assert result.is_error
            assert not marker.exists(), "a call whose start record could not be written ran"
            assert "RELAY_SHELL_AUDIT_ON_FAILURE=refuse" in text and "nothing ran" in text
            return text
        if text.startswith("[ERROR: AuditWriteFailed: the call ran"):
            assert marker.exists()  # its start record was written, then its end record did not fit
            continue
        assert text == "[exit 0]", text
    raise AssertionError("the full file system never refused a call")


async def test_a_full_disk_refuses_the_call_before_it_runs_and_leaves_no_torn_line(
    tmp_path: Path, small_fs: Path
) -> None:
    audit_path = small_fs / "logs" / "audit.jsonl"
    async with connect(audit_path) as client:
        first = await client.call_tool("shell_exec", {"command": "echo before"})
        assert text_of(first) == "[exit 0]\nbefore\n"
        filler = fill_up(small_fs)
        refusal = await calls_until_refused(client, tmp_path)
        size = audit_path.stat().st_size
        # A record cut short is taken back at once: the log ends with a whole line and still verifies.
        short = "short write" in refusal
        print(f"log of {size} bytes when refused; the kernel {'cut a record short' if short else 'refused it whole'}")
        assert short or size % PAGE == 0, refusal
        assert audit_path.read_bytes().endswith(b"\n")
        assert verify_files([audit_path]).ok

        filler.unlink()  # space again: the log recovers by itself, the next call runs
        marker = tmp_path / "ran-after"
        again = await client.call_tool("shell_exec", {"command": f"touch {marker} && echo after"})
        assert text_of(again) == "[exit 0]\nafter\n"
        assert marker.exists()
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        audit = info.structured_content["info"]["audit"]
        assert audit["healthy"] is True and audit["refused_calls"] >= 1 and audit["write_errors"] >= 1
    verified = audit_verify(audit_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    starts = [record for record in read_records(audit_path) if record.get("phase") == "start"]
    assert any(record["args"]["command"] == f"touch {marker} && echo after" for record in starts)


async def test_a_full_disk_under_an_append_only_log_marks_what_it_cannot_cut(
    tmp_path: Path, small_fs: Path, chattr: Any
) -> None:
    """`chattr +a`: the partial record cannot be taken back; once there is space, it is closed off and named
    by an audit:repair record, and the chain verifies."""
    audit_path = small_fs / "logs" / "audit.jsonl"
    async with connect(audit_path) as client:
        assert text_of(await client.call_tool("shell_exec", {"command": "echo before"})) == "[exit 0]\nbefore\n"
        chattr("a", audit_path)
        filler = fill_up(small_fs)
        refusal = await calls_until_refused(client, tmp_path)
        torn = not audit_path.read_bytes().endswith(b"\n")  # the kernel cut a record short, and it stays
        print(f"refused: {refusal}; torn tail left: {torn}")
        assert torn or audit_path.stat().st_size % PAGE == 0, refusal
        filler.unlink()
        marker = tmp_path / "ran-after"
        again = await client.call_tool("shell_exec", {"command": f"touch {marker} && echo after"})
        assert text_of(again) == "[exit 0]\nafter\n" and marker.exists()
    verified = audit_verify(audit_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    repairs = [record for record in read_records_lenient(audit_path) if record.get("tool") == "audit:repair"]
    if torn:
        assert repairs and all("marked_sha256" in record for record in repairs), repairs


def read_records_lenient(audit_path: Path) -> list[dict[str, Any]]:
    """The records of a log that may hold marked damage (lines that are no record)."""
    records = []
    for line in audit_path.read_bytes().splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            records.append(orjson.loads(line))
    return records


def scrape(port: int, name: str) -> float:
    """One unlabelled sample from the server's /metrics listener."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    (value,) = [line.split()[1] for line in exposition.splitlines() if line.startswith(name + " ")]
    return float(value)


async def test_an_immutable_log_refuses_the_call_and_recovers_when_writable(tmp_path: Path, chattr: Any) -> None:
    audit_path = tmp_path / "logs" / "audit.jsonl"
    marker = tmp_path / "ran"
    async with connect(audit_path, metrics_addr="127.0.0.1:0") as client:
        assert text_of(await client.call_tool("shell_exec", {"command": "echo before"})) == "[exit 0]\nbefore\n"
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        port = info.structured_content["info"]["metrics"]["listen_port"]
        assert scrape(port, "relay_shell_audit_refused_calls_total") == 0.0
        chattr("i", audit_path)
        for _ in range(2):  # the write fails on the open file, then reopening it fails: both refuse
            refused = await client.call_tool("shell_exec", {"command": f"touch {marker}"})
            assert refused.is_error
            assert text_of(refused).startswith("[ERROR: AuditUnavailable: "), text_of(refused)
            assert "Operation not permitted" in text_of(refused)
            assert not marker.exists()
        assert scrape(port, "relay_shell_audit_refused_calls_total") == 2.0
        assert scrape(port, "relay_shell_audit_degraded") == 1.0
        subprocess.run(["chattr", "-i", str(audit_path)], check=True)
        again = await client.call_tool("shell_exec", {"command": f"touch {marker} && echo after"})
        assert text_of(again) == "[exit 0]\nafter\n" and marker.exists()
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        assert info.structured_content["info"]["audit"]["refused_calls"] == 2
    verified = audit_verify(audit_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    commands = [record["args"].get("command") for record in read_records(audit_path) if record.get("phase") == "start"]
    assert f"touch {marker}" not in commands  # the refused calls never got a start record: they did not run


async def test_continue_mode_runs_without_a_start_record_and_counts_it(tmp_path: Path, chattr: Any) -> None:
    audit_path = tmp_path / "logs" / "audit.jsonl"
    marker = tmp_path / "ran"
    async with connect(audit_path, audit_on_failure="continue") as client:
        await client.call_tool("shell_exec", {"command": "true"})
        chattr("i", audit_path)
        result = await client.call_tool("shell_exec", {"command": f"touch {marker} && echo done"})
        assert text_of(result) == "[exit 0]\ndone\n" and marker.exists()
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        audit = info.structured_content["info"]["audit"]
        assert audit["healthy"] is False and audit["write_errors"] >= 2 and audit["refused_calls"] == 0


def wait_for_start_record(audit_path: Path, command: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in read_records(audit_path) if audit_path.exists() else []:
            if record.get("phase") == "start" and record["args"].get("command") == command:
                return record
        time.sleep(0.05)
    raise AssertionError(f"no start record for {command!r}")


def end_process_groups_running(text: str) -> None:
    """Kill what a SIGKILLed server left running (its command's process group), found by its command line."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            if text.encode() in cmdline:
                os.killpg(os.getpgid(int(entry)), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


async def test_kill_9_during_a_call_leaves_its_start_record_and_the_next_start_names_it(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    never = tmp_path / "M"
    command = f"sleep 30; touch {never}"
    arguments = {"command": command, "timeout": 120}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "shell_exec", "arguments": arguments}}
    server = start_server(audit_path)
    try:
        exchange(server, [orjson.dumps(INITIALIZE), INITIALIZED])
        assert server.stdin is not None
        server.stdin.write(orjson.dumps(call) + b"\n")
        server.stdin.flush()
        started = wait_for_start_record(audit_path, command)
        server.send_signal(signal.SIGKILL)
        assert server.wait(timeout=10) == -signal.SIGKILL
    finally:
        if server.poll() is None:
            server.kill()
        # Whether `M` appears depends on containment (ending a dead server's leftovers), which its own test
        # covers; here the leftover is ended by the test so that nothing outlives it.
        end_process_groups_running(str(never))

    # The log holds the call's start record, and nothing after it: verification passes and lists it.
    records = read_records(audit_path)
    assert records[-1] == started
    assert started["tool"] == "shell_exec" and started["decision"] == "admitted" and started["tier"] == 1
    assert started["client_id"] == "stdio:t" and started["request_id"] == "2"
    verified = audit_verify(audit_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "1 interrupted call(s)" in verified.stdout
    assert f"{started['call_id']} shell_exec started {started['ts']} ({audit_path}:" in verified.stdout

    # The next start writes the record naming it, and says so in server_info.
    async with connect(audit_path) as client:
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        assert info.structured_content["info"]["audit"]["interrupted_at_start"] == 1
    starts = [record for record in read_records(audit_path) if record["tool"] == "server:start"]
    assert len(starts) == 2
    restart = starts[1]
    assert restart["interrupted"] == [
        {"call_id": started["call_id"], "tool": "shell_exec", "ts": started["ts"], "client_id": "stdio:t"}
    ]
    assert restart["interrupted_count"] == 1 and restart["scan"]["complete"] is True
    assert restart["leftover_processes"] == []  # containment fills it; without it nothing is looked for
    assert starts[0]["interrupted"] == [] and starts[0]["pid"] != restart["pid"]

    # A third start names nothing: the previous process (the second) finished all it started.
    async with connect(audit_path):
        pass
    last = [record for record in read_records(audit_path) if record["tool"] == "server:start"][-1]
    assert last["interrupted"] == [] and last["interrupted_count"] == 0
    assert audit_verify(audit_path).returncode == 0


async def test_audit_tail_and_the_resource_filter_by_call_id(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path) as client:
        await client.call_tool("shell_exec", {"command": "echo one"})
        await client.call_tool("shell_exec", {"command": "echo two"})
        (call_id,) = {
            record["call_id"] for record in read_records(audit_path) if record.get("args") == {"command": "echo one"}
        }
        tail = await client.call_tool("audit_tail", {"call_id": call_id})
        assert tail.structured_content is not None
        records = tail.structured_content["records"]
        assert [(record["phase"], record["call_id"]) for record in records] == [("start", call_id), ("end", call_id)]
        assert records[0]["decision"] == "admitted" and "outcome" not in records[0]
        assert records[1]["outcome"] == "ok" and records[1]["exit_code"] == 0

        read = await client.read_resource(f"relay-shell://audit/recent?call_id={call_id}")
        content = read.contents[0]
        assert hasattr(content, "text")
        assert [record["phase"] for record in orjson.loads(content.text)] == ["start", "end"]

        bad = await client.call_tool("audit_tail", {"call_id": "not a call id"})
        assert bad.is_error
        assert text_of(bad).startswith("[ERROR: InvalidArgument: call_id: 'not a call id' is not a call id; allowed: ")
        with pytest.raises(Exception, match="call_id: 'x y' is not a call id"):
            await client.read_resource("relay-shell://audit/recent?call_id=x%20y")
    tail_cli = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "tail", "--path", str(audit_path), "--call-id", call_id],
        capture_output=True,
        text=True,
    )
    assert tail_cli.returncode == 0, tail_cli.stderr
    assert [orjson.loads(line)["phase"] for line in tail_cli.stdout.splitlines()] == ["start", "end"]


async def test_every_tool_that_acts_writes_its_start_first_and_pure_reads_one_record(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path) as client:
        script = await client.call_tool("shell_script", {"script": "echo scripted"})
        assert not script.is_error
        spawned = await client.call_tool("shell_spawn", {"command": "cat", "timeout": 0.5})
        assert spawned.structured_content is not None
        session_id = spawned.structured_content["session_id"]
        await client.call_tool("session_send", {"session_id": session_id, "data": "typed", "timeout": 0.5})
        await client.call_tool("session_recv", {"session_id": session_id, "timeout": 0})
        await client.call_tool("session_list", {})
        await client.call_tool("session_kill", {"session_id": session_id})
        await client.call_tool("server_info", {})
        await client.call_tool("audit_tail", {"lines": 1})
        await client.call_tool("ssh_hosts", {})
        await client.call_tool("ssh_forward_list", {})
    records = [record for record in read_records(audit_path) if "call_id" in record]
    by_call: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_call.setdefault(record["call_id"], []).append(record)
    phases = {calls[0]["tool"]: [record["phase"] for record in calls] for calls in by_call.values()}
    for tool in ("shell_script", "shell_spawn", "session_send", "session_kill"):
        assert phases[tool] == ["start", "end"], tool
    for tool in ("session_recv", "session_list", "server_info", "audit_tail", "ssh_hosts", "ssh_forward_list"):
        assert phases[tool] == ["end"], tool
    spawn_start = next(record for record in records if record["tool"] == "shell_spawn")
    assert spawn_start["phase"] == "start" and spawn_start["session_id"] == session_id  # named before it started
