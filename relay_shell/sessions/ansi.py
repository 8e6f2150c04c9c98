"""Terminal escape sequences out, plain text in: what `strip_ansi` returns and what `until` matches.

Every alternative starts with a literal byte and consumes a bounded class run, so the scan is linear in the input.
"""

from __future__ import annotations

import re

# Every alternative starts with a literal byte (not a class): `re` then skips ahead to the next ESC, BEL, SO or
# SI at C speed instead of trying the whole alternation at every byte, which is 3-4 times faster on plain text
# (the usual case: a session's output is read, searched and shown many times).
_ESCAPES = re.compile(
    rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks, cwd reports
    rb"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    rb"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, modes
    rb"|\x1b[ -/]*[0-~]"  # other ESC sequences: charset selection, keypad modes, save/restore
    rb"|\x07|\x0e|\x0f"  # bell, shift out/in
)


def strip_escapes(data: bytes) -> bytes:
    """Remove escape sequences, keep line ends as they are (CRLF, lone CR)."""
    if b"\x1b" in data or b"\x07" in data or b"\x0e" in data or b"\x0f" in data:  # memchr: plain text skips the scan
        return _ESCAPES.sub(b"", data)
    return data


def strip_ansi(data: bytes) -> bytes:
    """Remove escape sequences and normalise CRLF to LF."""
    return strip_escapes(data).replace(b"\r\n", b"\n")
