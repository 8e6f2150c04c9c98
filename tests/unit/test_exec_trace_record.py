"""The exec list's bounds (trace/record.py): whatever a tree executes, the count and the digest go on, the entries,
their argv text and the refused-exec texts stop at their caps, and the redaction cache stays bounded. Pure data:
the processes that feed it are covered end to end in tests/e2e/trace."""

from __future__ import annotations

import hashlib

import orjson

from relay_shell.trace import record
from relay_shell.trace.record import (
    COMPACT_ROOM,
    DENIED_KEPT,
    ENTRY_BYTES,
    LATER_PROGRAMS,
    ExecTrace,
    digest_line,
    entry_of,
    redacted_argv,
)


def add(trace: ExecTrace, argv: list[str], outcome: str = "ok") -> None:
    shown = redacted_argv(argv)
    entry = entry_of(
        trace.started, trace.started, 10, 1, "/bin/" + argv[0], shown, len(argv), len(argv), False, outcome
    )
    denied = " ".join(argv) if outcome == "denied" else None
    line = digest_line("/bin/" + argv[0], shown, outcome)
    trace.add(entry if trace.wants_entry() else None, line, denied, False, ("/bin/" + argv[0],))


def test_a_flood_of_execs_moves_only_the_counters_and_the_digest() -> None:
    trace = ExecTrace(64)
    expected = hashlib.sha256()
    for number in range(20000):
        argv = ["true", str(number)]
        add(trace, argv, "denied" if number % 1000 == 0 else "ok")
        outcome = "denied" if number % 1000 == 0 else "ok"
        expected.update(orjson.dumps(["/bin/true", argv, outcome]) + b"\n")
    fields = trace.record()
    assert fields["count"] == 20000 and fields["denied"] == 20
    assert len(fields["entries"]) == 64 and fields["entries_omitted"] == 20000 - 64
    assert len(trace.denied_execs) == DENIED_KEPT
    assert fields["sha256"] == expected.hexdigest()  # over the full ordered list, not the kept entries
    assert len(record._unchanged) <= record._REDACTED_CACHE_MAX


def test_long_argv_text_stops_the_entries_before_their_number_does() -> None:
    trace = ExecTrace(1024)
    for _ in range(200):
        add(trace, ["echo", "x" * 1000])
    assert trace.count == 200
    assert ENTRY_BYTES - COMPACT_ROOM < trace.entry_bytes <= ENTRY_BYTES and len(trace.entries) < 200
    assert len(orjson.dumps(trace.record())) < 48 * 1024  # the end record stays under its 64 KiB


def test_one_exec_with_huge_arguments_cannot_push_the_record_over_its_bound() -> None:
    """64 arguments of 1,000 characters each, three times (audit_arguments alone would keep ~64 KiB of each),
    then a short exec: the entries stay within their bytes, the later short one is still listed."""
    trace = ExecTrace(64)
    for _ in range(3):
        add(trace, ["true", *(chr(97 + index % 26) * 1000 for index in range(64))])
    add(trace, ["mysql", "-pSECRET1"])
    fields = trace.record()
    assert fields["count"] == 4 and len(orjson.dumps(fields)) <= ENTRY_BYTES + 1024
    assert fields["entries"][-1]["argv"] == ["mysql", "-p[REDACTED]"]
    assert fields["entries"][0]["argv"][1]["len"] == 1000 and len(fields["entries"][0]["argv"][1]["head"]) == 64


def test_a_secret_argv_is_redacted_and_not_kept_as_a_cache_key() -> None:
    shown = redacted_argv(["mysql", "-u", "root", "-pHUNTER2SECRET"])
    assert shown == ["mysql", "-u", "root", "-p[REDACTED]"]
    assert not any("HUNTER2SECRET" in " ".join(key) for key in record._unchanged)


def test_identical_runs_give_identical_digests_whatever_the_pids_and_times() -> None:
    digests = []
    for pid in (100, 200):
        trace = ExecTrace(64)
        for name in ("sh", "ls", "rm"):
            shown = redacted_argv([name])
            entry = entry_of(
                trace.started, trace.started + pid / 1000, pid, pid - 1, f"/bin/{name}", shown, 1, 1, False, "ok"
            )
            trace.add(entry, digest_line(f"/bin/{name}", shown, "ok"), None, False)
        digests.append(trace.record()["sha256"])
    assert digests[0] == digests[1]


def test_a_session_window_gets_the_same_execs_while_it_is_open() -> None:
    session = ExecTrace(64)
    add(session, ["before"])
    window = ExecTrace(64)
    session.window = window
    add(session, ["during"])
    session.window = None
    add(session, ["after"])
    assert [entry["argv"] for entry in window.record()["entries"]] == [["during"]]
    assert session.record()["count"] == 3


def test_decoys_cannot_push_a_program_out_of_the_record() -> None:
    """Attack 3, T1: 70 `true` then `id` left no trace of `id` but the count and the digest. A program run after
    the entries are full is named once in later_programs, with how often it ran; a listed one is not repeated."""
    trace = ExecTrace(64)
    for _ in range(70):
        add(trace, ["true"])
    add(trace, ["id", "-u"])
    add(trace, ["id", "-u"])
    fields = trace.record()
    assert len(fields["entries"]) == 64 and fields["entries_omitted"] == 8
    assert fields["later_programs"] == [{"program": "/bin/id", "count": 2}]  # /bin/true is listed already
    assert "later_programs_omitted" not in fields


def test_later_programs_are_bounded_and_what_overflows_is_counted() -> None:
    trace = ExecTrace(4)
    for number in range(LATER_PROGRAMS + 50):
        add(trace, [f"decoy{number}"])
    fields = trace.record()
    names = [item["program"] for item in fields["later_programs"]]
    assert len(names) <= LATER_PROGRAMS and len(orjson.dumps(fields["later_programs"])) <= 12 * 1024
    assert fields["later_programs_omitted"] == LATER_PROGRAMS + 50 - 4 - len(names)
    assert "later_programs" not in ExecTrace(4).record()  # absent while nothing ran past the entries
