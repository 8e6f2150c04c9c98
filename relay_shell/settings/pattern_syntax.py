"""An operator's pattern, written for Python's `re`, as RE2 text that means the same (settings/patterns.py).

RE2 reads most of `re`'s syntax alike; where it would silently read a pattern otherwise, this module either
rewrites the construct so the compiled pattern keeps `re`'s meaning, or refuses the pattern naming the
construct (README, "Operator patterns"):

- `\\s \\S \\d \\D \\w \\W` are ASCII in RE2 and Unicode in `re`: rewritten to the Unicode classes `re` uses
  (`\\s` is also `\\v`, `\\x1c`-`\\x1f`, NEL, NBSP and the Unicode spaces; `\\d` is `\\p{Nd}`; `\\w` is
  `[\\p{L}\\p{N}_]`), in and out of brackets; a negated one inside a bracket with other members has no RE2
  spelling and is refused;
- `\\b` is an ASCII word boundary in RE2: accepted only beside an ASCII letter, digit or `_` the pattern
  requires (`\\brm\\b`, `\\b(rm|mv)\\b`), where RE2 agrees with `re` on every ASCII text and otherwise only
  adds matches (a boundary beside a non-ASCII letter); elsewhere, and `\\B` always, refused;
- `[[:alpha:]]` is a POSIX class in RE2 and a set of characters in `re`; `{,n}` repeats in `re` and is literal
  text in RE2: both refused;
- `[\\b]` (a backspace in `re`) is written `\\x08`; `\\uXXXX`, `\\UXXXXXXXX` and `\\N{name}` as `\\x{…}`;
- `$` (the end, or before a final newline, in `re`; the end only in RE2) is written `\\n?\\z` where nothing
  follows it, and refused where something does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What `re` matches for \s (str.isspace), \d (Unicode decimal digits) and \w (str.isalnum, and `_`), in RE2.
SPACE = r"\t\n\x0b\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
DIGIT = r"\p{Nd}"
WORD = r"\p{L}\p{N}_"
CLASSES = {"s": SPACE, "d": DIGIT, "w": WORD}

# `(`, `(?:`, `(?i:`, `(?P<name>`, lookaround openings; `(?i)`, `(?#…)` and `(?P=name)` are whole tokens.
_GROUP_OPENING = re.compile(r"\((?:\?(?:[a-zA-Z-]*[:)]|P?<[^>]*>|[=!]|<[=!]|P=[^)]*\)|#[^)]*\)|>))?")
_EMPTY_LOWER_BOUND = re.compile(r"\{,[0-9]*\}")
_QUANTIFIER = re.compile(r"[*+?]\??|\{[0-9]+(?:,[0-9]*)?\}\??")
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# A range inside brackets stays among ASCII word characters when both ends are of one kind (`a-z`, not `0-z`).
_RANGE_KIND = {character: character.isdigit() + 2 * character.isupper() for character in _ASCII_WORD - {"_"}}
# The non-ASCII letters `re`'s case-insensitive matching takes for an ASCII one (KELVIN SIGN for k, LONG S for s,
# dotted and dotless I for i; RE2 takes the first two, not the i's): a case-insensitive pattern searches the text
# with these written as their ASCII letter, so RE2 matches them as `re` does, `\b` beside them included.
CASE_FOLDS = str.maketrans({"\u212a": "K", "\u017f": "s", "\u0130": "I", "\u0131": "i"})


class SyntaxDifference(ValueError):
    """A pattern RE2 would read differently from `re`: the message names the construct and what to write."""


@dataclass
class _Token:
    kind: str  # lit, esc, class, group, quant, alt, other
    text: str
    alternatives: list[list[_Token]] = field(default_factory=list)  # a group's, split at its top-level `|`
    close: str = ""  # a group's closing text


def to_re2(pattern: str) -> str:
    """RE2 text with `re`'s meaning; SyntaxDifference for a construct that cannot keep it."""
    tokens, end = _parse(pattern, 0)
    if end != len(pattern):  # an unbalanced `)`: RE2 reports it
        return pattern
    multiline = re.search(r"\(\?[a-zA-Z]*m", pattern) is not None  # `(?m)$` is a line's end in both
    return "|".join(_write(alternative, True, multiline) for alternative in _split(tokens))


def folds_case(pattern: str) -> bool:
    """Whether the pattern matches case-insensitively anywhere (`(?i)`, `(?i:…)`): its text is searched with
    CASE_FOLDS applied."""
    return re.search(r"\(\?[a-zA-Z]*i", pattern) is not None


