"""The audit log on real files: whole records or none, a torn tail repaired on reopen, interrupted calls listed by
`verify` and found at start-up. (A short write from a real full file system is in test_write_ahead_audit.py.)"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from relay_shell.audit.interrupted import MAX_LISTED, find_interrupted, restart_fields
from relay_shell.audit.log import REPAIR_TOOL, AuditLog
from relay_shell.audit.verify import verify_files
from tests.conftest import read_records


def call(log: AuditLog, call_id: str, phase: str, tool: str = "shell_exec") -> None:
    log.write({"v": 1, "ts": f"t-{call_id}-{phase}", "tool": tool, "phase": phase, "call_id": call_id, "args": {}})


def test_an_incomplete_last_line_is_removed_on_reopen_and_the_removal_recorded(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    call(log, "a-1", "start")
    call(log, "a-1", "end")
    log.close()
    # What a process killed between a short write and taking it back, or a power loss, leaves behind.
    fragment = b'{"args":{},"call_id":"a-2","phase":"sta'
    with open(path, "ab") as handle:
        handle.write(fragment)
    assert not verify_files([path]).ok  # as it stands the file does not verify: the torn line

    reopened = AuditLog(path)
    reopened.open()
    call(reopened, "a-3", "start")
    reopened.close()
    result = verify_files([path])
    assert result.ok, result.message
    records = read_records(path)
    assert [record["tool"] for record in records] == ["shell_exec", "shell_exec", REPAIR_TOOL, "shell_exec"]
    repair = records[2]
    assert repair["removed_bytes"] == len(fragment)
    assert repair["removed_sha256"] == hashlib.sha256(fragment).hexdigest()
    assert repair["seq"] == 2 and repair["prev"] == records[1]["chain"]  # the chain goes on unbroken


def test_a_file_holding_only_a_torn_line_starts_a_fresh_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"v":1,"tool":"shell_ex')
    log = AuditLog(path)
    log.open()
    call(log, "b-1", "start")
    log.close()
    assert verify_files([path]).ok
    assert [record["tool"] for record in read_records(path)] == [REPAIR_TOOL, "shell_exec"]


def test_verify_lists_a_start_without_an_end_as_interrupted_and_still_passes(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    call(log, "c-1", "start")
    call(log, "c-2", "start", tool="ssh_exec")
    call(log, "c-1", "end")
    log.write({"v": 1, "tool": "server_info", "phase": "end", "call_id": "c-3", "args": {}})  # a single record
    log.close()
    result = verify_files([path])
    assert result.ok
    assert [(call.call_id, call.tool, call.ts, call.where) for call in result.interrupted] == [
        ("c-2", "ssh_exec", "t-c-2-start", f"{path}:2")
    ]
    verified = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", str(path)], capture_output=True, text=True
    )
    assert verified.returncode == 0
    assert "OK: 4 records" in verified.stdout and "1 interrupted call(s)" in verified.stdout
    assert f"  c-2 ssh_exec started t-c-2-start ({path}:2)" in verified.stdout


def test_a_call_that_ends_in_the_next_rotated_file_is_not_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    call(log, "d-1", "start")
    path.rename(tmp_path / "audit.jsonl.1")  # logrotate by rename while the call runs
    call(log, "d-1", "end")
    log.close()
    result = verify_files([tmp_path / "audit.jsonl.1", path])
    assert result.ok and result.interrupted == ()
    alone = verify_files([tmp_path / "audit.jsonl.1"])
    assert alone.ok and [call.call_id for call in alone.interrupted] == ["d-1"]


def test_start_up_finds_only_what_the_previous_process_left_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    assert find_interrupted(path).interrupted == []  # no log yet
    log = AuditLog(path)
    log.open()
    log.write({"v": 1, "tool": "server:start", "interrupted": []})
    call(log, "e-1", "start")  # the first process: dies during e-1
    log.write({"v": 1, "tool": "server:start", "interrupted": [{"call_id": "e-1"}]})
    call(log, "e-2", "start")
    call(log, "e-3", "start")
    call(log, "e-2", "end")
    # an argument that spells a phase is not a record's phase
    log.write({"v": 1, "tool": "shell_exec", "phase": "end", "call_id": "e-4", "args": {"phase": "start"}})
    call(log, "e-5", "start")  # the second process dies during e-3 and e-5
    log.close()
    previous = find_interrupted(path)
    assert [call.call_id for call in previous.interrupted] == ["e-3", "e-5"]  # e-1 was named by the last start
    assert previous.complete
    fields = restart_fields(previous, [{"call_id": "e-3", "pids": [123], "ended": True}])
    assert fields["interrupted"] == [
        {"call_id": "e-3", "tool": "shell_exec", "ts": "t-e-3-start", "client_id": None},
        {"call_id": "e-5", "tool": "shell_exec", "ts": "t-e-5-start", "client_id": None},
    ]
    assert fields["interrupted_count"] == 2
    assert fields["leftover_processes"] == [{"call_id": "e-3", "pids": [123], "ended": True}]


def test_start_up_names_only_calls_of_the_previous_process_by_its_call_tag(tmp_path: Path) -> None:
    """A second server writing the same log (against the rule) has calls in flight: not interrupted ones."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    log.write({"v": 1, "tool": "server:start", "call_tag": "aaaa", "interrupted": []})
    call(log, "aaaa-1", "start")  # the previous process dies during aaaa-1
    call(log, "bbbb-7", "start")  # another live server's call, still running
    call(log, "aaaa-2", "start")
    call(log, "aaaa-2", "end")
    log.close()
    assert [call.call_id for call in find_interrupted(path).interrupted] == ["aaaa-1"]


