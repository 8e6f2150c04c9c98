"""Read recent audit records with filters (the `audit_tail` tool, the audit/recent resource, the CLI)."""

from __future__ import annotations

import os
import re
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

# How far back a filtered tail looks before it gives up: bounded work whatever the log size.
MAX_SCAN_BYTES = 8 * 1024 * 1024
# Characters a terminal does not show as themselves: controls (C0, C1: ESC and CSI rewrite the screen), format
# characters (bidi overrides reorder a line, zero-width ones hide), separators, surrogates, private and unassigned.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_NOT_PLAIN = re.compile(r"[^\x20-\x7e]")


@dataclass(frozen=True)
class TailFilter:
    tool: str | None = None
    tier: int | None = None
    denied: bool | None = None
    call_id: str | None = None  # a call's records: its start and its end (and a tier-3 dialogue's steps)
    execs: bool = False  # only records with an exec trace (adr/0019)
    # A job's records (adr/0028): the start, `job` note and end of the call that yielded as this job, and the
    # calls that read, wrote to or killed it (session_id = the job). The start carries no job id: the call is
    # known from the note (job_call_id), which a backward scan meets before the start.
    job_id: str | None = None
    job_call_id: str | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        if self.execs and "execs" not in record:
            return False
        if self.job_id is not None and not self._of_job(record):
            return False
        if self.call_id is not None and record.get("call_id") != self.call_id:
            return False
        if self.tool is not None and record.get("tool") != self.tool:
            return False
        if self.tier is not None and record.get("tier") != self.tier:
            return False
        return not (self.denied is not None and bool(record.get("denied")) != self.denied)

    def _of_job(self, record: dict[str, Any]) -> bool:
        if record.get("job_id") == self.job_id or record.get("session_id") == self.job_id:
            return True
        return self.job_call_id is not None and record.get("call_id") == self.job_call_id

    def learned(self, record: dict[str, Any]) -> TailFilter:
        """This filter after a matching record: a job's note names the call whose start comes before it."""
        if self.job_id is not None and record.get("phase") == "job" and record.get("job_id") == self.job_id:
            return replace(self, job_call_id=record.get("call_id"))
        return self


def recent_records(path: Path, lines: int, record_filter: TailFilter | None = None) -> list[dict[str, Any]]:
    """The last `lines` records that match, oldest first, scanning at most MAX_SCAN_BYTES from the end."""
    record_filter = record_filter or TailFilter()
    found: list[dict[str, Any]] = []
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return []
    with handle:
        handle.seek(0, os.SEEK_END)
        position = handle.tell()
        scanned = 0
        carry = b""
        while position > 0 and len(found) < lines and scanned < MAX_SCAN_BYTES:
            step = min(65536, position)
            position -= step
            scanned += step
            handle.seek(position)
            chunk = handle.read(step) + carry
            parts = chunk.split(b"\n")
            # The first part may be the end of a line that starts in an earlier block.
            carry = parts[0] if position > 0 else b""
            complete = parts[1:] if position > 0 else parts
            for raw in reversed(complete):
                if not raw.strip():
                    continue
                record = _parse(raw)
                if record is not None and record_filter.matches(record):
                    found.append(record)
                    record_filter = record_filter.learned(record)
                    if len(found) >= lines:
                        break
    found.reverse()
    return found


def follow_records(path: Path, record_filter: TailFilter, poll_seconds: float = 0.25) -> Iterator[dict[str, Any]]:
    """Yield records appended after now, following rotation by rename and copy-truncate (like `tail -F`)."""
    handle = open(path, "rb")
    handle.seek(0, os.SEEK_END)
    inode = os.fstat(handle.fileno()).st_ino
    buffer = b""
    try:
        while True:
            data = handle.read()
            if data:
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    record = _parse(raw)
                    if record is not None and record_filter.matches(record):
                        yield record
                continue
            time.sleep(poll_seconds)
            try:
                info = os.stat(path)
            except FileNotFoundError:
                continue
            if info.st_ino != inode or info.st_size < handle.tell():
                handle.close()
                handle = open(path, "rb")
                inode = os.fstat(handle.fileno()).st_ino
                buffer = b""
    finally:
        handle.close()


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def exec_lines(record: dict[str, Any]) -> list[str]:
    """A record's exec list (`execs`, adr/0019) as text: a summary line, then one line per kept entry:
    time offset, pid, parent, outcome, path and argv."""
    execs = record.get("execs")
    if not isinstance(execs, dict):
        return []
    where = record.get("call_id") or record.get("session_id") or "-"
    lines = [
        f"{record.get('ts', '')} {record.get('tool', '')} {where}: {execs.get('count', 0)} execs, "
        f"{len(execs.get('entries', []))} listed, {execs.get('not_found', 0)} not found, "
        f"{execs.get('denied', 0)} denied, sha256 {execs.get('sha256', '')}"
    ]
    for entry in execs.get("entries", []):
        if not isinstance(entry, dict):
            continue
        outcome = "denied" if entry.get("denied") else ("ok" if entry.get("ok") else entry.get("error", "failed"))
        argv = " ".join(item if isinstance(item, str) else orjson.dumps(item).decode() for item in entry["argv"])
        lines.append(
            f"  +{entry.get('t_ms', 0)}ms pid {entry.get('pid')} ppid {entry.get('ppid')} {outcome} "
            f"{entry.get('path') or '(unreadable)'}: {argv}"
        )
    return lines


def shown(text: str) -> str:
    """`text` for an auditor's terminal (review A2): every character that would not show as itself written as a
    JSON escape (\\uNNNN, or a surrogate pair), so a record cannot reorder, hide or rewrite what is printed. Used
    on a record's JSON text it stays valid JSON with the same values (such characters only occur in strings)."""
    return _NOT_PLAIN.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char == " " or unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
