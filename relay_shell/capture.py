"""Bounded streaming capture shared by every executor.

Keeps the first and the last bytes of a stream up to a budget, and a SHA-256 and a byte count over every
byte produced. Memory is independent of how much the stream produces: the head stops growing at its
budget and the tail is trimmed as it grows. Rendering never splits a UTF-8 character at a cut.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# NUL is legal JSON but breaks many terminals and clients; show it as the visible symbol for NUL.
_NUL_SYMBOL = "\u2400"


@dataclass(frozen=True)
class CapturedText:
    text: str  # what the client sees: head, a gap marker and tail when cut
    produced_bytes: int  # every byte produced
    shown_bytes: int  # bytes of the stream that are in `text`
    head_bytes: int
    tail_bytes: int
    truncated: bool
    sha256: str  # digest of every byte produced


class BoundedCapture:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.head_budget = budget - budget // 2
        self.tail_budget = budget // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.digest.update(chunk)
        self.total += len(chunk)
        room = self.head_budget - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
            if not chunk:
                return
        if len(chunk) >= self.tail_budget:
            self.tail = bytearray(chunk[len(chunk) - self.tail_budget :])
            return
        self.tail += chunk
        # Trim only when the tail doubles, so a stream of small chunks costs amortised O(1) per byte.
        if len(self.tail) > 2 * self.tail_budget:
            del self.tail[: len(self.tail) - self.tail_budget]

    def result(self) -> CapturedText:
        tail = bytes(self.tail[len(self.tail) - self.tail_budget :]) if self.tail_budget else b""
        if self.total <= self.budget:
            whole = bytes(self.head) + bytes(self.tail)
            return CapturedText(
                text=decode_for_client(whole),
                produced_bytes=self.total,
                shown_bytes=len(whole),
                head_bytes=len(whole),
                tail_bytes=0,
                truncated=False,
                sha256=self.digest.hexdigest(),
            )
        head = utf8_safe_head(bytes(self.head))
        tail = utf8_safe_tail(tail)
        text = decode_for_client(head) + "\n…\n" + decode_for_client(tail)
        return CapturedText(
            text=text,
            produced_bytes=self.total,
            shown_bytes=len(head) + len(tail),
            head_bytes=len(head),
            tail_bytes=len(tail),
            truncated=True,
            sha256=self.digest.hexdigest(),
        )


def utf8_safe_head(data: bytes) -> bytes:
    """Drop an incomplete multi-byte character at the end of a head cut."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep walking back to the lead byte
            continue
        if byte >= 0xC0:
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if needed > back:
                return data[:-back]
        return data
    return data


def utf8_safe_tail(data: bytes) -> bytes:
    """Drop continuation bytes at the start of a tail cut (the rest of a character cut in half)."""
    index = 0
    while index < len(data) and index < 3 and (data[index] & 0xC0) == 0x80:
        index += 1
    return data[index:]


def decode_for_client(data: bytes) -> str:
    """Invalid UTF-8 becomes U+FFFD and NUL becomes a visible symbol; the digest keeps the raw bytes."""
    text = data.decode("utf-8", errors="replace")
    if "\x00" in text:
        text = text.replace("\x00", _NUL_SYMBOL)
    return text
