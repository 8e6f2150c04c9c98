"""Values: one shell-like word after a name (`NAME=<value>`, `--flag <value>`, `"key": <value>`), matched in time
linear in its length, and how a matched value is masked (its quotes kept, or only the password of `user:password`).
"""

from __future__ import annotations

import re

from relay_shell.redaction.code import CLOSE, CLOSE_QUOTED, MARK_CLASS, MARKS, OPEN, OPEN_SECRET
from relay_shell.redaction.pattern_compiler import compile_pattern

REDACTED = "[REDACTED]"

# A word is a possessive loop over pieces, and no piece can fail after scanning: quoted strings and `${…}` /
# `$(…)` / backquotes have an *optional* closer, so an unterminated one simply runs to the end of the line
# (as the shell would read it). Nothing follows the loop, so a match never backtracks: it is linear in its
# own length, and callers resume after it. `[REDACTED]` comes first so already-redacted text is one piece
# (`]` otherwise ends a word). Unquoted pieces end at whitespace and at characters that end a shell word
# or a value in a query string, JSON object or connection string (`;&|,<>)}]` and backquote).
# Code the shell runs (code.py's markers) ends a value: no piece holds a marker.
_WORD_PIECE = (
    r"\[REDACTED\]"
    r"|\$\{[^}\n" + MARK_CLASS + r"]*+\}?\}?"  # ${VAR}, ${{ secrets.X }}
    r"|\([^)\n" + MARK_CLASS + r"]*+\)?"  # f(x): keeps the ')' with its '('
    r"|`[^`\n" + MARK_CLASS + r"]*+`?"  # a backquote that is not code (in single quotes: data)
    r"|\\[^\n" + MARK_CLASS + r"]"  # backslash escape, including \" inside a JSON-encoded string
    # A run of plain characters in one step (a loop iteration per character costs the matcher a saved
    # state each); `$`, `(` and `[` may start a piece above, so they are single steps of their own.
    r"|[^\s\"'`;&|,<>)}\]\\$(\[" + MARK_CLASS + r"]++"
    r"|[$(\[]"
)
_DOUBLE_QUOTED_REST = r'(?:[^"\\\n' + MARK_CLASS + r"]++|\\[^" + MARK_CLASS + r"])*+\"?"
_SINGLE_QUOTED_REST = r"[^'\n" + MARK_CLASS + r"]*+'?"
# Inside a word, a quote followed by whitespace, a separator or the end closes an enclosing string
# (`echo "token: $TOKEN"`, `["password=x", "y"]`) instead of opening a quoted piece.
AFTER_CLOSING_QUOTE = r"(?:[\s,;&|)}\]]|\Z)"
_OPENS = r"(?!" + AFTER_CLOSING_QUOTE + ")"
_MORE_PIECES = r'(?:"' + _OPENS + _DOUBLE_QUOTED_REST + "|'" + _OPENS + _SINGLE_QUOTED_REST + "|" + _WORD_PIECE + ")*"
VALUE = compile_pattern(
    r'(?:"' + _DOUBLE_QUOTED_REST + "|'" + _SINGLE_QUOTED_REST + "|" + _WORD_PIECE + ")" + _MORE_PIECES
)
# The rest of a value after code that stood inside its double quotes (`"abc$(x)def"`): first the rest of the
# quoted string, then whatever the word goes on with.
_VALUE_IN_QUOTES = compile_pattern(_DOUBLE_QUOTED_REST + _MORE_PIECES)

_QUOTES = ('\\"', '"', "'")


def mask(value: str) -> str:
    """REDACTED for a value, keeping the quotes of a fully quoted value so JSON and shell text stay readable."""
    for quote in _QUOTES:
        if len(value) >= 2 * len(quote) and value.startswith(quote) and value.endswith(quote):
            if value == quote * 2:
                return value  # an empty string hides nothing
            return f"{quote}{REDACTED}{quote}"
    return REDACTED


def mask_user_password(word: str) -> str | None:
    """For `user:password` (curl -u, httpie -a) redact only the password; None when there is none."""
    user, colon, password = word.partition(":")
    if not colon or not password:
        return None  # `curl -u user` prompts for the password
    # A quote left open in the user part ('me:pw') is closed again, so the text stays balanced.
    closing_quote = "".join(quote for quote in "\"'" if user.count(quote) % 2)
    return f"{user}:{REDACTED}{closing_quote}"


def mask_piece(piece: str, replacement: str = REDACTED) -> str:
    """A literal part of a value next to code, masked with its quotes and escapes kept (`"abc` -> `"[REDACTED]`,
    `a'b c'd` -> `[REDACTED]'[REDACTED]'[REDACTED]`): the text keeps the quoting the shell read, so code found in
    it is found again in the redacted text (redact(redact(x)) == redact(x)). Nothing to mask in only quotes."""
    parts = _QUOTING.split(piece)
    return "".join(part if index % 2 or not part else replacement for index, part in enumerate(parts))