def test_the_restart_record_names_at_most_a_thousand_calls_and_counts_all(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    lines = [
        orjson.dumps({"tool": "shell_exec", "phase": "start", "call_id": f"f-{n}", "ts": str(n)})
        for n in range(MAX_LISTED + 5)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    fields = restart_fields(find_interrupted(path), [])
    assert fields["interrupted_count"] == MAX_LISTED + 5
    assert len(fields["interrupted"]) == MAX_LISTED
    assert fields["interrupted"][-1]["call_id"] == f"f-{MAX_LISTED + 4}"  # the newest are kept


@pytest.fixture
def append_only() -> Iterator[list[Path]]:
    """Files the test makes append-only (`chattr +a`: no truncation, as an operator may harden a log)."""
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-a", str(path)], check=False)


def make_append_only(path: Path, made: list[Path]) -> None:
    made.append(path)
    done = subprocess.run(["chattr", "+a", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"chattr +a is needed for this test (root, a file system with attributes): {done}"


def test_an_append_only_log_marks_a_torn_tail_it_cannot_cut(tmp_path: Path, append_only: list[Path]) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    call(log, "g-1", "start")
    log.close()
    fragment = b'{"args":{},"call_id":"g-2","phase":"start","prev":"00'
    with open(path, "ab") as handle:
        handle.write(fragment)
    make_append_only(path, append_only)

    reopened = AuditLog(path)
    reopened.open()
    call(reopened, "g-1", "end")
    reopened.close()
    data = path.read_bytes()
    assert fragment + b" <torn>\n" in data  # kept, closed off
    result = verify_files([path])
    assert result.ok, result.message
    assert result.records == 3 and result.interrupted == ()
    (repair,) = [orjson.loads(line) for line in data.splitlines() if b'"audit:repair"' in line]
    assert repair["marked_bytes"] == len(fragment) + len(b" <torn>\n")
    assert repair["marked_sha256"] == hashlib.sha256(fragment + b" <torn>\n").hexdigest()


def test_a_mark_cut_short_itself_is_marked_whole_on_the_next_open(tmp_path: Path, append_only: list[Path]) -> None:
    """The disk filled again while the mark was written: the fragment, its closing and a piece of the repair
    record are left. The next open names all of it."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    call(log, "h-1", "start")
    log.close()
    with open(path, "ab") as handle:
        handle.write(b'{"args":{},"call_id":"h-2"' + b" <torn>\n" + b'{"marked_bytes":35,"reas')
    make_append_only(path, append_only)
    reopened = AuditLog(path)
    reopened.open()
    reopened.close()
    result = verify_files([path])
    assert result.ok, result.message


def test_marked_damage_that_was_changed_afterwards_fails_verification(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    call(log, "i-1", "start")
    log.close()
    with open(path, "ab") as handle:
        handle.write(b'{"args":{},"call_id":"i-2"')
    # Not append-only here, so the fragment would be cut: make it a complete non-record line first, which is only
    # ever marked, never cut.
    with open(path, "ab") as handle:
        handle.write(b" <torn>\n")
    reopened = AuditLog(path)
    reopened.open()
    reopened.close()
    assert verify_files([path]).ok
    tampered = path.read_bytes().replace(b'"call_id":"i-2"', b'"call_id":"i-3"')
    path.write_bytes(tampered)
    result = verify_files([path])
    assert not result.ok and ":2: not valid JSON" in result.message
