"""History expansion in a typed line, as bash reads it (adr/0026): where `!…` or a leading `^old^new` would
make the shell run text from its history instead of what was typed, and the lines it could make from the
session's own history.

The terminals the server starts run bash with history expansion off (`+H`), but a line typed into a session
may reach any shell: one started later (`bash`, `su`, a pager's `!`), one re-enabled (`set -H`), a remote one.
So a line where expansion would happen is tier 2 whatever reads it, and the lines it may become, made from the
lines typed into the session, are classified as well (so `!!:1*` after `echo rm -rf /` asks for confirmation in
open mode). The shell's history can hold lines typed elsewhere (its history file, another shell): those cannot
be known, which the tier-2 floor covers.

Where expansion happens is over-approximated, never under: bash's rules with the default history characters
`!^#` (single quotes and a backslash inhibit it; `!` followed by a blank, `=` or end of line does not expand,
nor `!"` closing a double-quoted string, `[!…]`, `${!…}` and `$!`), checked against bash itself in
tests/integration/test_history_expansion.py. What bash would not expand but this reads as an expansion (an
unterminated quote, `!(` with extglob on, a comment) only costs a refusal.
"""

from __future__ import annotations

import re

HISTORY = (
    "history expansion (`!…`, `^old^new`): the shell runs a line from its history, not the line typed "
    "(the server's terminals start with it off: +H)"
)
MAX_CANDIDATES = 32  # lines of the session's history an expansion is tried against, the most recent first
MAX_SIZE = 4096  # a longer line with an expansion is not expanded here: the tier-2 floor holds for it

_EVENT = re.compile(
    r"!(?:(?P<last>!)|(?P<number>-?\d+)|\?(?P<search>[^?\n]*)\??|(?P<current>#)"
    r"|(?P<prefix>[^\s:^$*%\-=(\"'`;&|<>!]+)|(?=[:^$*%-]))"
)
_WORD = re.compile(r"(?::?(?P<short>[\^$*%])|:(?P<range>\d*-\d*|\d+\*?|\d+))")
_MODIFIER = re.compile(
    r":(?P<global>[ga]?)(?:s(?P<delim>[^\s])(?P<old>.*?)(?P=delim)(?P<new>.*?)(?:(?P=delim)|$)|(?P<plain>[htreqpx&]))"
)
_HISTORY_WORD = re.compile(r"""(?:[^\s'"\\;&|<>()]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+|[;&|<>()]+""")


def expansion_points(line: str) -> list[int]:
    """Where in one typed line bash would start a history expansion."""
    points = [0] if line.lstrip().startswith("^") else []
    in_double = False
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char == "'" and not in_double:
            end = line.find("'", index + 1)
            index = index + 1 if end < 0 else end + 1  # unterminated: read on, as if unquoted
            continue
        if char == '"':
            in_double = not in_double
        elif char == "!" and _expands(line, index, in_double):
            points.append(index)
        index += 1
    return points


def _expands(line: str, index: int, in_double: bool) -> bool:
    """bash's exceptions (lib/readline/histexpand.c, bashhist.c: bash_history_inhibit_expansion)."""
    following = line[index + 1 : index + 2]
    if following in ("", " ", "\t", "\n", "\r", "="):
        return False
    if in_double and following == '"':
        return False
    if index > 0 and line[index - 1] == "[" and "]" in line[index + 1 :]:
        return False
    if index > 1 and line[index - 2 : index] == "${" and "}" in line[index + 1 :]:
        return False
    return not (index > 1 and line[index - 1] == "$")


def expansions(line: str, points: list[int], history: list[str]) -> list[str]:
    """The lines `line` may become, each of its expansions taken from one line of the session's history (every
    one of the most recent MAX_CANDIDATES that the event could name)."""
    if len(line) > MAX_SIZE or not history:
        return []
    recent = list(dict.fromkeys(reversed(history)))[:MAX_CANDIDATES]
    results: list[str] = []
    for candidate in recent:
        made = _expand_with(line, points, candidate)
        if made is not None and made != line and made not in results:
            results.append(made)
    return results


def _expand_with(line: str, points: list[int], event_line: str) -> str | None:
    """`line` with every expansion taken from `event_line`; None when an event could not name it."""
    if points and points[0] == 0 and line.lstrip().startswith("^"):
        return _quick_substitution(line.lstrip(), event_line)
    parts: list[str] = []
    position = 0
    for point in points:
        if point < position:
            continue
        event = _EVENT.match(line, point)
        if event is None:
            continue
        if not _names(event, event_line):
            return None
        end = event.end()
        words = _HISTORY_WORD.findall(event_line)
        selected, end = _designated(line, end, words, event_line)
        selected, end = _modified(line, end, selected)
        parts += [line[position:point], selected]
        position = end
    return "".join([*parts, line[position:]])


def _names(event: re.Match[str], event_line: str) -> bool:
    """Whether the event could name `event_line` (any line for `!!`, `!n`, `!-n`: the shell's numbering is not
    the session's)."""
    if event.group("prefix") is not None:
        return event_line.startswith(event.group("prefix"))
    if event.group("search") is not None:
        return event.group("search") in event_line
    return event.group("current") is None


def _designated(line: str, end: int, words: list[str], event_line: str) -> tuple[str, int]:
    designator = _WORD.match(line, end)
    if designator is None:
        return event_line, end
    short, word_range = designator.group("short"), designator.group("range")
    last = len(words) - 1
    if short == "^":
        chosen = words[1:2]
    elif short == "$":
        chosen = words[-1:]
    elif short in ("*", "%"):
        chosen = words[1:]
    elif word_range.endswith("*"):
        chosen = words[int(word_range[:-1]) :]
    elif "-" in word_range:
        first, _, second = word_range.partition("-")
        chosen = words[int(first or 0) : (int(second) if second else last) + 1]
    else:
        chosen = words[int(word_range) : int(word_range) + 1]
    return " ".join(chosen), designator.end()


def _modified(line: str, end: int, text: str) -> tuple[str, int]:
    substitution: tuple[str, str] | None = None
    while (modifier := _MODIFIER.match(line, end)) is not None:
        end = modifier.end()
        plain = modifier.group("plain")
        if modifier.group("delim") is not None:
            substitution = (modifier.group("old"), modifier.group("new"))
        if plain in ("h", "t", "r", "e"):
            text = _path_part(text, plain)
        elif plain in ("q", "x"):
            text = "'" + text.replace("'", "'\\''") + "'"
        if substitution is not None and (modifier.group("delim") is not None or plain == "&"):
            count = -1 if modifier.group("global") else 1
            text = text.replace(substitution[0], substitution[1].replace("&", substitution[0]), count)
    return text, end


def _path_part(text: str, modifier: str) -> str:
    head, _, tail = text.rpartition("/")
    stem, dot, suffix = text.rpartition(".")
    return {"h": head or text, "t": tail, "r": stem if dot else text, "e": dot + suffix if dot else ""}[modifier]


def _quick_substitution(line: str, event_line: str) -> str | None:
    """`^old^new^rest`: the previous line with the first `old` made `new`, then `rest`."""
    old, _, remainder = line[1:].partition("^")
    new, _, rest = remainder.partition("^")
    if not old or old not in event_line:
        return None
    return event_line.replace(old, new, 1) + rest
