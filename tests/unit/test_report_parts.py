"""The audit report's parts, in process: the blob encoding, records joined into calls, what a record says, the
verification pass over logs written with the real AuditLog (tampered where a test says so), the verdict's exit
statuses and the command-line times. The page in a browser: tests/e2e/report/."""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay_shell.audit.log import AuditLog
from relay_shell.report import blobs, fields
from relay_shell.report.calls import FLAG, Row, Timeline, Window
from relay_shell.report.command import UsageError, record_time
from relay_shell.report.trust import verify_into
from relay_shell.report.verdict import verdict

DIGEST = "ab" * 32


def test_every_byte_survives_the_text_encoding_and_none_can_end_the_element() -> None:
    data = bytes(range(256)) * 3 + b"</script><!--~~0~1"
    encoded = blobs.encode(data)
    assert blobs.decode(encoded) == data
    for byte in (b"\x00", b"\r", b"<"):
        assert byte not in encoded
    assert len(encoded) < len(data) * 1.05  # each escaped byte costs one more: 4 of 256 values


def test_a_chunk_keeps_its_digests_as_raw_bytes_in_the_order_the_records_name_them() -> None:
    spool = io.BytesIO()
    details = blobs.ChunkedDetails(spool)
    other = "cd" * 32
    record = {"tool": "shell_exec", "output_sha256": DIGEST, "raw_sha256": other, "execs": {"sha256": DIGEST}}
    assert details.append([record]) == 0
    assert record["output_sha256"] == DIGEST  # the summary reads the same record: it is not changed
    details.flush()
    elements = spool.getvalue().split(b"</script>\n")
    calls = orjson.loads(zlib.decompress(blobs.decode(elements[0].split(b'id="d0">', 1)[1])))
    digests = blobs.decode(elements[1].split(b'id="h0">', 1)[1])
    kept = calls[0][0]
    assert kept["_digests"] == ["output_sha256", "raw_sha256", "execs.sha256"]
    assert kept["output_sha256"] is None and kept["execs"]["sha256"] is None
    assert digests == bytes.fromhex(DIGEST + other + DIGEST)


def test_a_streamed_array_is_one_json_array() -> None:
    rows = blobs.StreamedArray()
    for index in range(1000):
        rows.append([index, "x" * (index % 7)])
    assert orjson.loads(zlib.decompress(rows.finish())) == [[index, "x" * (index % 7)] for index in range(1000)]


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("2026-11-29T03:10:16.789680Z", 1795921816789),
        ("2026-11-29T03:10:16Z", 1795921816000),
        ("1970-01-01T00:00:01.5Z", 1500),
        ("2026-13-01T00:00:00.000000Z", None),
        ("not a time", None),
        (12, None),
    ],
)
def test_record_times_become_milliseconds(ts: object, expected: int | None) -> None:
    assert fields.epoch_ms(ts) == expected


def test_what_a_record_says_in_one_line() -> None:
    assert fields.summary({"args": {"command": "ls -la", "cwd": "/"}}) == "ls -la"
    assert fields.summary({"args": {"script": {"head": "set -e", "len": 5000, "tail": "x", "sha256": DIGEST}}}) == (
        "set -e… (5000 characters)"
    )
    assert fields.summary({"args": {"data": "line\nmore"}}) == "line⏎ more"
    assert fields.summary({"args": {"x": 1}}) == '{"x":1}'
    assert fields.summary({"tool": "gate:brief", "gated_tool": "shell_exec", "args": {"command": "df"}}) == (
        "shell_exec: df"
    )
    assert len(fields.summary({"args": {"command": "y" * 5000}})) == fields.SUMMARY_CHARS


def test_hosts_groups_and_cut_output_of_a_record() -> None:
    fanout = {"target": {"hosts": [{"host": "h01"}, {"host": "h02"}, {"address": "x"}]}}
    assert fields.hosts_of(fanout) == ["h01", "h02"]
    assert fields.hosts_of({"target": {"host": "db1", "forward_id": "f-1"}}) == ["db1"]
    keys = fields.group_keys({"session_id": "s-1", "confirmation": DIGEST, "target": {"forward_id": "f-1"}})
    assert keys == ["s-1", "f-1", f"confirm:{DIGEST}"]
    assert fields.group_keys({"tool": "exec:late", "call_id": "c-1"}) == ["c-1"]
    assert fields.output_cut({"tool": "shell_exec", "raw_len": 70000, "output_len": 65600})
    assert not fields.output_cut({"tool": "shell_exec", "raw_len": 100, "output_len": 109})
    assert not fields.output_cut({"tool": "session_recv", "raw_len": 70000, "output_len": 100})  # escapes stripped
    assert fields.output_cut({"tool": "session_recv", "raw_len": 70000, "output_len": 100, "truncated": True})
    assert fields.output_cut({"tool": "ssh_exec", "raw_len": 100, "output_len": 200, "stderr_truncated": True})


