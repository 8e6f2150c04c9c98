"""Whether the log can be trusted, found in the same pass that reads it for the report.

`audit verify`'s own verifier (audit/verify.py) reads the files, checks the chain and hands every record whose chain
checked out to `check`, which checks signed checkpoints with the keys given (audit/checkpoint.py), compares the record
with the collector's copy (audit/against.py) and passes it on to the report. So the report's verdict is `verify`'s.

Where `verify` stops at the first bad line, the report goes on: the rest of the log is read link by link (each
record against its own chain and the record before it), so a single edited record is marked alone, records inserted
or deleted are marked where the chain breaks, and every call still appears in the report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from relay_shell.audit.log import CHAIN_SUFFIX_LEN, GENESIS
from relay_shell.audit.verify import verify_files
from relay_shell.offhost.checkpoints import CHECKPOINT_TOOL, check_checkpoint
from relay_shell.offhost.copy_verifier import ChainTable, Comparison, CopyRecords, compare

MAX_PROBLEMS = 1000  # bad records named one by one; the count is complete


@dataclass(frozen=True)
class Problem:
    where: str  # "PATH:LINE"
    seq: int | None
    call_id: str | None
    tool: str | None
    why: str


@dataclass
class Verification:
    """What the pass found: `verify`'s verdict, the records after it, checkpoints and the copy."""

    ok: bool = True
    message: str = ""  # verify's: the first bad line and why, or the summary
    records: int = 0
    first_seq: int | None = None
    first_tool: str | None = None
    head: str | None = None
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0
    checkpoints: int = 0
    signed: list[int] = field(default_factory=list)  # seqs of checkpoints whose signature verified
    signer_ids: set[str] = field(default_factory=set)
    last_seq: int | None = None
    repairs: list[int] = field(default_factory=list)  # seqs of audit:repair records
    comparison: Comparison | None = None
    not_in_copy: int = 0  # local records the copy lacks (lag or loss)
    differing: int = 0  # local records the copy holds with another chain


Feed = Callable[[dict[str, Any]], None]


class _Pass:
    def __init__(self, keys: dict[str, Ed25519PublicKey], copy: CopyRecords | None, feed: Feed) -> None:
        self.keys = keys
        self.default_key = next(iter(keys.values()), None)
        self.copy = copy
        self.feed = feed
        self.found = Verification()
        self.local = ChainTable()
        self.last_chain: str | None = None  # the chain the next file read after a break must continue

    def check(self, record: dict[str, Any]) -> str | None:
        """verify_files' RecordCheck: every record whose chain checked out, in order."""
        problem = self._checkpoint(record)
        if problem is not None:
            return problem  # verify stops here; `resume` passes the record on, marked
        self._pass_on(record, None)
        return None

    def _checkpoint(self, record: dict[str, Any]) -> str | None:
        if record.get("tool") != CHECKPOINT_TOOL or self.default_key is None:
            return None
        problem = check_checkpoint(record, self.keys.get(str(record.get("key_id")), self.default_key))
        if problem is None:
            self.found.signed.append(int(record["seq"]))
            self.found.signer_ids.add(str(record.get("key_id")))
        return problem

    def _pass_on(self, record: dict[str, Any], problem: str | None) -> None:
        found = self.found
        found.records += 1
        seq, chain = record.get("seq"), record.get("chain")
        if found.first_seq is None:
            found.first_seq = seq if isinstance(seq, int) else None
            found.first_tool = str(record.get("tool"))
        if isinstance(seq, int):
            found.last_seq = seq
        tool = record.get("tool")
        if tool == CHECKPOINT_TOOL:
            found.checkpoints += 1
        elif tool == "audit:repair" and isinstance(seq, int):
            found.repairs.append(seq)
        shown = {name: value for name, value in record.items() if name not in ("v", "prev", "chain")}
        if problem is not None:
            shown["_problem"] = problem
        if isinstance(seq, int) and isinstance(chain, str) and 0 <= seq < 2**63 and len(chain) == 64:
            self.local.add(seq, chain)
            mark = self._copy_mark(seq, chain)
            if mark is not None:
                shown["_copy"] = mark
        self.feed(shown)

    def _copy_mark(self, seq: int, chain: str) -> str | None:
        copy = self.copy
        if copy is None or not copy.chains:
            return None
        theirs = copy.chains.get(seq)
        if theirs is None:
            if seq < copy.chains.first():
                return None  # shipped before the copy begins: not compared
            self.found.not_in_copy += 1
            if seq > copy.chains.last():
                return "not in the collector's copy yet (after its last record: shipping lag, or lost)"
            return "not in the collector's copy (lost in transit)"
        try:
            ours = bytes.fromhex(chain)
        except ValueError:
            ours = b""
        if theirs != ours:
            self.found.differing += 1
            return "the collector's copy holds another record for this seq: the local history was rewritten"
        return None

    def resume(self, paths: list[Path], message: str) -> None:
        """After verify's first bad line: that record marked with its problem, then the rest link by link."""
        for index, path in enumerate(paths):
            line, why = _located(path, message)
            if line is None:
                continue
            self._read_on(path, line, why, None)
            for later in paths[index + 1 :]:
                self._read_on(later, 1, None, self.last_chain)
            return

    def _read_on(self, path: Path, from_line: int, why: str | None, last_chain: str | None) -> None:
        """Lines `from_line`… of `path`: the first with `why` (verify's problem), the others checked on their own."""
        try:
            handle = open(path, "rb")
        except OSError as exc:
            self.add_problem(f"{path}", None, f"cannot read: {exc.strerror or exc}")
            return
        with handle:
            for number, line in enumerate(handle, start=1):
                if number < from_line:
                    continue
                record = _parse(line)
                where = f"{path}:{number}"
                if record is None:
                    self.add_problem(where, None, why or "not a record (not a JSON object, or cut off)")
                    why = None
                    continue
                problem = why or _link_problem(line, record, last_chain)
                if problem is None and record.get("tool") == CHECKPOINT_TOOL:
                    problem = self._checkpoint(record)
                why = None
                if problem is not None:
                    self.add_problem(where, record, problem)
                chain = record.get("chain")
                last_chain = chain if isinstance(chain, str) else last_chain
                self._pass_on(record, problem)
        self.last_chain = last_chain

    def add_problem(self, where: str, record: dict[str, Any] | None, why: str) -> None:
        self.found.problem_count += 1
        if len(self.found.problems) < MAX_PROBLEMS:
            record = record or {}
            seq, call_id, tool = record.get("seq"), record.get("call_id"), record.get("tool")
            self.found.problems.append(
                Problem(
                    where,
                    seq if isinstance(seq, int) else None,
                    call_id if isinstance(call_id, str) else None,
                    str(tool) if tool is not None else None,
                    why,
                )
            )


