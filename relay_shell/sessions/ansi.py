"""Terminal escape sequences out, plain text in: what `strip_ansi` returns and what `until` matches.

Every alternative starts at ESC and consumes a bounded class run, so the scan is linear in the input.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(
    rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks, cwd reports
    rb"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    rb"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, modes
    rb"|\x1b[ -/]*[0-~]"  # other ESC sequences: charset selection, keypad modes, save/restore
    rb"|[\x07\x0e\x0f]"  # bell, shift out/in
)


def strip_escapes(data: bytes) -> bytes:
    """Remove escape sequences, keep line ends as they are (CRLF, lone CR)."""
    return _ESCAPES.sub(b"", data)


def strip_ansi(data: bytes) -> bytes:
    """Remove escape sequences and normalise CRLF to LF."""
    return _ESCAPES.sub(b"", data).replace(b"\r\n", b"\n")
