"""`relay-shell audit verify`: check the hash chain of one log file, or of rotated files given in order.

Detects edits (chain mismatch), insertions, deletions and reordering (prev/seq breaks), head truncation
(the first record is neither genesis nor an `audit:continue` link) and torn or empty files, and reports
the first bad line precisely.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from relay_shell.audit.log import CHAIN_SUFFIX_LEN, CONTINUE_TOOL, GENESIS


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    records: int
    message: str  # on failure: "PATH:LINE: why"; on success: a summary with the final chain hash
    last_chain: str | None = None


class _Broken(Exception):
    def __init__(self, line_number: int, why: str) -> None:
        super().__init__(why)
        self.line_number = line_number
        self.why = why


def verify_files(paths: list[Path]) -> VerifyResult:
    """Verify files in chain order (oldest first). A later file must continue the earlier one's chain."""
    prev: str | None = None
    seq = -1
    total = 0
    anchored_at: str | None = None
    for path in paths:
        try:
            prev, seq, count, anchor = _verify_one(path, prev, seq)
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
    return VerifyResult(True, total, f"OK: {total} records, chain intact {origin}; head {prev}", prev)


def _verify_one(path: Path, prev: str | None, seq: int) -> tuple[str, int, int, str | None]:
    anchor: str | None = None
    count = 0
    line_number = 0
    sha256 = hashlib.sha256
    loads = orjson.loads
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                raise _Broken(line_number, "last line is incomplete (torn write or truncated file)")
            try:
                record = loads(line)
            except orjson.JSONDecodeError as exc:
                raise _Broken(line_number, f"not valid JSON ({exc})") from None
            if not isinstance(record, dict):
                raise _Broken(line_number, "not a JSON object")
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
            prev = chain
            seq = record_seq
            count += 1
    if count == 0:
        raise _Broken(1, "empty file: nothing to verify")
    assert prev is not None
    return prev, seq, count, anchor
