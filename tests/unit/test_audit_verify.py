"""`audit verify` detects each kind of tampering and names the first bad line (the command line:
tests/integration/test_cli.py)."""

from pathlib import Path

import orjson

from relay_shell.audit.verify import verify_files
from tests.conftest import rewrite


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
