"""The fuzzer can fail (issue 21): its checker (tests/fuzz/checks.py) is fed canned answers and audit logs that
break one invariant each, and must name that invariant (and the issue's class it stands for) — and nothing on
a good answer and a good log. No server runs: the answers are written here; the logs are real chained logs
written by `AuditLog` and checked by the real `relay-shell audit verify`."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay_shell.audit.log import AuditLog, encode_line
from relay_shell.results import SessionListResult
from relay_shell.surface.build import output_schema
from tests.fuzz.calls import Probe
from tests.fuzz.checks import CLASS_OF, MAX_RECORD_BYTES, Report, ResultChecker, calls_in, check_log
from tests.fuzz.peers import REPO

TOOLS = [{"name": "session_list", "outputSchema": output_schema(SessionListResult)}]
CLIENT = "fuzz"


def call_probe(request_id: int = 7) -> Probe:
    line = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "session_list", "arguments": {}},
        }
    )
    return Probe(line, "tools/call", "result", ("int", str(request_id)), "once", "session_list", "tool:valid")


def structured(**changes: Any) -> dict[str, Any]:
    """A session_list structuredContent that validates against the tool's real outputSchema."""
    fields: dict[str, Any] = {
        "status": "ok",
        "tier": 0,
        "exit_code": None,
        "signal": None,
        "timed_out": False,
        "truncated": False,
        "output": "",
        "output_bytes": 0,
        "output_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "duration_ms": 1,
        "notes": [],
        "error": None,
        "confirm_token": None,
        "confirm_ttl": None,
        "sessions": [],
    }
    fields.update(changes)
    return fields


def answer(
    request_id: Any = 7, first_line: str = "[0 sessions]", is_error: bool = False, **changes: Any
) -> dict[str, Any]:
    result = {
        "content": [{"type": "text", "text": first_line + "\n"}],
        "structuredContent": structured(**changes),
        "isError": is_error,
    }
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def violations_of(answers: list[dict[str, Any]] | None, probe: Probe | None = None) -> set[str]:
    report = Report()
    ResultChecker(TOOLS, report).check(probe or call_probe(), answers)
    return set(report.violations)


def test_a_good_answer_breaks_nothing() -> None:
    assert violations_of([answer()]) == set()
    error_line = "[ERROR: InvalidArgument: limit: must be an integer]"
    assert violations_of([answer(first_line=error_line, is_error=True, status="error", error="x")]) == set()


@pytest.mark.parametrize(
    ("answers", "invariant", "issue_class"),
    [
        (None, "unanswered", 2),
        ([answer(request_id=8)], "answer with the wrong id", 2),
        ([answer(request_id="7")], "answer with the wrong id", 2),  # the same digits as a string: another id
        ([{"jsonrpc": "2.0", "result": answer()["result"]}], "answer with the wrong id", 2),  # no id at all
        ([answer(request_id=None)], "answer with the wrong id", 2),
    ],
    ids=["unanswered", "another id", "id as a string", "no id", "id null"],
)
def test_an_unanswered_request_or_a_wrong_id_is_caught(
    answers: list[dict[str, Any]] | None, invariant: str, issue_class: int
) -> None:
    assert violations_of(answers) == {invariant}
    assert CLASS_OF[invariant] == issue_class


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32603, "message": "Internal error"},
        {"code": 0, "message": "int too big to convert"},  # old main's answer to a 2^70 confirm token
        {"code": -32602, "message": "Internal: OverflowError"},
    ],
)
def test_an_internal_json_rpc_error_is_caught(error: dict[str, Any]) -> None:
    found = violations_of([{"jsonrpc": "2.0", "id": 7, "error": error}])
    # A tools/call that reached the server must get a result: a JSON-RPC error is also an unaudited failure.
    assert found == {"internal error", "a call that reached the server answered with a JSON-RPC error"}
    assert {CLASS_OF[invariant] for invariant in found} == {3}


def test_an_internal_error_result_is_caught() -> None:
    first = "[ERROR: Internal: ValueError]"
    found = violations_of([answer(first_line=first, is_error=True, status="error", error="embedded null byte")])
    assert found == {"internal error"}
    assert CLASS_OF["internal error"] == 3


