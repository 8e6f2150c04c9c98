"""Session transcripts (asciicast v2, RELAY_SHELL_RECORD_DIR) matched to the `session:end` record that names them.

The record carries the SHA-256 of the file the server wrote (`transcript_sha256`). The file `<session_id>.cast` in
the directory given with --record-dir is read and hashed: the same digest means it is the transcript recorded, and
it goes into the page (played there, or shown as text); another digest means it was altered or replaced after the
session ended, which the banner says in red. Files are hashed as a stream; only those small enough are embedded.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from relay_shell.report.blobs import COMPRESSION_LEVEL, element

_SESSION_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")  # what the server names sessions, and more
MAX_EMBEDDED_BYTES = 2 * 1024 * 1024  # one transcript in the page; a larger one is linked
MAX_TOTAL_BYTES = 32 * 1024 * 1024  # all transcripts in the page together


@dataclass(frozen=True)
class Match:
    session_id: str
    status: str  # matched, altered, missing, not recorded, no directory, unreadable
    path: str | None = None
    uri: str | None = None  # the file's file:// address, for the page's link
    size: int | None = None
    blob: str | None = None  # the element holding it in the page, when embedded
    digest: str | None = None  # the file's digest, when it was read


class Transcripts:
    def __init__(self, directory: Path | None, spool: IO[bytes]) -> None:
        self.directory = directory
        self.spool = spool
        self.embedded_bytes = 0
        self.matches: list[Match] = []

    def match(self, session_id: str, recorded: object) -> Match:
        """The transcript of `session_id`, checked against the digest its session:end record carries."""
        found = self._match(session_id, recorded)
        self.matches.append(found)
        return found

    def _match(self, session_id: str, recorded: object) -> Match:
        if not isinstance(recorded, str) or not recorded:
            return Match(session_id, "not recorded")
        if self.directory is None:
            return Match(session_id, "no directory")
        if not _SESSION_ID.fullmatch(session_id):  # a record names a file in the directory, nothing else
            return Match(session_id, "missing")
        path = (self.directory / f"{session_id}.cast").resolve()
        where, uri = str(path), path.as_uri()
        try:
            digest, size, data = _read(path, MAX_EMBEDDED_BYTES)
        except FileNotFoundError:
            return Match(session_id, "missing", where, uri)
        except OSError:
            return Match(session_id, "unreadable", where, uri)
        if digest != recorded:
            return Match(session_id, "altered", where, uri, size, digest=digest)
        blob = None
        if data is not None and self.embedded_bytes + size <= MAX_TOTAL_BYTES:
            blob = f"t{len(self.matches)}"
            self.spool.write(element(blob, zlib.compress(data, COMPRESSION_LEVEL)))
            self.embedded_bytes += size
        return Match(session_id, "matched", where, uri, size, blob, digest)


def _read(path: Path, keep_up_to: int) -> tuple[str, int, bytes | None]:
    """The file's SHA-256 and size, and its bytes when there are at most `keep_up_to` (hashed as they are kept,
    so the page holds exactly the bytes whose digest matched)."""
    digest = hashlib.sha256()
    kept = bytearray()
    size = 0
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            size += len(block)
            if size <= keep_up_to:
                kept += block
    return digest.hexdigest(), size, bytes(kept) if size <= keep_up_to else None
