"""`relay-shell audit report LOG… -o report.html`: the auditor's report of one log (adr/0023).

Reads the log once, as a stream: `audit verify`'s verifier hands each record on (report/trust.py), the records are
joined into calls (report/calls.py) whose rows, details and transcripts are compressed into a spool file as they
come, and the page is written at the end around them (report/page.py). Exits as `audit verify` does
(report/verdict.py); 2 for arguments that cannot be used, naming the argument.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EXIT_USAGE = 2


class UsageError(Exception):
    """An argument that cannot be used: the message names it, says why and what is allowed."""


def add_parser(subparsers: Any) -> None:
    report = subparsers.add_parser(
        "report",
        help="write one self-contained HTML report of the log: trust first, exceptions, a timeline, each call",
        description="Write one self-contained HTML file (no request when opened) that shows whether the log verified, "
        "the exceptions, a filterable timeline of every call and each call's page. Exits as `audit verify` does.",
    )
    report.add_argument("paths", nargs="+", type=Path, metavar="LOG", help="log file(s), oldest first (rotated files)")
    report.add_argument(
        "--public-key",
        type=Path,
        action="append",
        default=[],
        metavar="K",
        help="check the signed checkpoints with this public key (PATH.pub; repeat for earlier keys)",
    )
    report.add_argument("--against", type=Path, metavar="COPY", help="compare with the collector's copy")
    report.add_argument(
        "--since", metavar="T", help="show calls from this UTC time on (2026-01-31 or 2026-01-31T12:00Z)"
    )
    report.add_argument("--until", metavar="T", help="show calls before this UTC time")
    report.add_argument(
        "--client",
        metavar="NAME",
        help="show the calls of this client only, exactly as the log records it (http:alice, stdio:alice)",
    )
    report.add_argument(
        "--record-dir", type=Path, metavar="DIR", help="the session transcripts (RELAY_SHELL_RECORD_DIR)"
    )
    report.add_argument("-o", "--output", type=Path, required=True, metavar="report.html", help="the file to write")


def record_time(option: str, text: str | None) -> str | None:
    """A time given on the command line as a record's `ts` (UTC, microseconds), so records compare as strings."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"{option}: {text!r} is not a time: give an ISO 8601 time such as 2026-01-31T12:00:00Z, 2026-01-31T12:00 "
            "(UTC unless it names an offset) or a date, 2026-01-31"
        ) from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _check_inputs(options: argparse.Namespace) -> None:
    for path in options.paths:
        if not path.is_file():
            raise UsageError(f"LOG {path}: {'no such file' if not path.exists() else 'not a regular file'}")
        if not os.access(path, os.R_OK):
            raise UsageError(f"LOG {path}: cannot read it (permission denied)")
    if options.against is not None and not options.against.is_file():
        raise UsageError(f"--against {options.against}: no such file")
    if options.record_dir is not None and not options.record_dir.is_dir():
        raise UsageError(f"--record-dir {options.record_dir}: not a directory")
    output = options.output
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: the directory {output.parent} does not exist")
    if output.is_dir():
        raise UsageError(f"-o {output}: is a directory; give the file to write, such as report.html")
    read = [*options.paths, *options.public_key, *([options.against] if options.against else [])]
    if any(output.resolve() == path.resolve() for path in read):
        raise UsageError(f"-o {output}: is one of the files to read; give another file to write")


def run(options: argparse.Namespace) -> int:
    try:
        _check_inputs(options)
        since = record_time("--since", options.since)
        until = record_time("--until", options.until)
        if since is not None and until is not None and since >= until:
            raise UsageError(f"--since {options.since} is not before --until {options.until}")
        keys = _public_keys(options.public_key)
        copy = _copy(options.against)
    except UsageError as exc:
        print(f"relay-shell audit report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from relay_shell.report.calls import Window

    window = Window(since, until, options.client)
    try:
        return _report(options, window, keys, copy)
    except OSError as exc:  # the output's directory cannot be written, or the disk is full
        where = exc.filename or options.output
        print(
            f"relay-shell audit report: -o {options.output}: cannot write {where}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE


def _public_keys(paths: list[Path]) -> dict[str, Any]:
    from relay_shell.offhost.signing_keys import KeyFileError, key_id, load_public_key

    keys = {}
    for path in paths:
        try:
            loaded = load_public_key(path)
        except KeyFileError as exc:
            raise UsageError(f"--public-key: {exc}") from None
        keys[key_id(loaded)] = loaded
    return keys


def _copy(path: Path | None) -> Any:
    if path is None:
        return None
    from relay_shell.offhost.copy_verifier import read_copy

    try:
        copy = read_copy(path)
    except OSError as exc:
        raise UsageError(f"--against: cannot read {path}: {exc.strerror or exc}") from None
    if not copy.chains:
        shown = f": {copy.unreadable[0]}" if copy.unreadable else ""
        raise UsageError(
            f"--against: {path} holds no audit record ({copy.lines} line(s){shown}); give the collector's file of "
            "this host's records"
        )
    return copy


def _report(options: argparse.Namespace, window: Any, keys: dict[str, Any], copy: Any) -> int:
    from relay_shell.report.blobs import ChunkedDetails, StreamedArray
    from relay_shell.report.calls import Timeline
    from relay_shell.report.page import Inputs, write_page
    from relay_shell.report.summary import Summary
    from relay_shell.report.transcripts import Transcripts
    from relay_shell.report.trust import verify_into
    from relay_shell.report.verdict import verdict

    output: Path = options.output
    with tempfile.TemporaryFile(dir=output.parent, prefix=".report-spool-") as spool:
        details = ChunkedDetails(spool)
        rows = StreamedArray()
        summary = Summary()
        transcripts = Transcripts(options.record_dir, spool)

        def emit(values: list[Any], detail: Any) -> int:
            rows.append(values)
            return details.append(detail)

        timeline = Timeline(window, emit, summary.add)

        def feed(record: dict[str, Any]) -> None:
            if record.get("tool") == "session:end":
                match = transcripts.match(str(record.get("session_id")), record.get("transcript_sha256"))
                record["_transcript"] = match.status
            timeline.add(record)

        found = verify_into(options.paths, keys, copy, options.against, feed)
        timeline.finish()
        details.flush()
        result = verdict(
            found,
            bool(keys),
            options.against,
            summary.listed["unended"],
            summary.kind_counts["unended"],
            transcripts.matches,
        )
        inputs = Inputs(options.paths, options.public_key, options.against, options.record_dir, window)
        write_page(output, inputs, result, found.records, summary, timeline, transcripts.matches, rows.finish(), spool)
    for finding in result.findings:
        if finding.level == "fail":
            print("\n  ".join([f"{finding.title}:", *finding.lines]), file=sys.stderr)
    print(
        f"wrote {output} ({output.stat().st_size:,} bytes): {summary.calls:,} calls from {found.records:,} records; "
        f"{result.headline}"
    )
    return result.exit_code
