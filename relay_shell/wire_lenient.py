"""What a message the transport refuses shows of the tools/calls in it (wire.py, adr/0016): never to serve it,
only so that every tools/call that reached the server has a record.

A message JSON-RPC cannot read may still hold calls: after a byte order mark, a NUL, a no-break space or a
comment; in UTF-16; followed by garbage; in a batch, nested or not; or with its method spelled `tools\\/call` or
`tools/\\u0063all`. Two readings, each forgiving:

- `lenient_values`: the JSON value the message may be, read in its detected encoding (UTF-8, -16 or -32) from
  one of its first `{` or `[`, whatever comes before or after it;
- `count_tool_calls` and `CallScanner`: the `"method": "tools/call"` members in the text, in any JSON spelling
  of the key and the value (escapes, whitespace), over a whole message or one read in chunks (too long to
  keep; in UTF-8 or UTF-16, not UTF-32). A member that lenient reading could not place is recorded as a call
  whose tool is unknown.
"""

from __future__ import annotations

import codecs
import functools
import json
import re
from typing import Any

BOM = b"\xef\xbb\xbf"
LENIENT_MAX_BYTES = 16 * 1024 * 1024  # a longer message is only scanned: each reading attempt would parse it all
LENIENT_STARTS = 4  # `{` or `[` tried as the start of the value, in each encoding
LENIENT_SCAN_CHARACTERS = 4096  # among the first characters (what comes before a message is junk, not a message)
_WORDS_KEPT = 3  # a member's key, colon and value: what of one split between two chunks the first may hold
_WORD_KEPT = 256  # bytes of each (> the longest spelling of the key or the value)


def _spelled(word: str) -> bytes:
    """A regex for `word` in a JSON string, each character as itself or as a `\\uXXXX` escape (either case of
    its hex digits), `/` also as `\\/`."""
    parts = []
    for character in word:
        escape = b"\\\\u" + b"".join(
            b"[" + digit.encode() + digit.upper().encode() + b"]" if digit.isalpha() else digit.encode()
            for digit in f"{ord(character):04x}"
        )
        options = [re.escape(character.encode()), escape] + ([b"\\\\/"] if character == "/" else [])
        parts.append(b"(?:" + b"|".join(options) + b")")
    return b"".join(parts)


@functools.cache
def _member() -> re.Pattern[bytes]:
    """`"method"`, `:` and `"tools/call"` with any JSON whitespace between, in UTF-8; compiled on the first refused
    message, not at every start."""
    space = b"[ \\t\\r\\n]*"
    return re.compile(b'"' + _spelled("method") + b'"' + space + b":" + space + b'"' + _spelled("tools/call") + b'"')


def count_tool_calls(text: str) -> int:
    """`"method": "tools/call"` members in the text, in any spelling."""
    return len(_member().findall(text.encode("utf-8", errors="surrogatepass")))


class CallScanner:
    """Counts `"method": "tools/call"` members in a message read in chunks, in bounded memory: in UTF-8, and in
    UTF-16 when the message's first bytes say so (as JSON's own detection reads them; decoded as it streams).

    Each chunk is read after what was kept of the one before: its last three whitespace-separated words, each
    cut to its last bytes, one space between them, which is all a member split between two chunks can have
    begun with (its key, its colon, the start of its value), however long the whitespace between those was."""

    def __init__(self) -> None:
        self.head = b""  # the first bytes, until there are enough to tell the encoding
        self.carry: dict[str, bytes] = {}
        self.decoders: dict[str, Any] = {}
        self.count = 0

    def feed(self, chunk: bytes) -> None:
        if not self.carry:
            self.head += chunk
            if len(self.head) < 4:
                return
            chunk, self.head = self.head, b""
            encodings = ["utf-8", *_utf16(chunk)]
            self.carry = dict.fromkeys(encodings, b"")
            self.decoders = {encoding: codecs.getincrementaldecoder(encoding)("replace") for encoding in encodings[1:]}
        self.count += max(self._read(encoding, chunk) for encoding in self.carry)

    def _read(self, encoding: str, chunk: bytes) -> int:
        """The members that end in `chunk`, read in one encoding (as UTF-8: a UTF-16 chunk is decoded first)."""
        if encoding != "utf-8":
            chunk = self.decoders[encoding].decode(chunk).encode("utf-8", errors="surrogatepass")
        carry = self.carry[encoding]
        window = carry + chunk
        seen = 0
        if b"method" in window or b"\\u00" in window:  # any spelling of the key holds one: else no regex
            seen = sum(1 for member in _member().finditer(window) if member.end() > len(carry))
        words = [word[-_WORD_KEPT:] for word in window.rsplit(maxsplit=_WORDS_KEPT)[-_WORDS_KEPT:]]
        self.carry[encoding] = b" ".join(words) + (b" " if window[-1:].isspace() else b"")
        return seen

    def finish(self) -> int:
        """The count, once the message has ended (a message shorter than four bytes is read as it is)."""
        if self.head:
            head, self.head = self.head, b""
            self.carry = {"utf-8": b""}
            self.count += self._read("utf-8", head)
        return self.count


def _utf16(head: bytes) -> list[str]:
    """The UTF-16 byte order a message's first bytes show, if they show one."""
    encoding = json.detect_encoding(head[:4])
    if encoding == "utf-16":  # after a byte order mark
        encoding = "utf-16-le" if head.startswith(b"\xff\xfe") else "utf-16-be"
    return [encoding] if encoding in ("utf-16-le", "utf-16-be") else []


def lenient_values(data: bytes, decoder: json.JSONDecoder) -> list[tuple[Any, str, str]]:
    """The JSON values a message read leniently may be, from each of its first few `{` or `[` in each encoding it
    may be in: (the value, the text before it, the text after it), in that order."""
    if len(data) > LENIENT_MAX_BYTES:
        return []
    values = []
    for text in texts_of(data):
        starts = [match.start() for match in re.finditer(r"[{\[]", text[:LENIENT_SCAN_CHARACTERS])][:LENIENT_STARTS]
        for start in starts:
            try:
                value, end = decoder.raw_decode(text, start)
            except (ValueError, RecursionError):
                continue
            values.append((value, text[:start], text[end:]))
    return values


def texts_of(data: bytes) -> list[str]:
    """The message as text in the encodings it may be in: UTF-8 (a byte order mark dropped), and the one JSON's
    rules detect from its first bytes when that is another."""
    texts = [data.removeprefix(BOM).decode("utf-8", errors="replace")]
    encoding = json.detect_encoding(data)
    if encoding not in ("utf-8", "utf-8-sig"):
        texts.append(data.decode(encoding, errors="replace").removeprefix("\ufeff"))
    return texts
