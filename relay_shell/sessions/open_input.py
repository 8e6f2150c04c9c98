"""Input still inside one construct: a shell reading `echo 'a` (Enter) waits for the quote to close, or after
`cat <<EOF` for the line `EOF`, and Python
reading a line that opens a triple-quoted string waits for it to end, so the next line is read as part of the same
command. The policy classifies a line that continues such input together with what it continues (review B2:
`echo 'a`, then `echo x'; rm -rf DIR; echo 'y` ran `rm -rf DIR`, each line classified alone).
"""

from __future__ import annotations

from relay_shell.policy.shell_tokens import tokenize
from relay_shell.policy.simple_commands import Tokens

MAX_OPEN = 1024 * 1024  # characters of open input followed; past it the construct cannot be classified
_TRIPLE_QUOTES = ('"' * 3, "'" * 3)


def still_open(text: str, shell_open: bool | None = None) -> bool:
    """Whether a shell (a quote or a substitution never closed, a here-document before its delimiter) or Python (a
    triple-quoted string never closed) reading `text` is still inside one construct at its end. `shell_open`: what
    `shell_left_open` said of this very text's tokens when it was classified (then it is not tokenized again), or
    None."""
    if any(text.count(quotes) % 2 for quotes in _TRIPLE_QUOTES):
        return True
    return shell_left_open(tokenize(text, [])) if shell_open is None else shell_open


def shell_left_open(tokens: Tokens) -> bool:
    """Whether the shell text these are the tokens of leaves a construct open at its end."""
    # A here-document's body is data up to its delimiter line: a quote in it opens nothing (review P2), and the
    # lines up to the delimiter are one command with the line that started it.
    return bool(tokens.unterminated) or tokens.heredoc_open
