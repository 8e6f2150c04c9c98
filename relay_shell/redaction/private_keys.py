"""Private key blocks (PEM, OpenSSH, SSH2, PGP, PuTTY), the first pass of redaction: a whole block becomes
`[REDACTED PRIVATE KEY]`, an unterminated one to the end of the text."""

from __future__ import annotations

from relay_shell.redaction.pattern_compiler import compile_pattern
from relay_shell.redaction.values import keep_code

REDACTED_PRIVATE_KEY = "[REDACTED PRIVATE KEY]"

# The label is bounded ({0,40}), so an attempt does constant work; the END marker is then found with
# str.find from the BEGIN, and the search resumes after the block (or the text ends: an unterminated key
# is redacted to the end). Also matches `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----` and PGP key blocks.
_PRIVATE_KEY_START = compile_pattern(
    r"-{4,5} ?BEGIN ([A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?) ?-{4,5}|PuTTY-User-Key-File-[0-9]{1,3}:"
)
_PUTTY_LAST_LINE = "Private-MAC:"


def redact_private_keys(text: str) -> str:
    if "PRIVATE KEY" not in text and "PuTTY-User-Key-File-" not in text:
        return text
    pieces: list[str] = []
    position = 0
    while (start := _PRIVATE_KEY_START.search(text, position)) is not None:
        pieces.append(text[position : start.start()])
        block_start = start.start()
        label = start.group(1)
        if label is not None:
            end_marker = f"END {label}"
            found = text.find(end_marker, start.end())
            position = len(text) if found == -1 else found + len(end_marker)
            closing_limit = position + 6  # the " -----" after the label
            while position < min(closing_limit, len(text)) and text[position] in " -":
                position += 1
        else:
            found = text.find(_PUTTY_LAST_LINE, start.end())
            line_end = -1 if found == -1 else text.find("\n", found)
            position = len(text) if line_end == -1 else line_end
        # Code the shell runs inside the block's text stays (code.py); a key holds none.
        pieces.append(keep_code(text[block_start:position], REDACTED_PRIVATE_KEY))
    pieces.append(text[position:])
    return "".join(pieces)