_QUOTING = compile_pattern(r"(\\[\s\S]|[\"'])")


def secret_value_at(text: str, start: int) -> tuple[int, str] | None:
    """The value starting at start, masked, and where it ends; None when there is none. A value ends where code
    starts (`TOKEN="abc$(cmd)…`): the literal part is masked, the code's opening marker is marked as a secret's
    (so `redact_secret_code_data` reads it) and the code itself is left to the passes, as text outside a value."""
    value = VALUE.match(text, start)
    end = start if value is None else value.end()
    if end < len(text) and text[end] in (OPEN, OPEN_SECRET):
        return end + 1, ("" if value is None else mask_piece(value.group())) + OPEN_SECRET
    if value is None:
        return None
    return end, mask(value.group())


def value_after_code(text: str, start: int) -> tuple[int, str] | None:
    """The literal rest of a secret's value after its code ended at start - 1 (`"abc$(x)def"`: `def"`), masked."""
    closing = text[start - 1]
    if closing == CLOSE_QUOTED:
        rest = _VALUE_IN_QUOTES.match(text, start)
        end = start if rest is None else rest.end()
    elif closing == CLOSE:
        rest = VALUE.match(text, start)
        end = start if rest is None else rest.end()
    else:
        return None
    replacement = mask_piece(text[start:end])
    if end < len(text) and text[end] in (OPEN, OPEN_SECRET):
        return end + 1, replacement + OPEN_SECRET
    return (end, replacement) if end > start else None


def keep_code(secret: str, replacement: str = REDACTED) -> str:
    """`replacement` for a secret a pattern matched; if the match took in code (code.py's markers), only the
    literal parts are replaced and the code stays. A part is literal at the outermost level the match reaches
    (it may start inside code, or end inside it)."""
    if secret.isascii() or not any(mark in secret for mark in MARKS):  # isascii: O(1), and markers are not
        return replacement
    pieces = _SPLIT_MARKS.split(secret)
    depths: list[int] = []
    depth = 0
    for index, piece in enumerate(pieces):
        if index % 2:
            depth += 1 if piece in (OPEN, OPEN_SECRET) else -1
        depths.append(depth)
    outermost = min(depths)
    out: list[str] = []
    for index, piece in enumerate(pieces):
        if index % 2:
            opens_at_literal = piece in (OPEN, OPEN_SECRET) and depths[index] == outermost + 1
            out.append(OPEN_SECRET if opens_at_literal else piece)
        elif depths[index] == outermost and piece:
            out.append(mask_piece(piece, replacement))
        else:
            out.append(piece)
    return "".join(out)


_SPLIT_MARKS = compile_pattern("([" + MARK_CLASS + "])")


# Inside code that stands in a secret's place (`TOKEN="$(echo c2VjcmV0 | base64 -d)"`, `$(printf %s pw)`,
# `$(base64 -d <<<c2Vj)`), the words echo and printf print and a here-string's word are the secret's text: masked.
# The programs, their options and everything else stay. The words end where the simple command ends; quoted
# pieces are read whole. Possessive pieces, one pass over each region: linear.
_SECRET_DATA = compile_pattern(
    r"((?<![\w.-])(?:echo|printf)(?:[ \t]++-[A-Za-z]++)*+[ \t]++|<<<[ \t]*+)"
    r"((?:'[^'\n" + MARK_CLASS + r"]*+'?|\"(?:[^\"\\\n" + MARK_CLASS + r"]|\\[^" + MARK_CLASS + r"])*+\"?"
    r"|\\[^" + MARK_CLASS + r"]|[^;&|<>()\n`'\"\\" + MARK_CLASS + r"])++)"
)


def redact_secret_code_data(text: str) -> str:
    if OPEN_SECRET not in text:
        return text
    pieces: list[str] = []
    copied = 0
    depth = 0
    region_start = 0
    for marker in _SPLIT_MARKS.finditer(text):
        if marker.group() in (OPEN, OPEN_SECRET):
            if depth == 0 and marker.group() == OPEN_SECRET:
                region_start = marker.end()
                depth = 1
            elif depth > 0:
                depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                pieces.append(text[copied:region_start])
                pieces.append(_SECRET_DATA.sub(_mask_data, text[region_start : marker.start()]))
                copied = marker.start()
    if depth > 0:
        pieces.append(text[copied:region_start])
        pieces.append(_SECRET_DATA.sub(_mask_data, text[region_start:]))
        copied = len(text)
    pieces.append(text[copied:])
    return "".join(pieces)


def _mask_data(match: re.Match[str]) -> str:
    words = match.group(2)
    stripped = words.rstrip(" \t")
    return match.group(1) + mask(stripped) + words[len(stripped) :]