class Collected:
    """A Timeline's rows, as the command's emit and summary would get them."""

    def __init__(self, window: Window | None = None) -> None:
        self.rows: list[Row] = []
        self.details: list[Any] = []
        self.timeline = Timeline(window or Window(), self.emit, self.rows.append)

    def emit(self, values: list[Any], detail: Any) -> int:
        self.details.append(detail)
        return len(self.details) - 1

    def outcome_of(self, call_id: str) -> str:
        return next(row.outcome for row in self.rows if row.values[0] == call_id)


def record(call_id: str | None, phase: str | None, ts: str, **more: Any) -> dict[str, Any]:
    base = {"tool": "shell_exec", "ts": f"2026-11-29T{ts}.000000Z", "client_id": "http:alice", "tier": 1}
    if call_id is not None:
        base["call_id"] = call_id
    if phase is not None:
        base["phase"] = phase
    return {**base, **more}


def test_start_and_end_records_join_into_one_call_and_the_rest_are_events() -> None:
    collected = Collected()
    add = collected.timeline.add
    add({"tool": "server:start", "ts": "2026-11-29T01:00:00.000000Z", "call_tag": "a", "seq": 0})
    add(record("a-1", "start", "01:00:01", decision="admitted", args={"command": "ls"}, seq=1))
    add(record("a-2", "end", "01:00:02", outcome="denied", denied=True, reason="no", args={"command": "rm"}, seq=2))
    add(record("a-1", "end", "01:00:03", outcome="ok", exit_code=0, duration_ms=2000, args={"command": "ls"}, seq=3))
    add(record("a-3", "start", "01:00:04", decision="admitted", args={"command": "sleep 9"}, seq=4))
    add({"tool": "audit:checkpoint", "ts": "2026-11-29T01:00:05.000000Z", "seq": 5})
    collected.timeline.finish()
    ids = [row.values[0] for row in collected.rows]
    assert ids == ["server:start@0", "a-2", "a-1", "a-3"]  # in the order they completed; checkpoints are no row
    joined = collected.rows[2]
    assert joined.outcome == "ok" and joined.values[2] == 2000 and joined.values[9] == 0
    assert [record["seq"] for record in collected.details[2]] == [1, 3]
    assert collected.details[2][0]["_same"]  # the start record's repeated fields are named, not written twice
    assert collected.rows[1].flags & FLAG["denied"] and collected.rows[1].values[14] == "no"
    assert collected.outcome_of("a-3") == "unended" and collected.rows[3].flags & FLAG["unended"]
    # times and seqs are differences from the previous row's
    assert [row.values[13] for row in collected.rows] == [0, 2, -1, 3]


def test_a_jobs_phases_are_one_call_grouped_with_the_reads_of_it() -> None:
    """A call that yielded (adr/0028): start, its `job` note, then (after reads of the job) its end, one row."""
    collected = Collected()
    add = collected.timeline.add
    add(record("a-1", "start", "01:00:01", decision="admitted", args={"command": "make"}, seq=1))
    add(record("a-1", "job", "01:00:46", job_id="j-1", after_ms=45000, raw_len=10, seq=2))
    read = {"tool": "session_recv", "session_id": "j-1", "outcome": "running", "args": {"session_id": "j-1"}}
    add(record("a-2", "end", "01:00:50", seq=3, **read))
    end = {"outcome": "ok", "exit_code": 0, "duration_ms": 70000, "job_id": "j-1", "truncated": True}
    add(record("a-1", "end", "01:02:11", args={"command": "make"}, seq=4, output_id="o-1", **end))
    add(record("a-3", "end", "01:02:12", seq=5, **{**read, "session_id": "o-1", "args": {"session_id": "o-1"}}))
    collected.timeline.finish()
    assert [row.values[0] for row in collected.rows] == ["a-2", "a-1", "a-3"]
    job = collected.rows[1]
    assert [record["phase"] for record in collected.details[1]] == ["start", "job", "end"]
    assert job.outcome == "ok" and job.values[2] == 70000 and job.values[9] == 0
    assert not job.flags & FLAG["confirm"], "a job's note is no tier-3 confirmation"
    assert job.flags & FLAG["cut"], "the end record says it was cut"
    assert "j-1" in job.values[11] and "j-1" in collected.rows[0].values[11], "grouped with the reads of the job"
    assert "o-1" in job.values[11] and "o-1" in collected.rows[2].values[11], "and with the reads of its output"
    collected = Collected()
    collected.timeline.add(record("b-1", "start", "01:00:01", decision="admitted", seq=1))
    collected.timeline.add(record("b-1", "job", "01:00:46", job_id="j-2", seq=2))
    collected.timeline.finish()
    assert collected.outcome_of("b-1") == "unended" and len(collected.details[0]) == 2, "still running, or died"


