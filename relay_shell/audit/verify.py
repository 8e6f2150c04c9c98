"""`relay-shell audit verify`: check the hash chain of one log file, or of rotated files given in order.

Detects edits (chain mismatch), insertions, deletions and reordering (prev/seq breaks), head truncation
(the first record is neither genesis nor an `audit:continue` link) and torn or empty files, and reports
the first bad line precisely. Lines that are no record pass only where the writer marked them as damage it could
not remove (an `audit:repair` record right after them naming their exact length and SHA-256).

It also pairs the two phases of each call by `call_id`: a `start` record with no `end` record is a call the
server did not finish (it died, or the end record could not be written). That is not tampering, so it does not
fail verification, but it is listed as interrupted: call id, tool, time and where the start record is. A call
that yielded its command as a job (adr/0028) has a `job` note between the two, and its end comes when the job
ended: one still without an end is listed with its job.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from relay_shell.audit.log import CHAIN_SUFFIX_LEN, CONTINUE_TOOL, GENESIS, MAX_DAMAGE_SCAN, REPAIR_TOOL


@dataclass(frozen=True)
class UnendedCall:
    """A start record no end record follows in the files verified: an interrupted call."""

    call_id: str
    tool: str
    ts: str
    where: str  # "PATH:LINE" of the start record
    job_id: str | None = None  # it yielded and ran on as this job (its `job` note)


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    records: int
    message: str  # on failure: "PATH:LINE: why"; on success: a summary with the final chain hash
    last_chain: str | None = None
    interrupted: tuple[UnendedCall, ...] = ()  # start records without an end record, oldest first

    def report(self) -> str:
        """The message, then the interrupted calls (what `relay-shell audit verify` prints)."""
        if not self.interrupted:
            return self.message
        lines = [
            self.message,
            f"interrupted: {len(self.interrupted)} call(s) have a start record and no end record (the server "
            "stopped during them, or could not write their end); not tampering:",
        ]
        lines += [
            f"  {call.call_id} {call.tool} started {call.ts} ({call.where})"
            + (f", ran on as job {call.job_id}" if call.job_id else "")
            for call in self.interrupted
        ]
        return "\n".join(lines)


class _Broken(Exception):
    def __init__(self, line_number: int, why: str) -> None:
        super().__init__(why)
        self.line_number = line_number
        self.why = why


# Called with every record whose chain checked out; returns why the record is bad, or None (a checkpoint's signature,
# offhost/checkpoints.py; collecting seq and chain to compare with a collector's copy, offhost/copy_verifier.py).
RecordCheck = Callable[[dict[str, Any]], str | None]


def verify_files(paths: list[Path], check: RecordCheck | None = None) -> VerifyResult:
    """Verify files in chain order (oldest first). A later file must continue the earlier one's chain."""
    prev: str | None = None
    seq = -1
    total = 0
    anchored_at: str | None = None
    started: dict[str, UnendedCall] = {}  # call_id -> its start record, until its end record is seen
    for path in paths:
        try:
            prev, seq, count, anchor = _verify_one(path, prev, seq, started, check)
        except _Broken as broken:
            return VerifyResult(False, total, f"{path}:{broken.line_number}: {broken.why}")
        except FileNotFoundError:
            return VerifyResult(False, total, f"{path}: no such file")
        except OSError as exc:
            return VerifyResult(False, total, f"{path}: cannot read: {exc.strerror or exc}")
        total += count
        if anchored_at is None:
            anchored_at = anchor
    origin = "from genesis" if anchored_at is None else f"continuing chain {anchored_at} (verify the older file too)"
    summary = f"OK: {total} records, chain intact {origin}; head {prev}"
    if started:
        summary += f"; {len(started)} interrupted call(s)"
    return VerifyResult(True, total, summary, prev, tuple(started.values()))


def _after_marked_damage(
    numbered: Iterator[tuple[int, bytes]], first: bytes, broken: _Broken
) -> tuple[int, bytes, dict[str, Any]]:
    """Lines that are no record are accepted only as damage the writer found and could not remove (an append-only
    file): the `audit:repair` record right after them names their exact bytes. Returns that record's line;
    raises `broken` (the first bad line) for anything else."""
    damaged = first
    for line_number, line in numbered:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            damaged += line
            if not line.endswith(b"\n") or len(damaged) > MAX_DAMAGE_SCAN:
                raise broken
            continue
        marked = record.get("tool") == REPAIR_TOOL and record.get("marked_bytes") == len(damaged)
        if marked and record.get("marked_sha256") == hashlib.sha256(damaged).hexdigest():
            return line_number, line, record
        raise broken
    raise broken


def _verify_one(
    path: Path, prev: str | None, seq: int, started: dict[str, UnendedCall], check: RecordCheck | None = None
) -> tuple[str, int, int, str | None]:
    anchor: str | None = None
    count = 0
    line_number = 0
    sha256 = hashlib.sha256
    loads = orjson.loads
    with open(path, "rb") as handle:
        numbered = enumerate(handle, start=1)
        for line_number, line in numbered:
            if not line.endswith(b"\n"):
                raise _Broken(line_number, "last line is incomplete (torn write or truncated file)")
            try:
                record = loads(line)
            except orjson.JSONDecodeError as exc:
                record = _Broken(line_number, f"not valid JSON ({exc})")
            if not isinstance(record, dict):
                broken = record if isinstance(record, _Broken) else _Broken(line_number, "not a JSON object")
                line_number, line, record = _after_marked_damage(numbered, line, broken)
            chain = record.get("chain")
            record_prev = record.get("prev")
            record_seq = record.get("seq")
            if not isinstance(chain, str) or not isinstance(record_prev, str) or not isinstance(record_seq, int):
                raise _Broken(
                    line_number, "record has no chain fields (seq, prev, chain): chain was off or fields removed"
                )
            body = line[: -CHAIN_SUFFIX_LEN - 1]
            if line[-CHAIN_SUFFIX_LEN - 1 : -67] != b',"chain":"':
                raise _Broken(line_number, "chain is not the last field: the record was rewritten")
            if sha256(record_prev.encode("ascii") + body + b"}").hexdigest() != chain:
                raise _Broken(line_number, "chain mismatch: the record was edited")
            if prev is None:
                if record.get("tool") == CONTINUE_TOOL:
                    anchor = record_prev
                elif record_seq != 0 or record_prev != GENESIS:
                    raise _Broken(
                        line_number,
                        f"head truncated: first record has seq {record_seq}, expected 0 (genesis) "
                        f"or an {CONTINUE_TOOL} record",
                    )
            else:
                if record_prev != prev:
                    raise _Broken(
                        line_number,
                        f"prev does not match the previous record's chain: record inserted, deleted or reordered "
                        f"(seq {record_seq} after {seq})",
                    )
                if record_seq != seq + 1:
                    raise _Broken(line_number, f"seq jumps from {seq} to {record_seq}: records deleted or reordered")
            if check is not None and (problem := check(record)) is not None:
                raise _Broken(line_number, problem)
            phase = record.get("phase")
            if phase is not None:
                call_id = str(record.get("call_id"))
                if phase == "start":
                    started[call_id] = UnendedCall(
                        call_id, str(record.get("tool")), str(record.get("ts")), f"{path}:{line_number}"
                    )
                elif phase == "end":
                    started.pop(call_id, None)
                elif phase == "job" and call_id in started:
                    started[call_id] = dataclasses.replace(started[call_id], job_id=str(record.get("job_id")))
            prev = chain
            seq = record_seq
            count += 1
    if count == 0:
        raise _Broken(1, "empty file: nothing to verify")
    assert prev is not None
    return prev, seq, count, anchor