@pytest.mark.parametrize(
    ("first_line", "is_error", "status"),
    [
        ("[fanout 0/3 hosts ok]", True, "error"),  # old main: every host failed, isError, a first line of success
        ("[ERROR: no hosts reached]", True, "error"),  # no error name
        ("ERROR: NoHostReached: 0 of 3", True, "error"),  # not bracketed
        ("0 sessions", False, "ok"),  # a success that is not bracketed
    ],
)
def test_a_first_line_outside_the_grammar_is_caught(first_line: str, is_error: bool, status: str) -> None:
    found = violations_of([answer(first_line=first_line, is_error=is_error, status=status)])
    assert found == {"first line outside the result grammar"}
    assert "first line outside the result grammar" not in CLASS_OF  # class 6: answers outside the contract


@pytest.mark.parametrize(
    "changes",
    [
        {"sessions": None},  # old main: session_list's error result
        {"tier": "0"},
        {"status": "broken"},
        {"output_bytes": 1.5},
    ],
    ids=["sessions null", "tier a string", "status not in the enum", "bytes a float"],
)
def test_structured_content_outside_the_output_schema_is_caught(changes: dict[str, Any]) -> None:
    found = violations_of([answer(**changes)])
    assert "structuredContent outside the outputSchema" in found
    assert found <= {"structuredContent outside the outputSchema", "isError and status disagree"}


def test_an_error_result_outside_the_output_schema_is_caught() -> None:
    first = "[ERROR: InvalidArgument: limit: must be an integer]"
    changes = {"status": "error", "error": "x"}
    assert violations_of([answer(first_line=first, is_error=True, **changes)]) == set()
    del_sessions = answer(first_line=first, is_error=True, **changes)
    del del_sessions["result"]["structuredContent"]["sessions"]
    assert violations_of([del_sessions]) == {"structuredContent outside the outputSchema"}


# -- the audit log at the end of a run ------------------------------------------------------------------------


def record(request_id: int) -> dict[str, Any]:
    return {
        "v": 1,
        "tool": "session_list",
        "outcome": "ok",
        "request_id": request_id,
        "client_id": f"stdio:{CLIENT}",
        "args": {},
    }


def write_log(path: Path, request_ids: list[int]) -> None:
    log = AuditLog(path)
    log.open()
    for request_id in request_ids:
        log.write(record(request_id))
    log.close()


def append_chained(path: Path, fields: dict[str, Any]) -> None:
    """Append a record that continues the chain, written as it is (AuditLog would bound it)."""
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    fields = {**fields, "seq": last["seq"] + 1, "prev": last["chain"]}
    with path.open("ab") as handle:
        handle.write(encode_line(fields, last["chain"]))


def log_violations(path: Path, sent_ids: list[int]) -> Report:
    report = Report()
    sent: list[tuple[Probe, dict[str, Any] | None]] = [
        (call_probe(request_id), answer(request_id)) for request_id in sent_ids
    ]
    check_log(path, sent, report, REPO, {CLIENT})
    return report


def test_a_good_log_breaks_nothing(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1, 2, 3])
    report = log_violations(path, [1, 2, 3])
    assert not report.violations, report.summary()
    assert report.records == 3 and 0 < report.largest_record <= MAX_RECORD_BYTES


def test_a_call_with_no_record_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1, 3])
    report = log_violations(path, [1, 2, 3])
    assert set(report.violations) == {"unaudited call"} and report.violations["unaudited call"] == 1
    assert CLASS_OF["unaudited call"] == 3


def test_a_call_with_two_records_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1, 2, 2])
    assert set(log_violations(path, [1, 2]).violations) == {"more than one audit record for a call"}


@pytest.mark.parametrize(
    ("phases", "calls"),
    [
        (["start", "end"], 1),
        (["start", "job"], 1),  # yielded as a job that still runs (adr/0028)
        (["start", "job", "end"], 1),  # the job ended
        (["start", "job", "job"], 10),
        (["start", "end", "end"], 10),
    ],
)
def test_a_call_that_yielded_as_a_job_is_one_call(phases: list[str], calls: int) -> None:
    assert calls_in([{"call_id": "c-1", "phase": phase} for phase in phases]) == calls


