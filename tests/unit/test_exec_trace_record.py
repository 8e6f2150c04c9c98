"""The exec list's bounds (trace/record.py): whatever a tree executes, the count and the digest go on, the entries,
their argv text and the refused-exec texts stop at their caps, and the redaction cache stays bounded. Pure data:
the processes that feed it are covered end to end in tests/e2e/trace."""

from __future__ import annotations

import hashlib

import orjson

from relay_shell.audit.record import MAX_ENTRIES, bound_record
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


def test_later_programs_are_bounded_and_what_overflows_is_folded_or_counted() -> None:
    """At most the audit log's 64 items (and LATER_BYTES): a full list folds the directory holding the most of its
    items (here /bin/, every decoy's); programs that share no directory but / cannot be folded and are counted."""
    trace = ExecTrace(4)
    for number in range(LATER_PROGRAMS + 50):
        add(trace, [f"decoy{number}"])
    folded = {"directory": "/bin/", "programs_at_least": LATER_PROGRAMS, "count": LATER_PROGRAMS + 50 - 4}
    assert trace.record()["later_programs"] == [folded]
    rooted = ExecTrace(1)
    for number in range(LATER_PROGRAMS + 51):
        add_program(rooted, f"/p{number}")
    fields = rooted.record()
    assert len(fields["later_programs"]) == LATER_PROGRAMS <= MAX_ENTRIES
    assert len(orjson.dumps(fields["later_programs"])) <= 12 * 1024
    assert fields["later_programs_omitted"] == 50
    assert "later_programs" not in ExecTrace(4).record()  # absent while nothing ran past the entries


def add_program(trace: ExecTrace, program: str) -> None:
    """An exec of `program` (its path resolved to itself) after the entries are full."""
    shown = redacted_argv([program])
    entry = entry_of(trace.started, trace.started, 10, 1, program, shown, 1, 1, False, "ok")
    trace.add(entry if trace.wants_entry() else None, digest_line(program, shown, "ok"), None, False, (program,))


def later_items(fields: dict[str, object]) -> list[dict[str, object]]:
    items = fields["later_programs"]
    assert isinstance(items, list)
    return items


def test_distinct_decoys_in_one_directory_cannot_hide_a_program() -> None:
    """Attack 4, T2: 300 distinct copies of /bin/true with 60-character names in one directory filled
    later_programs (and the audit log kept 64 of its items), and /usr/bin/id, run last, was named nowhere. Now the
    list is at most the log's 64 items, the directory the decoys share is folded into one item counting their execs,
    and the program that matters, in another directory, is named."""
    trace = ExecTrace(64)
    for _ in range(64):
        add_program(trace, "/usr/bin/true")
    decoys = [f"/tmp/decoys/{number:03d}-" + "x" * 56 for number in range(300)]
    for decoy in decoys:
        add_program(trace, decoy)
    add_program(trace, "/usr/bin/id")
    fields = trace.record()
    items = later_items(fields)
    assert {"program": "/usr/bin/id", "count": 1} in items
    folded = [item for item in items if "directory" in item]
    assert folded == [{"directory": "/tmp/decoys/", "programs_at_least": LATER_PROGRAMS, "count": 300}]
    assert sum(item["count"] for item in items) == fields["count"] - len(fields["entries"])  # type: ignore[misc]
    assert "later_programs_omitted" not in fields
    assert len(items) <= MAX_ENTRIES  # the audit log keeps the list whole
    assert bound_record({"execs": fields})["execs"] == fields  # what the end record keeps of it


def test_decoys_in_directories_of_their_own_fold_their_common_parent() -> None:
    trace = ExecTrace(4)
    for number in range(300):
        add_program(trace, f"/tmp/flood/d{number}/true")
    add_program(trace, "/usr/bin/id")
    add_program(trace, "/usr/sbin/useradd")
    items = later_items(trace.record())
    names = [item.get("program") for item in items]
    assert "/usr/bin/id" in names and "/usr/sbin/useradd" in names
    assert [item["directory"] for item in items if "directory" in item] == ["/tmp/flood/"]
    assert sum(item["count"] for item in items) == 300 + 2 - 4  # type: ignore[misc]


def test_a_folded_directory_counts_the_programs_run_under_it_later() -> None:
    trace = ExecTrace(1)
    add_program(trace, "/bin/sh")
    for number in range(LATER_PROGRAMS + 10):
        add_program(trace, f"/srv/app/tool{number}")
    for number in range(5):
        add_program(trace, f"/srv/app/tool{number}")  # named before the fold: now under it
    add_program(trace, "/srv/app/new")
    items = later_items(trace.record())
    assert items == [
        {"directory": "/srv/app/", "programs_at_least": items[0]["programs_at_least"], "count": LATER_PROGRAMS + 16}
    ]
