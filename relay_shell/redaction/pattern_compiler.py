"""Compiling the redaction patterns so that they match the same on every Python the server runs on.

The patterns use possessive quantifiers (`x*+`, `x++`, `x?+`, `x{m,n}+`) so that no failed attempt retries a
shorter prefix: redaction stays linear on hostile input. Python before 3.11.5 — Debian 12's python3 is 3.11.2 —
matches some of them wrongly (CPython gh-106052: a possessive repeat of a subpattern that can backtrack), and
redaction then lets secrets through (`git config --global github.token TOKEN` kept its token). CPython's fix
made a possessive quantifier the atomic group it is defined to be, `(?>x*)`; `compile_pattern` writes every
one that way before compiling, on every version, so there is one behaviour and it is the tested one.
"""

from __future__ import annotations

import re

_QUANTIFIER = re.compile(r"[*+?]|\{[0-9]*(?:,[0-9]*)?\}")


def compile_pattern(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(possessive_as_atomic(pattern), flags)


def possessive_as_atomic(pattern: str) -> str:
    """The pattern with each possessive quantifier written as an atomic group around its atom."""
    pieces: list[str] = []  # the output so far; an atom is pieces[atom_start:]
    group_starts: list[int] = []  # where each open group's piece is
    atom_start: int | None = None  # where the last complete atom starts, if a quantifier may follow
    index = 0
    while index < len(pattern):
        char = pattern[index]
        quantifier = _QUANTIFIER.match(pattern, index) if atom_start is not None else None
        if quantifier is not None:
            end = quantifier.end()
            atom = "".join(pieces[atom_start:])
            if end < len(pattern) and pattern[end] == "+" and atom.startswith("("):  # a possessive group
                del pieces[atom_start:]
                pieces.append(f"(?>{atom}{quantifier.group()})")
                end += 1
            else:
                suffix = "?" if end < len(pattern) and pattern[end] == "?" else ""  # lazy
                pieces.append(quantifier.group() + suffix)
                end += len(suffix)
            atom_start = None
            index = end
        elif char == "\\":
            atom_start = len(pieces)
            pieces.append(pattern[index : index + 2])
            index += 2
        elif char == "[":
            end = _class_end(pattern, index)
            atom_start = len(pieces)
            pieces.append(pattern[index:end])
            index = end
        elif char == "(":
            end = _group_prefix_end(pattern, index)
            prefix = pattern[index:end]
            if prefix.endswith(")"):  # inline flags for the whole pattern, `(?i)`: not a group
                pieces.append(prefix)
                atom_start = None
            else:
                group_starts.append(len(pieces))
                pieces.append(prefix)
                atom_start = None
            index = end
        elif char == ")":
            atom_start = group_starts.pop()
            pieces.append(char)
            index += 1
        elif char in "|^$":
            pieces.append(char)
            atom_start = None
            index += 1
        else:  # a literal character or `.`
            atom_start = len(pieces)
            pieces.append(char)
            index += 1
    return "".join(pieces)


def _class_end(pattern: str, start: int) -> int:
    """The index after the `]` that closes the character class opened at `start`."""
    index = start + 1
    if index < len(pattern) and pattern[index] == "^":
        index += 1
    if index < len(pattern) and pattern[index] == "]":  # a leading `]` is a member
        index += 1
    while pattern[index] != "]":
        index += 2 if pattern[index] == "\\" else 1
    return index + 1


def _group_prefix_end(pattern: str, start: int) -> int:
    """The index after a group's opening: `(`, `(?:`, `(?>`, `(?=`, `(?!`, `(?<=`, `(?<!`, `(?P<name>`,
    `(?i:`, or the whole of `(?i)` / `(?P=name)` / `(?#…)`, which open no group."""
    if not pattern.startswith("(?", start):
        return start + 1
    rest = pattern[start + 2 :]
    for opening in (":", ">", "=", "!", "<=", "<!"):
        if rest.startswith(opening):
            return start + 2 + len(opening)
    if rest.startswith("P<"):
        return pattern.index(">", start) + 1
    if rest.startswith(("P=", "#")):
        return pattern.index(")", start) + 1
    flags = re.match(r"[aiLmsux-]*[:)]", rest)
    if flags is None:
        raise ValueError(f"unsupported group opening in {pattern[start : start + 12]!r}")
    return start + 2 + flags.end()