def test_a_record_over_64_kib_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1])
    append_chained(path, {**record(2), "args": {"user": "u" * (1024 * 1024)}})  # old main: a 1 MiB SSH user
    report = log_violations(path, [1, 2])
    # The chain is intact: only the size is wrong.
    assert set(report.violations) == {"audit record over 64 KiB"}, report.summary()
    assert report.largest_record > 1024 * 1024
    assert CLASS_OF["audit record over 64 KiB"] == 4


def test_a_record_just_within_64_kib_passes(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1])
    append_chained(path, {**record(2), "args": {"user": "u" * 60_000}})
    report = log_violations(path, [1, 2])
    assert not report.violations, report.summary()


def test_a_broken_chain_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1, 2, 3])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"outcome":"ok"', b'"outcome":"no"')  # an edit the chain must show
    path.write_bytes(b"".join(lines))
    report = log_violations(path, [1, 2, 3])
    assert set(report.violations) == {"audit chain does not verify"}, report.summary()
    assert CLASS_OF["audit chain does not verify"] == 4


def test_a_deleted_record_breaks_the_chain_and_leaves_a_call_unaudited(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1, 2, 3])
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[2])
    report = log_violations(path, [1, 2, 3])
    assert set(report.violations) == {"audit chain does not verify", "unaudited call"}, report.summary()


def refused_probe(id_json: bytes, key: tuple[str, str] | None) -> Probe:
    """A tools/call the transport refuses for its encoding (issue 30): answered with an error, never a result."""
    line = b'{"jsonrpc":"2.0","id":' + id_json + b',"method":"tools/call","params":{"name":"session_list"}}'
    return Probe(line, "tools/call", "error" if key is not None else "null", key, kind="malformed:refused")


def refusal_record(probe: Probe, request_id: str) -> dict[str, Any]:
    digest = hashlib.sha256(probe.line).hexdigest()
    return {**record(0), "request_id": request_id, "outcome": "error", "message_sha256": digest}


def test_a_tool_call_refused_for_its_encoding_must_have_a_record_too(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1])
    refused = refused_probe(b"1.5", ("str", "1.5"))
    error = {"jsonrpc": "2.0", "id": 1.5, "error": {"code": -32600, "message": "Invalid Request: id 1.5 ..."}}
    report = Report()
    check_log(path, [(call_probe(1), answer(1)), (refused, error)], report, REPO, {CLIENT})
    assert set(report.violations) == {"unaudited call"}, report.summary()
    log = AuditLog(path)
    log.open()
    log.write(refusal_record(refused, "1.5"))
    log.close()
    report = Report()
    check_log(path, [(call_probe(1), answer(1)), (refused, error)], report, REPO, {CLIENT})
    assert not report.violations, report.summary()


def test_a_tool_call_with_an_id_no_record_keeps_is_found_by_its_message_digest(tmp_path: Path) -> None:
    # `true` twice: two messages with the same bytes need two records with that digest.
    path = tmp_path / "audit.jsonl"
    write_log(path, [1])
    refused = refused_probe(b"true", None)
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request: id true ..."}}
    sent = [(call_probe(1), answer(1)), (refused, error), (refused, error)]
    log = AuditLog(path)
    log.open()
    log.write(refusal_record(refused, "true"))
    log.close()
    report = Report()
    check_log(path, sent, report, REPO, {CLIENT})
    assert set(report.violations) == {"unaudited call"} and "sent 2x -> 1 records" in str(report.examples)
    log = AuditLog(path)
    log.open()
    log.write(refusal_record(refused, "true"))
    log.write(refusal_record(refused, "true"))
    log.close()
    report = Report()
    check_log(path, sent, report, REPO, {CLIENT})
    assert set(report.violations) == {"more than one audit record for a call"}, report.summary()


def test_a_client_renamed_mid_connection_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, [1])
    log = AuditLog(path)
    log.open()
    log.write({**record(2), "client_id": "stdio:impostor"})  # old main: a second initialize renamed the client
    log.close()
    report = log_violations(path, [1, 2])
    assert set(report.violations) == {"client_id changed within one connection"}, report.summary()
    assert CLASS_OF["client_id changed within one connection"] == 5


def test_the_summary_names_the_classes_shown() -> None:
    report = Report()
    report.fail("unanswered", "x")
    report.fail("audit record over 64 KiB", "y")
    report.fail("first line outside the result grammar", "z")
    assert "issue 21 classes shown: [2, 4, 6]" in report.summary()
