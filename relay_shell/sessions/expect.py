"""`until` patterns: validation, and the search over a session's new output.

Patterns are Python regular expressions (MULTILINE, so `^`/`$` work per line) matched against the output
with terminal escape sequences removed and CRLF and lone CR read as line ends, so a coloured prompt
matches `^\\$ $`. A pattern that names a carriage return (`42\\r\\n`, pexpect style) is also tried against
the output with its CRs kept, as the terminal sent it.
The terminal echoes what was typed before the program reads it; when the new output starts with that
echo, the search starts after it, so a pattern that also appears in the input does not match the echo.
It starts on the line end that closes the echoed line, not after it: that line end is also the line break
before the answer, so `\\n42\\n` and `^42$` match the answer as they would in the terminal stream.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from relay_shell.errors import ArgumentError, ToolError
from relay_shell.sessions.ansi import strip_ansi, strip_escapes

MAX_PATTERNS = 16
MAX_PATTERN_LENGTH = 1024
MAX_EXPANSION = 32768  # compiled steps of all `until` patterns together (see _expansion): a few MiB at most
# The search looks at most this far back from the newest byte: enough for any prompt or answer line,
# and it keeps each wake-up O(1) in the session's output volume.
SEARCH_WINDOW = 32 * 1024
# A pattern that backtracks catastrophically is stopped here instead of freezing the server: the `regex`
# module (re-compatible syntax) takes a timeout, which the standard `re` does not.
SEARCH_TIMEOUT = 0.1

# Compiled `until` patterns (regex.Pattern, untyped).
Patterns = list[Any]
# `until` values already checked and compiled, kept while small (a prompt pattern is a few steps): bounded memory
# whatever the calls send.
_CHECKED: dict[str | tuple[str, ...], tuple[Any, ...]] = {}
CHECKED_MAX_ENTRIES = 256
CHECKED_MAX_EXPANSION = 1024


@dataclass(frozen=True)
class Match:
    index: int  # which pattern
    text: str  # what it matched


def compile_until(until: str | list[str] | None) -> Patterns:
    if until is None:
        return []
    # A dialogue sends the same `until` at every step: a small one's checks and compiled patterns are kept (a
    # refused one is never kept, and checked again each time).
    key = until if isinstance(until, str) else tuple(until)
    kept = _CHECKED.get(key)
    if kept is not None:
        return list(kept)
    compiled, expansion = _checked_patterns(until)
    if expansion <= CHECKED_MAX_EXPANSION:
        if len(_CHECKED) >= CHECKED_MAX_ENTRIES:
            _CHECKED.clear()
        _CHECKED[key] = compiled
    return list(compiled)


def _checked_patterns(until: str | list[str]) -> tuple[tuple[Any, ...], int]:
    """The compiled patterns, and the steps they compile to (_expansion); ArgumentError naming what is wrong."""
    patterns = [until] if isinstance(until, str) else list(until)
    if not patterns:
        raise ArgumentError("until: is an empty list; allowed: a regex or a list of 1 to 16 regexes")
    if len(patterns) > MAX_PATTERNS:
        raise ArgumentError(f"until: {len(patterns)} patterns; allowed: at most {MAX_PATTERNS}")
    import regex  # on first use: it takes ~9 ms to import, which startup should not pay

    compiled = []
    expansion = 0
    for index, pattern in enumerate(patterns):
        where = "until" if isinstance(until, str) else f"until[{index}]"
        if not pattern:
            raise ArgumentError(f"{where}: is empty (it would match at once); allowed: a non-empty regex")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise ArgumentError(f"{where}: is {len(pattern)} characters; allowed: at most {MAX_PATTERN_LENGTH}")
        expansion += _expansion(pattern)
        if expansion > MAX_EXPANSION:
            raise ArgumentError(
                f"{where}: {pattern[:80]!r} repeats too much (`regex` compiles counted repeats unrolled: ~{expansion} "
                f"steps, each a few hundred bytes); allowed: at most {MAX_EXPANSION} in all, e.g. \\d{{1000}}"
            )
        try:
            compiled.append(_compiled(pattern))
        except regex.error as exc:
            raise ArgumentError(
                f"{where}: {pattern[:80]!r} is not a valid regex ({exc}); allowed: a Python regular expression"
            ) from None
    return tuple(compiled), expansion


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """A dialogue sends the same prompt pattern on every step: `regex.compile`'s own cache still checks its
    arguments on each call, which costs more than the lookup here. Compiled patterns are immutable."""
    import regex

    return regex.compile(pattern, regex.MULTILINE)


_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def _expansion(pattern: str) -> int:
    """Roughly how many steps `regex` compiles a pattern into: a counted repeat is unrolled to its minimum
    count (`\\d{1000000}` takes ~270 MB), and nested ones multiply. Linear in the pattern."""
    groups = [0]  # the cost so far of each open group, outermost first
    last = 1  # the cost of the atom a following quantifier repeats
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
        elif char == "[":  # a character class is one step, whatever it holds
            end = index + 1 + (pattern[index + 1 : index + 2] in ("]", "^"))
            while end < len(pattern) and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            index = end + 1
        elif char == "(":
            groups.append(0)
            index += 1
            continue
        elif char == ")" and len(groups) > 1:
            last = groups.pop()
            groups[-1] += last
            index += 1
            continue
        elif char == "{" and (counted := _QUANTIFIER.match(pattern, index)):
            groups[-1] += last * (max(int(counted.group(1) or 0), 1) - 1)
            index = counted.end()
            continue
        else:
            index += 1
        groups[-1] += 1
        last = 1
    return sum(groups)


def window_text(window: bytes) -> str:
    # A lone CR (a redrawn line, a prompt after `\x1b[?2004l\r`) starts a line too, so `^` matches after it.
    return strip_ansi(window).replace(b"\r", b"\n").decode("utf-8", errors="replace")


def echo_skip(text: str, echo: str | None) -> int | None:
    """Where the program's own output starts in `text`: after the echo of the typed input when the text
    starts with it, else 0. None while the text is still only a prefix of the echo."""
    if not echo:
        return 0
    if text.startswith(echo):
        return len(echo)
    if echo.startswith(text):
        return None
    return 0


def find(patterns: Patterns, window: bytes, echo: str | None) -> Match | None:
    """The first match in a window of new output; `echo` is what the typed input shows at the window's start
    (None: nothing to skip)."""
    text = window_text(window)
    start = echo_skip(text, echo)
    if start is None:
        return None
    if start and text[start - 1] == "\n":
        # The line end that closes the typed line is also the line break before the answer: keep it, or
        # `\n42\n` could never match the answer. The echo's own characters stay skipped.
        start -= 1
    found = _earliest(enumerate(patterns), text, start)
    if found is not None:
        return found
    # Only patterns that name a CR can match the stream with CRs kept where they failed without them.
    if not any(_names_cr(pattern.pattern) for pattern in patterns):
        return None
    named_cr = [(index, pattern) for index, pattern in enumerate(patterns) if _names_cr(pattern.pattern)]
    stream = strip_escapes(window).decode("utf-8", errors="replace")
    return _earliest(named_cr, stream, _stream_offset(stream, start))


@functools.lru_cache(maxsize=256)
def _names_cr(pattern: str) -> bool:
    # Cached: asked on every wake-up without a match. A false positive (`\\r`, a literal backslash and r)
    # only costs the second search.
    return "\\r" in pattern or "\r" in pattern or "\\x0d" in pattern.lower() or "\\015" in pattern


def _stream_offset(stream: str, offset: int) -> int:
    """Where `offset` of the text with line ends read as LF lies in the stream with CRs kept: each CRLF of
    the stream is one character of that text (a lone CR is one, like any other)."""
    position = 0
    while (crlf := stream.find("\r\n", position)) != -1 and crlf - position < offset:
        offset -= crlf - position + 1
        position = crlf + 2
    return position + offset


def search(patterns: Patterns, text: str, start: int) -> Match | None:
    """The earliest match at or after `start` (ties go to the lower pattern index)."""
    return _earliest(enumerate(patterns), text, start)


def _earliest(patterns: Iterable[tuple[int, Any]], text: str, start: int) -> Match | None:
    best: tuple[int, int, Any] | None = None
    for index, pattern in patterns:
        try:
            found = pattern.search(text, start, timeout=SEARCH_TIMEOUT)
        except TimeoutError:
            raise ToolError(
                "UntilTooSlow",
                f"until pattern {index} ({pattern.pattern[:80]!r}) took over {SEARCH_TIMEOUT}s on the output "
                "(catastrophic backtracking); use a simpler regex, e.g. without nested repetition",
            ) from None
        if found is not None and (best is None or found.start() < best[0]):
            best = (found.start(), index, found)
    if best is None:
        return None
    return Match(index=best[1], text=best[2].group(0))


def expected_echo(typed: str) -> str | None:
    """What the terminal shows for typed text (after escape stripping), or None when it cannot be known."""
    if not typed or any(ord(char) < 32 and char not in "\r\n\t" for char in typed):
        return None
    return typed.replace("\r\n", "\n").replace("\r", "\n")
