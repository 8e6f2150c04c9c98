"""`relay-shell audit verify PATH --against COPY`: the local log against the collector's copy (adr/0020).

The copy is what the collector wrote: one record per line, either the record alone (the `%msg%` template the README
documents), an RFC 5424 line, or any line whose record starts at `{"` (offhost/syslog.py `message_of`). Duplicates
(at-least-once shipping) count once. Each record of the copy is checked against its own chain hash, then compared
with the local record of the same `seq`:

- **missing locally**: the copy holds records past the local log's last one (its tail was cut off), or a record the
  local log does not have in its range, or one whose chain differs (the history was rewritten, the file replaced);
  this is evidence of tampering and fails (exit 1).
- **missing remotely**: local records the copy lacks: after the copy's last record (lag: not shipped yet, or the
  collector has not written them) or between its records (lost in transit). The local log is intact; exit 3.
- Local records before the copy's first one were shipped elsewhere or before shipping was on: reported, not failed.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from relay_shell.audit.log import CHAIN_SUFFIX_LEN
from relay_shell.offhost.syslog import message_of

LISTED = 10  # ranges named one by one in a report; the counts are always complete


CHAIN_BYTES = 32  # a chain (SHA-256) as raw bytes


class ChainTable:
    """seq → chain for millions of records in compact arrays: 8 bytes of seq and 32 of chain per record (a dict of
    ints took ~350 bytes per record: 354 MB for 1M records). Filled in any order; `settle()` sorts by seq once and
    merges duplicates (the same record twice) and conflicts (one seq, two chains); lookups are binary searches."""

    def __init__(self) -> None:
        self.seqs = array("q")
        self.chains = bytearray()
        self.ordered = True
        self.duplicates = 0
        self.conflicting: list[int] = []

    def add(self, seq: int, chain: str) -> None:
        if self.seqs and seq <= self.seqs[-1]:
            self.ordered = False
        self.seqs.append(seq)
        self.chains += bytes.fromhex(chain)

    def settle(self) -> None:
        """Sort by seq (when added out of order) and keep one entry per seq."""
        if self.ordered:
            return
        order = sorted(range(len(self.seqs)), key=self.seqs.__getitem__)
        seqs, chains = array("q"), bytearray()
        for index in order:
            seq, chain = self.seqs[index], self.chain_at(index)
            if seqs and seqs[-1] == seq:
                if chains[-CHAIN_BYTES:] == chain:
                    self.duplicates += 1
                else:
                    self.conflicting.append(seq)
                continue
            seqs.append(seq)
            chains += chain
        self.seqs, self.chains, self.ordered = seqs, chains, True

    def chain_at(self, index: int) -> bytes:
        return bytes(self.chains[index * CHAIN_BYTES : (index + 1) * CHAIN_BYTES])

    def get(self, seq: int) -> bytes | None:
        index = bisect_left(self.seqs, seq)
        if index < len(self.seqs) and self.seqs[index] == seq:
            return self.chain_at(index)
        return None

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        index = bisect_left(self.seqs, seq)
        return index < len(self.seqs) and self.seqs[index] == seq

    def __iter__(self) -> Iterator[int]:
        return iter(self.seqs)

    def __len__(self) -> int:
        return len(self.seqs)

    def first(self) -> int:
        return self.seqs[0]

    def last(self) -> int:
        return self.seqs[-1]


class LocalChains:
    """seq → chain of every local record verified (the RecordCheck that collects them)."""

    def __init__(self) -> None:
        self.chains = ChainTable()

    def __call__(self, record: dict[str, Any]) -> str | None:
        self.chains.add(int(record["seq"]), str(record["chain"]))
        return None


@dataclass
class CopyRecords:
    chains: ChainTable = field(default_factory=ChainTable)
    lines: int = 0
    duplicates: int = 0
    unreadable: list[str] = field(default_factory=list)  # "COPY:LINE: why"
    conflicting: list[int] = field(default_factory=list)  # seqs the copy holds twice with different records


def read_copy(path: Path) -> CopyRecords:
    """Every record of the collector's copy, each checked against its own chain hash."""
    copy = CopyRecords()
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            copy.lines += 1
            message = message_of(line)
            problem = None
            record: Any = None
            if message is None:
                problem = "no audit record in this line"
            else:
                try:
                    record = orjson.loads(message)
                except orjson.JSONDecodeError as exc:
                    problem = f"not valid JSON ({exc})"
            if problem is None and not (
                isinstance(record, dict)
                and type(record.get("seq")) is int
                and 0 <= record["seq"] < 2**63  # what a log can reach; the table keeps seqs as signed 64-bit
                and isinstance(record.get("chain"), str)
            ):
                problem = "not a chained audit record"
            if problem is None and message is not None:
                body = message[:-CHAIN_SUFFIX_LEN] + b"}"
                if hashlib.sha256(str(record.get("prev")).encode() + body).hexdigest() != record["chain"]:
                    problem = f"seq {record['seq']}: the record does not match its chain (damaged in the copy)"
            if problem is not None:
                copy.unreadable.append(f"{path}:{number}: {problem}")
                continue
            copy.chains.add(record["seq"], record["chain"])
    copy.chains.settle()
    copy.duplicates = copy.chains.duplicates
    copy.conflicting = copy.chains.conflicting
    return copy


