"""`audit verify` detects each kind of tampering and names the first bad line."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from relay_shell.audit.log import AuditLog
from relay_shell.audit.verify import verify_files


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    for index in range(6):
        log.write({"v": 1, "tool": "shell_exec", "outcome": "ok", "index": index, "args": {"command": f"echo {index}"}})
    log.close()
    return path


def rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def test_intact_log_verifies(log_path: Path) -> None:
    result = verify_files([log_path])
    assert result.ok and result.records == 6


def test_edit_is_detected_at_its_line(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"echo 3", b"echo X")
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok
    assert ":4: chain mismatch" in result.message


def test_edit_with_recomputed_own_chain_breaks_the_next_link(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[2])
    record["outcome"] = "denied"
    del record["chain"]
    from relay_shell.audit.log import encode_line

    lines[2] = encode_line(record, record["prev"])
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok and ":4: prev does not match" in result.message


def test_deletion_is_detected(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    del lines[2]
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok and ":3:" in result.message


def test_insertion_is_detected(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    lines.insert(2, lines[1])
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok and ":3:" in result.message


def test_reordering_is_detected(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    lines[2], lines[3] = lines[3], lines[2]
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok and ":3:" in result.message


def test_head_truncation_is_detected(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    rewrite(log_path, lines[2:])
    result = verify_files([log_path])
    assert not result.ok and ":1: head truncated" in result.message


def test_tail_torn_line_is_detected(log_path: Path) -> None:
    data = log_path.read_bytes()
    log_path.write_bytes(data[:-20])
    result = verify_files([log_path])
    assert not result.ok and ":6:" in result.message


def test_chain_field_removed_is_detected(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[1])
    del record["chain"]
    lines[1] = orjson.dumps(record) + b"\n"
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok and ":2:" in result.message


def test_garbage_line_is_detected(log_path: Path) -> None:
    lines = log_path.read_bytes().splitlines(keepends=True)
    lines[4] = b"not json\n"
    rewrite(log_path, lines)
    result = verify_files([log_path])
    assert not result.ok and ":5: not valid JSON" in result.message


def test_missing_and_empty_files_fail(tmp_path: Path) -> None:
    assert not verify_files([tmp_path / "nope.jsonl"]).ok
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = verify_files([empty])
    assert not result.ok and "empty" in result.message


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay_shell", "audit", *args], capture_output=True, text=True)


def test_cli_exit_codes(log_path: Path, tmp_path: Path) -> None:
    ok = run_cli("verify", str(log_path))
    assert ok.returncode == 0 and "OK: 6 records" in ok.stdout
    lines = log_path.read_bytes().splitlines(keepends=True)
    rewrite(log_path, lines[:2] + lines[3:])
    bad = run_cli("verify", str(log_path))
    assert bad.returncode == 1
    assert f"{log_path}:3:" in bad.stderr
    missing = run_cli("verify", str(tmp_path / "missing.jsonl"))
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_cli_tail_filters(log_path: Path) -> None:
    out = run_cli("tail", "-n", "2", "--path", str(log_path))
    assert out.returncode == 0
    records = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert [record["index"] for record in records] == [4, 5]
    none = run_cli("tail", "--denied", "--path", str(log_path))
    assert none.returncode == 0 and none.stdout == ""
    by_tool = run_cli("tail", "--tool", "shell_exec", "-n", "100", "--path", str(log_path))
    assert len(by_tool.stdout.splitlines()) == 6


def test_cli_tail_follow_sees_new_records_across_rotation(log_path: Path) -> None:
    import os
    import time

    follower = subprocess.Popen(
        [sys.executable, "-m", "relay_shell", "audit", "tail", "-n", "1", "--follow", "--path", str(log_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        assert orjson.loads(follower.stdout.readline())["index"] == 5
        time.sleep(0.5)  # let the follower reach the end of the file before appending
        log = AuditLog(log_path)
        log.open()
        log.write({"v": 1, "tool": "shell_exec", "index": 6})
        assert orjson.loads(follower.stdout.readline())["index"] == 6
        os.rename(log_path, log_path.with_name("audit.jsonl.1"))
        log.write({"v": 1, "tool": "shell_exec", "index": 7})
        following = [orjson.loads(follower.stdout.readline()) for _ in range(2)]
        assert [record.get("tool") for record in following] == ["audit:continue", "shell_exec"]
        assert following[1]["index"] == 7
    finally:
        follower.kill()
        follower.wait()
