"""Reading the audit log for shipping, following it through rotation (adr/0020).

Rotation, as audit/log.py does it. Renamed: the old file is read to its end, then the new one from its start.
Copy-truncated: the rest of the old content is read from the copy (a file in the same directory whose name starts
with the log's name and which holds our last shipped record at our offset), then the new content. A position is
found again the same way after a restart: the log's path first, then those copies (offhost/positions.py). Each
record read must continue the chain of the one before; one that does not means the file changed under us, and the
position is looked up again. A position that can no longer be found (the copy was compressed or removed) is a gap:
counted, reported, and reading goes on from the start of the current file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from relay_shell.audit.log import parse_line
from relay_shell.offhost.positions import Position, chain_fields, locate

BATCH_BYTES = 16 * 1024  # read and sent at once: a small batch holds the GIL briefly (~0.5 ms; calls keep latency)
LINE_MAX = 1 << 20  # a line is read whole up to this (a record is at most 64 KiB); longer is shipped cut


class LogReader:
    """The log from a position on, a batch of whole lines at a time. `sent` is where the next batch starts;
    `confirmed` the position shipping resumes from after any doubt (the shipper moves it as the collector
    confirms; a file start learns here what it continues)."""

    def __init__(self, path: Path, error: Callable[[str], None]) -> None:
        self.path = path
        self.error = error  # reports a problem (the shipper counts and prints it)
        self.handle: BinaryIO | None = None
        self.sent: Position | None = None
        self.confirmed: Position | None = None
        self.left: Position | None = None  # the end of the file reading last moved on from (rotation)
        self.gaps = 0

    @property
    def opened(self) -> bool:
        return self.handle is not None and self.sent is not None

    def read_lines(self) -> list[tuple[bytes, dict[str, Any]]]:
        """The next complete lines after the sent position (following rotation), advancing it."""
        if self.handle is None or self.sent is None:
            return []
        offset = self.sent.offset
        if offset > 0 and os.pread(self.handle.fileno(), 1, offset - 1) != b"\n":
            # Not at the start of a line: the file was cut and written again past our offset.
            self._relocate(f"{self.path} was truncated and rewritten past byte {offset}", skip_path=True)
            return []
        data = self.handle.read(BATCH_BYTES)
        if not data:
            self._at_end()
            return []
        if len(data) == BATCH_BYTES and b"\n" not in data:  # one record longer than a batch (up to 64 KiB)
            data += self.handle.read(LINE_MAX - BATCH_BYTES)
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < LINE_MAX:  # a line still being written (one write, but we may read between)
                self.handle.seek(self.sent.offset)
                return []
            end = len(data)  # a line this long is no record the log writes: ship it cut, as it is
        if end < len(data):
            self.handle.seek(self.sent.offset + end)
        parts = data[:end].split(b"\n")  # lines end at "\n" only, as the log writes them
        lines = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        return self._continuing(lines)

    def _continuing(self, lines: list[bytes]) -> list[tuple[bytes, dict[str, Any]]]:
        """The lines that continue the chain from the sent position, each with its record; the position moves past
        them."""
        assert self.handle is not None and self.sent is not None
        position = self.sent
        shipped: list[tuple[bytes, dict[str, Any]]] = []
        for line in lines:
            record = parse_line(line) if line.endswith(b'"}\n') else {}  # once: its chain and its message
            seq, prev, chain = chain_fields(line, record)
            if prev is not None and position.offset == 0 and not position.chain and self.confirmed == position:
                # The file was empty when opened: now its first record says what the start continues (a copy-
                # truncate before anything was confirmed moves it to the copy, which is then found by it).
                self.confirmed = replace(position, chain=prev)
            if chain is not None and position.chain and prev != position.chain:
                # The record does not continue the one shipped before: the file changed under us.
                if shipped:
                    break  # ship what continued; look the position up again at the next read
                self._relocate(f"the record at byte {position.offset} of {self.path} does not continue the chain")
                return []
            offset = position.offset + len(line)
            if chain is not None and seq is not None:
                position = replace(position, offset=offset, seq=seq, chain=chain)
            else:
                position = replace(position, offset=offset)
            shipped.append((line, record))
        if len(shipped) < len(lines):
            self.handle.seek(position.offset)
        self.sent = position
        return shipped

    def _at_end(self) -> None:
        """End of our file: move on if the log was rotated away from it."""
        assert self.handle is not None and self.sent is not None
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return  # renamed and not yet recreated: the writer creates it at its next record
        if (info.st_dev, info.st_ino) != (self.sent.dev, self.sent.ino):
            if self.handle.read(1):  # appended after our last read: not at the end after all
                self.handle.seek(self.sent.offset)
                return
            self.left = self.sent  # a record the writer added to the old file after all is looked up from here
            self._open(self.path, Position(info.st_dev, info.st_ino, 0, self.sent.seq, self.sent.chain))
        elif info.st_size < self.sent.offset:
            self._relocate(f"{self.path} was truncated (copy-truncate rotation)", skip_path=True)

    def resume(self, position: Position | None) -> None:
        """Open the log at `position` (None: the start of the current file), wherever the file now is."""
        if position is None:
            self._open_current(None)
            return
        found = locate(self.path, position)
        if found is None:
            self._gap(position, f"the last confirmed record (seq {position.seq}) is no longer at its place")
            return
        self._open(found, position)

    def _relocate(self, why: str, skip_path: bool = False) -> None:
        """Find the sent position again (in the file we just left, when we are at the start of the next one)."""
        assert self.sent is not None
        position = self.sent if self.sent.offset > 0 or self.left is None else self.left
        found = locate(self.path, position, skip_path=skip_path) if position.offset > 0 else None
        if found is not None:
            with contextlib.suppress(OSError):
                info = found.stat()
                if (info.st_dev, info.st_ino) == (self.sent.dev, self.sent.ino) and position == self.sent:
                    found = None  # the very place that does not continue: looking again would find it again
        if found is None:
            self._gap(position, why)
            return
        self._open(found, position)

    def _gap(self, position: Position, why: str) -> None:
        """The position cannot be found: some records may never be shipped. Say so; read the current file."""
        self.gaps += 1
        self.error(
            f"{why}; records after seq {position.seq} that were in rotated files no longer found beside the log "
            "may be missing from the collector; shipping continues from the start of the current file"
        )
        self._open_current(position)

    def _open_current(self, previous: Position | None) -> None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            self.sent = previous
            return
        seq = previous.seq if previous is not None else -1
        # The current file's first record may not continue the last one shipped (that is the gap): no chain to
        # continue, and a rewind after an outage comes back here.
        self._open(self.path, Position(info.st_dev, info.st_ino, 0, seq, ""))
        self.confirmed = self.sent

    def _open(self, path: Path, position: Position) -> None:
        self.close()
        try:
            handle = open(path, "rb")
        except FileNotFoundError:
            self.sent = position
            return
        info = os.fstat(handle.fileno())
        if position.offset == 0 and not position.chain:
            # From a file's start with nothing to continue: the first record's prev is what the position must
            # continue, so the file is known again after a copy-truncate moved this content to a copy.
            position = replace(position, chain=chain_fields(handle.readline())[1] or "")
        handle.seek(position.offset)
        self.handle = handle
        self.sent = replace(position, dev=info.st_dev, ino=info.st_ino)
        confirmed = self.confirmed
        same_file = confirmed is not None and (confirmed.dev, confirmed.ino) == (info.st_dev, info.st_ino)
        if confirmed is None or (same_file and confirmed.offset == 0 and not confirmed.chain):
            self.confirmed = self.sent  # a start that now knows what it continues

    def close(self) -> None:
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None
