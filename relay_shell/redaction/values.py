"""Values: one shell-like word after a name (`NAME=<value>`, `--flag <value>`, `"key": <value>`), matched in time
linear in its length, and how a matched value is masked (its quotes kept, or only the password of `user:password`).
"""

from __future__ import annotations

from relay_shell.redaction.pattern_compiler import compile_pattern

REDACTED = "[REDACTED]"

# A word is a possessive loop over pieces, and no piece can fail after scanning: quoted strings and `${…}` /
# `$(…)` / backquotes have an *optional* closer, so an unterminated one simply runs to the end of the line
# (as the shell would read it). Nothing follows the loop, so a match never backtracks: it is linear in its
# own length, and callers resume after it. `[REDACTED]` comes first so already-redacted text is one piece
# (`]` otherwise ends a word). Unquoted pieces end at whitespace and at characters that end a shell word
# or a value in a query string, JSON object or connection string (`;&|,<>)}]` and backquote).
_WORD_PIECE = (
    r"\[REDACTED\]"
    r"|\$\{[^}\n]*+\}?\}?"  # ${VAR}, ${{ secrets.X }}
    r"|\([^)\n]*+\)?"  # $(command), f(x): keeps the ')' with its '('
    r"|`[^`\n]*+`?"  # `command`
    r"|\\[^\n]"  # backslash escape, including \" inside a JSON-encoded string
    # A run of plain characters in one step (a loop iteration per character costs the matcher a saved
    # state each); `$`, `(` and `[` may start a piece above, so they are single steps of their own.
    r"|[^\s\"'`;&|,<>)}\]\\$(\[]++"
    r"|[$(\[]"
)
_DOUBLE_QUOTED_REST = r'(?:[^"\\\n]++|\\.)*+"?'
_SINGLE_QUOTED_REST = r"[^'\n]*+'?"
# Inside a word, a quote followed by whitespace, a separator or the end closes an enclosing string
# (`echo "token: $TOKEN"`, `["password=x", "y"]`) instead of opening a quoted piece.
AFTER_CLOSING_QUOTE = r"(?:[\s,;&|)}\]]|\Z)"
_OPENS = r"(?!" + AFTER_CLOSING_QUOTE + ")"
VALUE = compile_pattern(
    r'(?:"' + _DOUBLE_QUOTED_REST + "|'" + _SINGLE_QUOTED_REST + "|" + _WORD_PIECE + ")"
    r'(?:"' + _OPENS + _DOUBLE_QUOTED_REST + "|'" + _OPENS + _SINGLE_QUOTED_REST + "|" + _WORD_PIECE + ")*"
)

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
