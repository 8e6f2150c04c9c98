"""The report's data, compressed and carried inside the HTML page as text (adr/0023).

Each blob is zlib-compressed JSON (the browser's DecompressionStream("deflate") reads it: no library, no request)
placed in a `<script type="application/x-relay-blob">` element. The page is windows-1252, where every byte is one
character, so compressed bytes go in almost as they are: base64 would add a third (a 100,000-call report would miss
its 25 MiB bound), this adds about 1.6 %. Four bytes cannot stand for themselves in a script element and are
escaped: NUL (the HTML parser makes it U+FFFD), CR (it becomes LF), `<` (it could close the element) and the
escape byte itself. report.js undoes both steps.

Blobs are written to a spool file as they are made, so memory holds one chunk of calls at a time, not the report.
"""

from __future__ import annotations

import re
import zlib
from typing import IO, Any

import orjson

ESCAPE = 0x7E  # "~"
# byte -> the character after the escape byte that stands for it
_ESCAPED = {0x00: b"0", 0x0D: b"1", 0x3C: b"2", ESCAPE: b"3"}
_HEX = re.compile(r"[0-9a-f]{64}")
# The records' fields that hold a SHA-256 (runner, sessions, confirmation, log repair, checkpoints).
DIGEST_FIELDS = (
    "output_sha256",
    "raw_sha256",
    "stderr_sha256",
    "transcript_sha256",
    "confirmation",
    "removed_sha256",
    "marked_sha256",
    "head",
)
COMPRESSION_LEVEL = 6  # level 9 makes the largest reports ~4 % smaller and ~2x slower to write


def encode(data: bytes) -> bytes:
    """Compressed bytes as windows-1252 text a script element carries unchanged."""
    escape = bytes([ESCAPE])
    encoded = data.replace(escape, escape + _ESCAPED[ESCAPE])
    for byte, stand_in in _ESCAPED.items():
        if byte != ESCAPE:
            encoded = encoded.replace(bytes([byte]), escape + stand_in)
    return encoded


def decode(text: bytes) -> bytes:
    """The inverse of `encode` (the tests use it; the page decodes in report.js)."""
    byte_of = {code: bytes([byte]) for byte, code in _ESCAPED.items()}
    out = bytearray()
    position = 0
    while (found := text.find(bytes([ESCAPE]), position)) >= 0:
        out += text[position:found] + byte_of[text[found + 1 : found + 2]]
        position = found + 2
    return bytes(out + text[position:])


def element(blob_id: str, data: bytes) -> bytes:
    return b'<script type="application/x-relay-blob" id="' + blob_id.encode() + b'">' + encode(data) + b"</script>\n"


def compressed_json(value: Any) -> bytes:
    return zlib.compress(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS), COMPRESSION_LEVEL)


class StreamedArray:
    """A JSON array compressed as its items arrive (the timeline's rows): memory holds the compressed bytes only."""

    def __init__(self) -> None:
        self.compressor = zlib.compressobj(COMPRESSION_LEVEL)
        self.parts: list[bytes] = [self.compressor.compress(b"[")]
        self.count = 0

    def append(self, item: Any) -> None:
        encoded = orjson.dumps(item)
        self.parts.append(self.compressor.compress(encoded if self.count == 0 else b"," + encoded))
        self.count += 1

    def finish(self) -> bytes:
        self.parts.append(self.compressor.compress(b"]"))
        self.parts.append(self.compressor.flush())
        return b"".join(self.parts)


class ChunkedDetails:
    """Each call's records, CHUNK calls to a blob (`d0`, `d1`, …), written to the spool as each chunk fills: the
    page decompresses only the chunk of the call it shows.

    SHA-256 digests are most of a record that cannot be compressed, and as hex text inside JSON they take ~45 bytes
    each after compression. So each chunk keeps its digests apart, as their 32 raw bytes (blob `h0`, `h1`, …, not
    compressed): a digest field (DIGEST_FIELDS, or an exec trace's `sha256`) holds null instead, and the record's
    `_digests` names those fields. The digests are in the order the chunk's records and each record's `_digests`
    name them. (A record's top-level names are the server's own, so no client can forge `_digests`.)"""

    CHUNK = 512

    def __init__(self, spool: IO[bytes]) -> None:
        self.spool = spool
        self.pending: list[Any] = []
        self.digests = bytearray()
        self.chunks = 0
        self.count = 0

    def append(self, records: list[dict[str, Any]]) -> int:
        """Add a call's records; returns its index (the row's)."""
        self.pending.append([self._digests_apart(record) for record in records])
        self.count += 1
        if len(self.pending) == self.CHUNK:
            self.flush()
        return self.count - 1

    def _digests_apart(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record with its digests moved to the chunk's table (a copy: the summary reads the record too)."""
        apart = dict(record)
        moved = []
        for name in DIGEST_FIELDS:
            value = record.get(name)
            if type(value) is str and len(value) == 64 and _HEX.fullmatch(value):
                self.digests += bytes.fromhex(value)
                apart[name] = None
                moved.append(name)
        execs = record.get("execs")
        if isinstance(execs, dict) and isinstance(execs.get("sha256"), str) and _HEX.fullmatch(execs["sha256"]):
            self.digests += bytes.fromhex(execs["sha256"])
            apart["execs"] = {**execs, "sha256": None}
            moved.append("execs.sha256")
        if moved:
            apart["_digests"] = moved
        return apart

    def flush(self) -> None:
        if self.pending:
            self.spool.write(element(f"d{self.chunks}", compressed_json(self.pending)))
            self.spool.write(element(f"h{self.chunks}", bytes(self.digests)))
            self.chunks += 1
            self.pending = []
            self.digests = bytearray()
