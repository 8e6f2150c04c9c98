import os
import shutil
import stat
from pathlib import Path

import orjson
import pytest

from relay_shell.audit.log import GENESIS, AuditLog, AuditWriteError, check_writable
from relay_shell.audit.verify import verify_files


def write_records(log: AuditLog, count: int, tool: str = "shell_exec") -> None:
    for index in range(count):
        log.write({"v": 1, "tool": tool, "index": index})


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "audit.jsonl"


def test_creates_private_file_and_directory(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.open()
    write_records(log, 1)
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700


def test_chain_links_records_from_genesis(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.open()
    write_records(log, 3)
    records = [orjson.loads(line) for line in lines_of(log_path)]
    assert [record["seq"] for record in records] == [0, 1, 2]
    assert records[0]["prev"] == GENESIS
    assert records[1]["prev"] == records[0]["chain"]
    assert verify_files([log_path]).ok


def test_chain_resumes_after_restart(log_path: Path) -> None:
    first = AuditLog(log_path)
    first.open()
    write_records(first, 2)
    first.close()
    second = AuditLog(log_path)
    second.open()
    write_records(second, 2)
    records = [orjson.loads(line) for line in lines_of(log_path)]
    assert [record["seq"] for record in records] == [0, 1, 2, 3]
    assert verify_files([log_path]).ok


def test_rotation_by_rename_continues_the_chain(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.open()
    write_records(log, 3)
    rotated = log_path.with_name("audit.jsonl.1")
    os.rename(log_path, rotated)
    write_records(log, 2)
    first_new = orjson.loads(lines_of(log_path)[0])
    assert first_new["tool"] == "audit:continue"
    assert first_new["reason"] == "rotated by rename"
    assert verify_files([rotated, log_path]).ok
    assert verify_files([log_path]).ok  # a continuation file verifies on its own, anchored at its link


def test_rotation_by_copy_truncate_continues_the_chain(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.open()
    write_records(log, 3)
    copy = log_path.with_name("audit.jsonl.1")
    shutil.copyfile(log_path, copy)
    with open(log_path, "r+b") as handle:
        handle.truncate(0)
    write_records(log, 2)
    assert orjson.loads(lines_of(log_path)[0])["reason"] == "rotated by copy-truncate"
    assert verify_files([copy, log_path]).ok


def test_a_copy_truncate_after_the_open_check_is_followed_by_the_next_record(log_path: Path) -> None:
    # A call's open check (ensure_open) comes before it is prepared and classified, which can take milliseconds;
    # a copy-truncate in that time must not put its start record at the head of the new file.
    log = AuditLog(log_path)
    log.open()
    write_records(log, 3)
    log.ensure_open()
    copy = log_path.with_name("audit.jsonl.1")
    shutil.copyfile(log_path, copy)
    with open(log_path, "r+b") as handle:
        handle.truncate(0)
    log.write({"v": 1, "tool": "shell_exec", "phase": "start"})
    assert orjson.loads(lines_of(log_path)[0])["reason"] == "rotated by copy-truncate"
    assert verify_files([copy, log_path]).ok


def test_rotated_files_in_wrong_order_fail(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.open()
    write_records(log, 2)
    rotated = log_path.with_name("audit.jsonl.1")
    os.rename(log_path, rotated)
    write_records(log, 2)
    assert not verify_files([log_path, rotated]).ok


def test_unwritable_directory_fails_with_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores directory permissions; a path under a regular file can never be created.
        blocker = tmp_path / "file"
        blocker.write_text("x")
        path = blocker / "audit.jsonl"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        path = locked / "audit.jsonl"
    log = AuditLog(path)
    with pytest.raises(AuditWriteError, match="cannot open audit log"):
        log.open()
    assert check_writable(path) is not None
    assert not log.healthy


def test_write_failure_is_reported_and_recovers(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.open()
    write_records(log, 1)
    # Replace the log's directory with a file: the path can no longer be opened (a real fault, no mock).
    shutil.rmtree(log_path.parent)
    log_path.parent.write_text("not a directory")
    with pytest.raises(AuditWriteError):
        log.write({"v": 1, "tool": "x"})
    assert not log.healthy and log.write_errors == 1
    log_path.parent.unlink()
    log.ensure_open()
    log.write({"v": 1, "tool": "x"})
    assert log.healthy


def test_chain_off_writes_plain_records(log_path: Path) -> None:
    log = AuditLog(log_path, chain=False)
    log.open()
    write_records(log, 2)
    records = [orjson.loads(line) for line in lines_of(log_path)]
    assert all("chain" not in record for record in records)