def _parse(pattern: str, index: int) -> tuple[list[_Token], int]:
    """Tokens up to the `)` closing the current group (not consumed) or the end."""
    tokens: list[_Token] = []
    while index < len(pattern):
        character = pattern[index]
        if character == ")":
            return tokens, index
        if character == "\\":
            end = _escape_end(pattern, index)
            tokens.append(_Token("esc", pattern[index:end]))
            index = end
        elif character == "[":
            end = _class_end(pattern, index)
            closed = end != -1
            tokens.append(_Token("class" if closed else "other", pattern[index:end] if closed else pattern[index:]))
            index = end if closed else len(pattern)  # an unclosed bracket: RE2 reports it
        elif character == "(":
            opening = _GROUP_OPENING.match(pattern, index)
            assert opening is not None  # `(` alone always matches
            text = opening.group()
            if text.endswith(")"):  # a flag group `(?i)`, a comment or `(?P=name)`: no children
                tokens.append(_Token("other", text))
                index += len(text)
                continue
            children, end = _parse(pattern, index + len(text))
            group = _Token("group", text, _split(children), close=pattern[end : end + 1])
            tokens.append(group)
            index = end + 1
        elif (empty := _EMPTY_LOWER_BOUND.match(pattern, index)) is not None:
            raise SyntaxDifference(
                f"{empty.group()} repeats in Python's re but is literal text in RE2; write {{0,n}} for {{,n}} and * "
                "for {,}"
            )
        elif (found := _QUANTIFIER.match(pattern, index)) is not None and (character != "{" or tokens):
            tokens.append(_Token("quant", found.group()))
            index = found.end()
        elif character == "|":
            tokens.append(_Token("alt", "|"))
            index += 1
        elif character in ".^$":
            tokens.append(_Token("other", character))
            index += 1
        else:
            tokens.append(_Token("lit", character))
            index += 1
    return tokens, index


def _escape_end(pattern: str, index: int) -> int:
    if pattern.startswith(("\\x{", "\\p{", "\\P{", "\\N{"), index):
        close = pattern.find("}", index)
        return len(pattern) if close == -1 else close + 1
    if pattern.startswith("\\Q", index):  # RE2's quoted literal text (no `re` meaning): kept to its \E
        close = pattern.find("\\E", index)
        return len(pattern) if close == -1 else close + 2
    if pattern.startswith(("\\u", "\\U"), index):
        digits = re.match(r"[0-9a-fA-F]*", pattern[index + 2 : index + (6 if pattern[index + 1] == "u" else 10)])
        return index + 2 + len(digits.group()) if digits is not None else index + 2
    return min(index + 2, len(pattern))


def _code_point(escape: str) -> str:
    """`\\uXXXX`, `\\UXXXXXXXX` and `\\N{NAME}` (`re` only) as RE2's `\\x{…}`; as written when malformed (RE2
    then refuses it)."""
    import unicodedata

    try:
        character = unicodedata.lookup(escape[3:-1]) if escape.startswith("\\N{") else chr(int(escape[2:], 16))
    except (KeyError, ValueError):
        return escape
    if len(escape) != (6 if escape[1] == "u" else 10) and not escape.startswith("\\N"):
        return escape  # too few digits: an error in `re`, left for RE2 to refuse
    return f"\\x{{{ord(character):x}}}"


def _class_end(pattern: str, index: int) -> int:
    """The index after the `]` closing the bracket expression at `index` (a first `]` is a member); -1 when
    nothing closes it."""
    position = index + 1
    position += pattern.startswith("^", position)
    position += pattern.startswith("]", position)
    while position < len(pattern) and pattern[position] != "]":
        if pattern.startswith("[:", position) and (close := pattern.find(":]", position + 2)) != -1:
            position = close + 2  # RE2's `[:alpha:]` is one member
            continue
        position += 2 if pattern[position] == "\\" else 1
    return position + 1 if position < len(pattern) else -1


def _split(tokens: list[_Token]) -> list[list[_Token]]:
    alternatives: list[list[_Token]] = [[]]
    for token in tokens:
        if token.kind == "alt":
            alternatives.append([])
        else:
            alternatives[-1].append(token)
    return alternatives


def _write(tokens: list[_Token], at_end: bool, multiline: bool) -> str:
    """`at_end`: nothing that consumes text may follow these tokens (what a `$` among them needs)."""
    written = []
    for position, token in enumerate(tokens):
        last = at_end and all(after.kind == "quant" or after.text == "$" for after in tokens[position + 1 :])
        if token.kind == "esc":
            written.append(_escape(tokens, position))
        elif token.kind == "class":
            written.append(_bracket(token.text))
        elif token.kind == "group":
            inner = "|".join(_write(alternative, last, multiline) for alternative in token.alternatives)
            written.append(token.text + inner + token.close)
        elif token.text == "$" and not multiline:
            written.append(_dollar(last))
        else:
            written.append(token.text)
    return "".join(written)