def test_a_start_record_followed_by_a_server_start_was_interrupted() -> None:
    collected = Collected()
    collected.timeline.add(record("a-1", "start", "01:00:01", decision="admitted", seq=1))
    collected.timeline.add({"tool": "server:start", "ts": "2026-11-29T01:00:09.000000Z", "seq": 2, "interrupted": []})
    collected.timeline.finish()
    assert collected.outcome_of("a-1") == "interrupted"


def test_the_window_keeps_the_calls_of_its_time_and_client() -> None:
    window = Window(
        since=record_time("--since", "2026-11-29T01:00:02"),
        until=record_time("--until", "2026-11-29T01:00:04"),
        client="http:alice",
    )
    collected = Collected(window)
    for second in range(1, 6):
        collected.timeline.add(record(f"a-{second}", "end", f"01:00:0{second}", outcome="ok", seq=second))
    collected.timeline.add(record("b-1", "end", "01:00:03", outcome="ok", seq=9, client_id="http:bob"))
    # Another client that declared the same name (review N6): the client is matched as recorded.
    collected.timeline.add(record("c-1", "end", "01:00:03", outcome="ok", seq=10, client_id="stdio:alice"))
    assert [row.values[0] for row in collected.rows] == ["a-2", "a-3"]
    assert collected.timeline.outside_window == 5
    assert not Window(client="alice").admits("2026-11-29T01:00:03.000000Z", "http:alice")  # no name alone


def test_command_line_times_become_record_times() -> None:
    assert record_time("--since", "2026-01-31") == "2026-01-31T00:00:00.000000Z"
    assert record_time("--since", "2026-01-31T12:00Z") == "2026-01-31T12:00:00.000000Z"
    assert record_time("--since", "2026-01-31T14:00+02:00") == "2026-01-31T12:00:00.000000Z"
    with pytest.raises(UsageError, match=r"--until: 'yesterday' is not a time: give an ISO 8601 time"):
        record_time("--until", "yesterday")


def written_log(path: Path, count: int) -> Path:
    log = AuditLog(path)
    log.open()
    for index in range(count):
        log.write(
            {
                "v": 1,
                "ts": f"2026-11-29T01:00:{index:02d}.000000Z",
                "tool": "shell_exec",
                "phase": "end",
                "call_id": f"t-{index}",
                "outcome": "ok",
                "args": {"command": f"echo {index}"},
            }
        )
    log.close()
    return path


def test_after_an_edited_record_the_rest_is_checked_link_by_link(tmp_path: Path) -> None:
    path = written_log(tmp_path / "audit.jsonl", 8)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"echo 3", b"echo X")
    path.write_bytes(b"".join(lines))
    seen: list[dict[str, Any]] = []
    found = verify_into([path], {}, None, None, seen.append)
    assert not found.ok and found.message == f"{path}:4: chain mismatch: the record was edited"
    assert [record["seq"] for record in seen] == list(range(8))  # every record still reaches the report
    assert [record.get("_problem") for record in seen][3] == "chain mismatch: the record was edited"
    assert found.problem_count == 1  # the records after it link to it: only the edited one is bad
    assert verdict(found, False, None, [], 0, []).exit_code == 1


def test_a_deleted_record_marks_the_record_after_the_gap(tmp_path: Path) -> None:
    path = written_log(tmp_path / "audit.jsonl", 8)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + lines[4:]))
    seen: list[dict[str, Any]] = []
    found = verify_into([path], {}, None, None, seen.append)
    assert [record["seq"] for record in seen if "_problem" in record] == [4]
    assert found.problem_count == 1 and "inserted, deleted or reordered" in found.problems[0].why


def test_an_intact_log_exits_0_and_a_key_without_checkpoints_exits_4(tmp_path: Path) -> None:
    path = written_log(tmp_path / "audit.jsonl", 3)
    found = verify_into([path], {}, None, None, lambda record: None)
    assert found.ok and found.records == 3 and found.first_seq == 0
    assert verdict(found, False, None, [], 0, []).exit_code == 0
    assert verdict(found, True, None, [], 0, []).exit_code == 4
