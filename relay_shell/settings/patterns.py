"""Operator regexes (POLICY_DENY, POLICY_ALLOW, EXEC_DENY): read as a JSON array, one per line, or a TOML array,
and compiled once, in RE2.

RE2 and not Python's `re`: the policy matches these against commands an AI client writes and the exec trace
against argv a program chose, so matching must take time linear in the text whatever the pattern; a backtracking
pattern such as `(a+)+$` would stall the server on a crafted command (adr/0019, issue 30). A pattern RE2 does not
accept, or one RE2 would read differently from `re` without saying so, stops startup naming the pattern and the
construct.
"""

from __future__ import annotations

import json
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
    lookaround, possessive quantifiers, \\Z) or reads differently from `re` (`{,n}`)."""
    if not patterns:
        return []
    import re2  # ~3 ms: only when there are patterns

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, once
    compiled: list[Regex] = []
    for pattern in patterns:
        if isinstance(pattern, Regex):
            compiled.append(pattern)
            continue
        construct = _silently_different(pattern)
        if construct is not None:
            raise ValueError(
                f"pattern {pattern!r} is not a valid regex for relay-shell: {construct} repeats in Python's re but is "
                "literal text in RE2; write {0,n} for {,n} and * for {,}"
            )
        try:
            compiled.append(re2.compile(pattern, options))
        except re2.error as exc:
            problem = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise ValueError(
                f"pattern {pattern!r} is not a valid regex in RE2 syntax ({problem}): RE2 has no backreferences, "
                "lookaround, possessive quantifiers or atomic groups, and spells \\Z as \\z"
            ) from None
    return compiled


def _silently_different(pattern: str) -> str | None:
    """The first `{,n}` or `{,}` outside a character class: RE2 compiles it as the literal text."""
    index = 0
    in_class = False
    while index < len(pattern):
        character = pattern[index]
        if character == "\\":
            index += 2
            continue
        if in_class:
            in_class = character != "]"
        elif character == "[":
            in_class = True
            index += 1
            index += pattern.startswith("^", index)
            index += pattern.startswith("]", index)  # `[]…]`, `[^]…]`: a first `]` is a member
            continue
        elif character == "{" and pattern.startswith(",", index + 1):
            end = pattern.find("}", index)
            if end != -1 and (end == index + 2 or pattern[index + 2 : end].isdigit()):
                return pattern[index : end + 1]
        index += 1
    return None


def matches(pattern: Regex, text: str) -> bool:
    """`pattern.search(text)`, with `$` also matching before a final newline as it does in Python's re (RE2's `$`
    is the end of the text only): a deny pattern written for `re` keeps matching `reboot\\n`."""
    if pattern.search(text) is not None:
        return True
    return text.endswith("\n") and pattern.search(text[:-1]) is not None