def _ranges(seqs: list[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], seq)
        else:
            ranges.append((seq, seq))
    return ranges


def _describe(seqs: list[int]) -> str:
    ranges = _ranges(seqs)
    shown = ", ".join(f"{low}" if low == high else f"{low}-{high}" for low, high in ranges[:LISTED])
    more = f", … ({len(ranges) - LISTED} more ranges)" if len(ranges) > LISTED else ""
    return f"{len(seqs)} record(s), seq {shown}{more}"


@dataclass(frozen=True)
class Comparison:
    exit_code: int  # 0 consistent, 1 missing locally (tampering), 3 missing remotely only (lag or loss)
    lines: list[str]


def compare(local: ChainTable, copy: CopyRecords, copy_path: Path) -> Comparison:
    lines: list[str] = []
    local.settle()
    local_first, local_last = local.first(), local.last()
    past_end = [seq for seq in copy.chains if seq > local_last]
    absent: list[int] = []
    differing: list[int] = []
    for index, seq in enumerate(copy.chains.seqs):
        if local_first <= seq <= local_last:
            chain = local.get(seq)
            if chain is None:
                absent.append(seq)
            elif chain != copy.chains.chain_at(index):
                differing.append(seq)
    older = sum(1 for seq in copy.chains if seq < local_first)
    tampered = bool(past_end or absent or differing or copy.conflicting)
    if past_end:
        lines.append(
            f"MISSING LOCALLY: {_describe(past_end)} are in {copy_path} after the local log's last record "
            f"(seq {local_last}): the local log's tail was truncated"
        )
    if differing:
        lines.append(
            f"MISSING LOCALLY: {_describe(differing)} differ from {copy_path} (another chain): the local history "
            "was rewritten or the file replaced"
        )
    if absent:
        lines.append(f"MISSING LOCALLY: {_describe(absent)} are in {copy_path} and not in the local log")
    if copy.conflicting:
        lines.append(
            f"CONFLICT: {_describe(sorted(set(copy.conflicting)))} appear in {copy_path} as two different records "
            "(a rewritten log shipped again, or several hosts in one file: keep one file per host)"
        )
    remote_first = copy.chains.first() if len(copy.chains) else None
    remote_last = copy.chains.last() if len(copy.chains) else None
    lost: list[int] = []
    lag: list[int] = []
    before = 0
    for seq in local:
        if seq in copy.chains:
            continue
        if remote_first is None or seq > (remote_last or 0):
            lag.append(seq)
        elif seq < remote_first:
            before += 1
        else:
            lost.append(seq)
    if lost:
        lines.append(f"MISSING REMOTELY: {_describe(lost)} are not in {copy_path} (lost in transit)")
    if lag:
        lines.append(
            f"MISSING REMOTELY: {_describe(lag)} after the copy's last record are not in {copy_path} yet (shipping "
            "lag, or lost)"
        )
    notes = [
        f"copy: {copy.lines} line(s), {len(copy.chains)} distinct record(s), {copy.duplicates} duplicate(s)",
    ]
    if before:
        notes.append(f"{before} local record(s) precede the copy's first record (not compared)")
    if older:
        notes.append(f"{older} record(s) of the copy precede the local log's first (older files; not compared)")
    if copy.unreadable:
        shown = "; ".join(copy.unreadable[:3])
        notes.append(f"{len(copy.unreadable)} line(s) of the copy are no audit record: {shown}")
    if not tampered and not lost and not lag:
        lines.append(
            f"OK: the local log and {copy_path} agree ({len(local)} local records, seq {local_first}-{local_last})"
        )
    exit_code = 1 if tampered else 3 if (lost or lag) else 0
    return Comparison(exit_code, lines + notes)
