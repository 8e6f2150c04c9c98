"""What the shell tokenizer (shell_tokens.py) hands on: the simple commands of a text, with their words,
redirections, here-documents and assignments, and what else the text holds (arithmetic, a quote left open, a
`$'…'` that sh and bash read differently, names it sets).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Command:
    words: list[str] = field(default_factory=list)
    dynamic: list[bool] = field(default_factory=list)  # word contains an expansion ($X, $(…), `…`)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    piped_into: bool = False  # stdin comes from a pipe
    heredoc: str | None = None  # here-document body fed to this command
    # NAME=value words before the command word (or alone): (name, value, value has an expansion).
    assignments: list[tuple[str, str, bool]] | None = None
    # Words with unquoted glob (`*?[`) or brace characters: index -> MARK_GLOB | MARK_BRACE.
    marks: dict[int, int] | None = None
    # Words with a parameter expansion outside quotes (`$x`, `${x}`, `$*`): their values are split on IFS.
    unquoted: set[int] | None = None


@dataclass
class Tokens:
    commands: list[Command]
    arithmetic: list[str]  # the text of every `$((…))`, `((…))`
    unterminated: list[str]  # the text after a quote or substitution that is never closed
    ansi_c: bool  # a `$'…'` was read as bash reads it: POSIX sh reads it otherwise
    sets_names: bool  # a command assigns or sets variables, aliases or hashed names
    heredoc_open: bool = False  # a here-document whose delimiter line has not come yet (the shell reads on)