def _located(path: Path, message: str) -> tuple[int | None, str]:
    """The line and the problem of verify's message `PATH:LINE: why` when it names a line of `path`."""
    prefix = f"{path}:"
    number, _, why = message[len(prefix) :].partition(": ") if message.startswith(prefix) else ("", "", "")
    return (int(number), why) if number.isdigit() else (None, "")


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _link_problem(line: bytes, record: dict[str, Any], last_chain: str | None) -> str | None:
    """What `verify` would say of this record after a break: its own chain, then its link to the one before."""
    chain, prev = record.get("chain"), record.get("prev")
    if not isinstance(chain, str) or not isinstance(prev, str) or not isinstance(record.get("seq"), int):
        return "record has no chain fields (seq, prev, chain): chain was off or fields removed"
    body = line.rstrip(b"\n")[:-CHAIN_SUFFIX_LEN] + b"}"
    if hashlib.sha256(prev.encode("ascii", errors="replace") + body).hexdigest() != chain:
        return "chain mismatch: the record was edited"
    if last_chain is not None and prev != last_chain:
        return "prev does not match the previous record's chain: record inserted, deleted or reordered"
    if last_chain is None and prev != GENESIS and record.get("tool") != "audit:continue":
        return "does not continue any record before it"
    return None


def verify_into(
    paths: list[Path], keys: dict[str, Ed25519PublicKey], copy: CopyRecords | None, copy_path: Path | None, feed: Feed
) -> Verification:
    """Verify `paths` (oldest first), passing every record on to `feed` in order, marked (`_problem`, `_copy`)
    where verification or the copy finds fault."""
    reading = _Pass(keys, copy, feed)
    result = verify_files(paths, reading.check)
    found = reading.found
    found.ok, found.message = result.ok, result.message
    if result.ok:
        found.head = result.last_chain
    else:
        named = found.problem_count
        reading.resume(paths, result.message)
        if found.problem_count == named:  # no record to mark: an empty file, or one that cannot be read
            reading.add_problem(result.message, None, "")
    if copy is not None and copy_path is not None and len(reading.local):
        found.comparison = compare(reading.local, copy, copy_path)
    return found