def _dollar(last: bool) -> str:
    """`$` in `re` is the end or before a final newline, RE2's the end only: `\\n?\\z` says the same where
    nothing follows (what follows `re`'s `$` could match that newline: refused)."""
    if not last:
        raise SyntaxDifference(
            "$ followed by more of the pattern: in Python's re what follows may match a final newline, in RE2 "
            "nothing can follow the end; write \\n or \\z for what you mean"
        )
    return "(?:\\n?\\z)"


def _escape(tokens: list[_Token], position: int) -> str:
    text = tokens[position].text
    letter = text[1:2]
    if letter in "uUN":
        return _code_point(text)
    if letter in CLASSES:
        return f"[{CLASSES[letter]}]"
    if letter.lower() in CLASSES:
        return f"[^{CLASSES[letter.lower()]}]"
    if letter == "B":
        raise SyntaxDifference(
            "\\B is ASCII in RE2 (a non-ASCII letter is no word character) and Unicode in Python's re; "
            "write what may stand beside it instead"
        )
    if letter == "b":
        before = _ends_with_ascii_word(tokens[:position])
        after = _starts_with_ascii_word(tokens[position + 1 :])
        if not (before or after):
            raise SyntaxDifference(
                "\\b is an ASCII word boundary in RE2 and a Unicode one in Python's re; relay-shell takes \\b "
                "only beside an ASCII letter, digit or _ the pattern requires (\\brm\\b, \\b(rm|mv)\\b)"
            )
    return text


def _bracket(text: str) -> str:
    """A bracket expression with \\s \\d \\w spelled as `re` reads them; refused where RE2 cannot say it."""
    if re.search(r"\[:\^?[a-z]+:\]", text[1:-1]):
        raise SyntaxDifference(
            "[:name:] inside brackets is a POSIX class in RE2 but a set of characters in Python's re; "
            "write the characters ([A-Za-z]) or a Unicode class (\\pL)"
        )
    negated = text.startswith("[^")
    body = text[2:-1] if negated else text[1:-1]
    members = re.findall(r"\\.|.", body, flags=re.DOTALL)
    negative = [member for member in members if member in ("\\S", "\\D", "\\W")]
    if negative and len(members) == 1:
        return f"[{'' if negated else '^'}{CLASSES[negative[0][1].lower()]}]"
    if negative:
        raise SyntaxDifference(
            f"{negative[0]} inside brackets with other members has no RE2 spelling that keeps Python's re "
            f"meaning; write it apart, (?:{negative[0]}|[...])"
        )
    spelled = [CLASSES[member[1]] if member in ("\\s", "\\d", "\\w") else member for member in members]
    spelled = ["\\x08" if member == "\\b" else member for member in spelled]
    return ("[^" if negated else "[") + "".join(spelled) + "]"


def _starts_with_ascii_word(tokens: list[_Token]) -> bool:
    if not tokens:
        return False
    first = tokens[0]
    if len(tokens) > 1 and tokens[1].kind == "quant" and not _at_least_once(tokens[1].text):
        return False
    if first.kind == "group" and not first.text.startswith("(?="):
        return all(_starts_with_ascii_word(alternative) for alternative in first.alternatives)
    return _ascii_word_literal(first)


def _ends_with_ascii_word(tokens: list[_Token]) -> bool:
    if not tokens:
        return False
    last = tokens[-1]
    if last.kind == "quant":
        return _at_least_once(last.text) and _ends_with_ascii_word(tokens[:-1])
    if last.kind == "group":
        return all(_ends_with_ascii_word(alternative) for alternative in last.alternatives)
    return _ascii_word_literal(last)


def _ascii_word_literal(token: _Token) -> bool:
    """An ASCII letter, digit or `_`, or brackets holding only those (`[a-z0-9_]`)."""
    if token.kind == "lit":
        return token.text in _ASCII_WORD
    if token.kind != "class" or token.text.startswith("[^"):
        return False
    members = re.fullmatch(r"\[((?:[A-Za-z0-9_](?:-[A-Za-z0-9_])?)+)\]", token.text)
    if members is None:
        return False
    ranges = re.findall(r"(.)-(.)", members.group(1))
    return all(first <= last and _RANGE_KIND.get(first) == _RANGE_KIND.get(last) for first, last in ranges)


def _at_least_once(quantifier: str) -> bool:
    return quantifier.startswith("+") or re.match(r"\{[1-9]", quantifier) is not None
