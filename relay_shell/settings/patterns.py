"""Operator regexes (POLICY_DENY, POLICY_ALLOW, EXEC_DENY): read as a JSON array, one per line, or a TOML array,
and compiled once, in RE2.

RE2 and not Python's `re`: the policy matches these against commands an AI client writes and the exec trace
against argv a program chose, so matching must take time linear in the text whatever the pattern; a backtracking
pattern such as `(a+)+$` would stall the server on a crafted command (adr/0019, issue 30). Patterns are written
as for Python's `re`: where RE2 would read a construct otherwise, the compiled pattern keeps `re`'s meaning
(settings/pattern_syntax.py) or, where it cannot, startup stops naming the pattern and the construct; a pattern
RE2 does not accept stops it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Regex(Protocol):
    """A compiled pattern: what the policy and the exec trace match with (re2's, or anything with the same face)."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: str) -> Any: ...


def parse_patterns(raw: str | Sequence[str]) -> list[str]:
    """A JSON array of regexes, or one regex per line (blank lines ignored); from the file, a TOML array."""
    if not isinstance(raw, str):
        if not all(isinstance(item, str) for item in raw):
            raise ValueError("must be a list of regex strings")
        return [item for item in raw if item.strip()]
    text = raw.strip()
    if not text:
        return []
    if text.startswith("["):
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError("must be a JSON array of regex strings")
        return value
    return [line.strip() for line in text.splitlines() if line.strip()]


def compile_patterns(raw: object) -> tuple[Regex, ...]:
    """A setting's patterns, compiled: text or a list of strings is parsed and compiled, compiled ones are kept."""
    if isinstance(raw, tuple) and all(isinstance(item, Regex) for item in raw):
        return raw
    if not isinstance(raw, str | list | tuple):
        raise ValueError("must be a JSON array of regexes or one regex per line")
    return tuple(compile_re2(parse_patterns(raw)))


def compile_re2(patterns: Sequence[str | Regex]) -> list[Regex]:
    """ValueError naming the pattern and the construct for a pattern RE2 does not accept (backreferences,
    lookaround, possessive quantifiers, \\Z) or would read differently from `re` where relay-shell cannot keep
    `re`'s meaning (`{,n}`, `\\B`, POSIX classes: settings/pattern_syntax.py)."""
    if not patterns:
        return []
    import re2  # ~3 ms: only when there are patterns

    from relay_shell.settings.pattern_syntax import SyntaxDifference, folds_case, to_re2

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, once
    compiled: list[Regex] = []
    for pattern in patterns:
        if isinstance(pattern, Regex):
            compiled.append(pattern)
            continue
        try:
            translated = to_re2(pattern)
        except SyntaxDifference as difference:
            raise ValueError(f"pattern {pattern!r} is not a valid regex for relay-shell: {difference}") from None
        try:
            compiled.append(OperatorPattern(pattern, re2.compile(translated, options), folds_case(pattern)))
        except re2.error as exc:
            problem = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise ValueError(
                f"pattern {pattern!r} is not a valid regex in RE2 syntax ({problem}): RE2 has no backreferences, "
                "lookaround, possessive quantifiers or atomic groups, and spells \\Z as \\z"
            ) from None
        except UnicodeEncodeError:
            raise ValueError(
                f"pattern {pattern!r} is not a valid regex for relay-shell: it holds a lone UTF-16 surrogate, which "
                "is not Unicode text"
            ) from None
    return compiled


class OperatorPattern:
    """An operator's pattern: `pattern` as written, searched with its RE2 translation (`re`'s meaning kept)."""

    __slots__ = ("compiled", "folds", "pattern")

    def __init__(self, pattern: str, compiled: Any, folds: bool = False) -> None:
        self.pattern = pattern
        self.compiled = compiled
        self.folds = folds

    def search(self, text: str) -> Any:
        """A case-insensitive pattern searches the text with pattern_syntax.CASE_FOLDS applied. RE2 matches UTF-8:
        a lone surrogate (in a command a client wrote, in an argv the kernel gave) is searched as U+FFFD, one
        character for one as `re` counts it, so `.` and the rest still match."""
        if self.folds and not text.isascii():
            from relay_shell.settings.pattern_syntax import CASE_FOLDS

            text = text.translate(CASE_FOLDS)
        try:
            return self.compiled.search(text)
        except UnicodeEncodeError:
            return self.compiled.search(re.sub("[\ud800-\udfff]", "\ufffd", text))

    def __repr__(self) -> str:
        return f"OperatorPattern({self.pattern!r})"


def matches(pattern: Regex, text: str) -> bool:
    """Whether the pattern is found anywhere in the text."""
    return pattern.search(text) is not None
