"""The trust banner's findings and the command's exit status, from what the pass found.

Exit statuses are `audit verify`'s: 1 when the log fails verification or the collector's copy shows records missing
locally (a truncated tail, a rewritten history), 3 when the log is intact but the copy lacks records (lag or loss),
4 when --public-key was given and no checkpoint is in the log yet, 0 otherwise. A transcript whose file no longer
matches the digest its session:end record carries is evidence of tampering too: 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from relay_shell.report.summary import Listed
from relay_shell.report.transcripts import Match
from relay_shell.report.trust import Verification

EXIT_FAILED = 1
EXIT_MISSING_REMOTELY = 3
EXIT_NOT_SIGNED = 4
LISTED = 10  # problems, interrupted calls and transcripts named in the banner; the rest are counted


@dataclass(frozen=True)
class Finding:
    level: str  # ok, note, warn, fail
    title: str
    lines: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()  # (href, label): the calls the finding names


@dataclass(frozen=True)
class Verdict:
    level: str  # fail, warn or ok: the banner's colour
    headline: str
    findings: list[Finding]
    exit_code: int


def verdict(
    found: Verification,
    public_keys: bool,
    copy_path: Path | None,
    unended: list[Listed],
    unended_count: int,
    transcripts: list[Match],
) -> Verdict:
    findings = [_chain(found), _checkpoints(found, public_keys), _copy(found, copy_path)]
    if unended_count:
        findings.append(_unended(unended, unended_count))
    if found.repairs:
        shown = ", ".join(str(seq) for seq in found.repairs[:LISTED])
        findings.append(
            Finding(
                "note",
                "Repaired writes",
                (
                    f"{len(found.repairs)} audit:repair record(s) (seq {shown}): the writer found an incomplete "
                    "write at the end of the file when it reopened it and removed or marked it (adr/0014).",
                ),
            )
        )
    transcript = _transcripts(transcripts)
    if transcript is not None:
        findings.append(transcript)
    exit_code = 0
    altered = any(match.status == "altered" for match in transcripts)
    comparison = found.comparison
    if not found.ok or altered or (comparison is not None and comparison.exit_code == EXIT_FAILED):
        exit_code = EXIT_FAILED
    elif comparison is not None and comparison.exit_code == EXIT_MISSING_REMOTELY:
        exit_code = EXIT_MISSING_REMOTELY
    elif public_keys and not found.signed:
        exit_code = EXIT_NOT_SIGNED
    level = "fail" if exit_code in (EXIT_FAILED, EXIT_MISSING_REMOTELY) else "ok"
    if level == "ok" and any(finding.level in ("warn", "fail") for finding in findings):
        level = "warn"
    if exit_code == EXIT_FAILED:
        headline = "This log cannot be trusted as it stands: see what failed below."
    elif exit_code == EXIT_MISSING_REMOTELY:
        headline = "The chain verified, but the collector's copy does not hold every record: see below."
    else:
        headline = "The chain verified." if level == "ok" else "The chain verified, with the warnings below."
    return Verdict(level, headline, findings, exit_code)


def _chain(found: Verification) -> Finding:
    if found.ok:
        if found.first_tool == "audit:continue":
            origin = (
                f"from seq {found.first_seq}, an audit:continue record: it continues an older file not given "
                "(give the rotated files too, oldest first, to verify from genesis)"
            )
        else:
            origin = "from genesis (seq 0)"
        return Finding(
            "ok",
            "Hash chain intact",
            (f"{found.records} records verified {origin} to seq {found.last_seq}; head {found.head}.",),
        )
    lines = [] if found.problems else [f"{found.message}."]
    links = []
    for problem in found.problems[:LISTED]:
        named = [f"seq {problem.seq}"] if problem.seq is not None else []
        if problem.call_id:
            named.append(f"{problem.tool} call {problem.call_id}")
            label = problem.call_id if problem.seq is None else f"{problem.call_id} (seq {problem.seq})"
            links.append((f"#call={problem.call_id}", label))
        elif problem.tool:
            named.append(problem.tool)
        where = f"{problem.where} ({', '.join(named)})" if named else problem.where
        lines.append(f"{where}: {problem.why}" if problem.why else where)
    if found.problem_count > LISTED:
        lines.append(f"… and {found.problem_count - LISTED} more bad record(s), marked in the timeline.")
    if found.records:
        lines.append(
            "Records after the first bad one were checked link by link (each against its own chain and the record "
            f"before it): {found.problem_count} bad record(s) in all. Every call is still shown; bad records are "
            "marked."
        )
    return Finding("fail", "Hash chain FAILED", tuple(lines), tuple(links))


def _checkpoints(found: Verification, public_keys: bool) -> Finding:
    if not public_keys:
        return Finding(
            "note",
            "Signed checkpoints not checked",
            (
                f"{found.checkpoints} audit:checkpoint record(s) in the log; give the public key (--public-key) to "
                "check their signatures. Without them a log rewritten whole, with its chain recomputed, looks intact.",
            ),
        )
    if not found.signed:
        return Finding(
            "warn",
            "NOT SIGNED YET",
            (
                "The log holds no checkpoint signed by the key given: a young server, a freshly rotated file (give the "
                "older files too), or a log rewritten without its checkpoints. Compare with the collector's copy.",
            ),
        )
    uncovered = (found.last_seq or 0) - found.signed[-1]
    after = "every record before it is covered" if uncovered == 0 else f"{uncovered} record(s) after it are not"
    return Finding(
        "ok",
        "Signed checkpoints verified",
        (
            f"{len(found.signed)} signature(s) verified with key {', '.join(sorted(found.signer_ids))}; the last at "
            f"seq {found.signed[-1]}: {after} covered by a signature.",
        ),
    )


def _copy(found: Verification, copy_path: Path | None) -> Finding:
    if copy_path is None:
        return Finding(
            "note",
            "No collector's copy compared",
            (
                "Give the collector's copy (--against COPY) to rule out a truncated tail or a rewritten log with a "
                "recomputed chain.",
            ),
        )
    comparison = found.comparison
    if comparison is None:
        return Finding("fail", "Collector's copy not compared", ("The local log holds no chained record.",))
    if comparison.exit_code == 0:
        return Finding("ok", "The collector's copy agrees", tuple(comparison.lines))
    title = (
        "Records MISSING LOCALLY (the collector's copy shows tampering)"
        if comparison.exit_code == EXIT_FAILED
        else "Records MISSING from the collector's copy (lag or loss; the local log is intact)"
    )
    return Finding("fail", title, tuple(comparison.lines))


def _unended(unended: list[Listed], count: int) -> Finding:
    lines = [
        f"{count} call(s) have a start record and no end record: interrupted when their server was killed or "
        "crashed (a later server:start shows it was replaced), or still running. Not tampering."
    ]
    links = []
    for call in unended[:LISTED]:
        lines.append(f"{call.call_id} {call.tool} started {call.ts} by {call.client}: {call.outcome}")
        links.append((f"#call={call.call_id}", call.call_id))
    return Finding("warn", "Interrupted calls", tuple(lines), tuple(links))


def _transcripts(matches: list[Match]) -> Finding | None:
    altered = [match for match in matches if match.status == "altered"]
    missing = [match for match in matches if match.status in ("missing", "unreadable")]
    if not altered and not missing:
        return None
    lines = [
        f"session {match.session_id}: {match.path} has SHA-256 {match.digest}, not the digest its session:end "
        "record carries: altered or replaced after the session ended"
        for match in altered[:LISTED]
    ]
    lines += [f"session {match.session_id}: {match.path} is {match.status}" for match in missing[:LISTED]]
    level = "fail" if altered else "warn"
    return Finding(
        level, "Session transcripts", tuple(lines), tuple((f"#find={m.session_id}", m.session_id) for m in altered)
    )
