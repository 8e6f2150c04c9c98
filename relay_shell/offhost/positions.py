"""Positions in the audit log for shipping, and finding one again after rotation (adr/0020).

A position is (file, byte offset after a line, seq and chain of that line's record). A rotated file is found again
by its content, not its name: the log's path first, then the files beside it whose names start with the log's
name (newest first, compressed ones skipped), where the line ending at the position's offset must be the record
with the position's chain; a position at a file's start is found by the file whose first record continues it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_shell.audit.log import parse_line, read_last_line

COMPRESSED = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".z", ".zip")


@dataclass(frozen=True)
class Position:
    dev: int
    ino: int
    offset: int  # just after the last line shipped
    seq: int  # that line's record's seq; -1 before the first
    chain: str  # the chain the record at `offset` continues: the last shipped record's, or at a file's start its
    # first record's prev; "" for a file that was empty


def chain_fields(line: bytes, record: dict[str, Any] | None = None) -> tuple[int | None, str | None, str | None]:
    """seq, prev and chain of a log line (`record`: the line already parsed); Nones for no chained record."""
    if not line.endswith(b'"}\n') or line[-77:-67] != b',"chain":"':
        return None, None, None
    if record is None:
        record = parse_line(line)
    seq, prev, chain = record.get("seq"), record.get("prev"), record.get("chain")
    if not isinstance(seq, int) or not isinstance(prev, str) or not isinstance(chain, str):
        return None, None, None
    return seq, prev, chain


def locate(path: Path, position: Position, skip_path: bool = False) -> Path | None:
    """The file that holds `position`: the log's own path, else a rotated copy beside it (newest first), whose
    line ending at the position's offset is the record with the position's chain."""
    candidates = [] if skip_path else [path]
    with contextlib.suppress(OSError):
        siblings = [
            entry
            for entry in path.parent.iterdir()
            if entry.name.startswith(path.name)
            and entry.name != path.name
            and not entry.name.lower().endswith(COMPRESSED)
            and entry.is_file()
        ]
        candidates += sorted(siblings, key=lambda entry: entry.stat().st_mtime, reverse=True)
    for candidate in candidates:
        try:
            info = candidate.stat()
        except OSError:
            continue
        if info.st_size < position.offset:
            continue
        if not position.chain:  # an empty file when we opened it: that file, by identity
            if (info.st_dev, info.st_ino) == (position.dev, position.ino):
                return candidate
            continue
        if position.offset == 0:  # a file's start: the file whose first record continues the chain
            if first_prev(candidate) == position.chain:
                return candidate
            continue
        last = read_last_line(candidate, end=position.offset)
        if last is not None and chain_fields(last + b"\n")[2] == position.chain:
            return candidate
    return None


def first_prev(path: Path) -> str | None:
    """The prev of a file's first record: the chain its start continues."""
    try:
        with open(path, "rb") as handle:
            return chain_fields(handle.readline())[1]
    except OSError:
        return None
