"""Secrets after their names: `KEY=value`, `key: value`, `"key": "value"`, `--flag value`, `--flag=value`; a name and
its value separated by a space after a config command (`git config --global github.token X`); XML elements
(`<password>x</password>`); .netrc lines. The name is judged by secret_names.py, the value matched by values.py.
"""

from __future__ import annotations

import heapq
import re

from relay_shell.redaction.code import MARKS, OPEN_SECRET, names_run_as_code, pair_regions
from relay_shell.redaction.pattern_compiler import compile_pattern
from relay_shell.redaction.secret_names import NOT_SECRET, WEAK, is_secret_name, secret_name_strength
from relay_shell.redaction.values import (
    AFTER_CLOSING_QUOTE,
    VALUE,
    keep_code,
    secret_value_at,
    value_after_code,
)

# A candidate is a whole run of name characters (lookbehind: only at the start of a run; possessive: the
# run is consumed once) that contains a secret stem. The lookahead scans at most the run, and only from
# the run's start, so the total is linear. The name is then judged in Python and the value is matched
# only for secret names: for other names the loop resumes right after the name, never scanning a value
# (`--from-literal=password=x` still finds `password=x`).
_SECRET_STEMS = ("pass", "pw", "secret", "token", "key", "cred", "auth", "sig", "bearer")
# One C-level scan instead of a Python loop over the stems: most texts mention none of them.
_ANY_SECRET_STEM = compile_pattern("|".join(re.escape(stem) for stem in sorted(_SECRET_STEMS)))
_SECRET_NAME_CANDIDATE = compile_pattern(r"(?<![\w.-])(?=[\w.-]*?(?i:" + "|".join(_SECRET_STEMS) + r"))[\w.-]++")
# Closing quote of a quoted key, then '=', ':', ':=' or '=>' (not '==': a comparison). Bounded spaces.
_ASSIGNMENT = compile_pattern(r"\\?[\"']?[ \t]*+(?P<operator>:=|=>|=(?!=)|:)[ \t]*+")
# `--password x`, `"--password" "x"`, `"--password", "x"`.
_FLAG_GAP = compile_pattern(r"\\?[\"']?,?[ \t]++")
_FLAG_OPERATOR = " "
# `aws secretsmanager get-secret-value --secret-id prod/db` names a secret; `secret_id=` (Vault) is one.
_IDENTIFIER_FLAG_SUFFIXES = ("-id", "-ids", "-arn", "_id")
# After an unquoted name, a quote followed by whitespace, a separator or the end closes a string that mentions
# the name (`echo 'Enter your password:'`); it does not open a value. After a quoted name it does
# (`{"password": " x"}`).
_CLOSING_QUOTE = compile_pattern(r"\\?[\"']" + AFTER_CLOSING_QUOTE)


def _value_start(text: str, name: str, name_end: int) -> tuple[int, str] | None:
    """Where the value after a name starts, and the operator before it (':', '=', ..., or a space for flags)."""
    assignment = _ASSIGNMENT.match(text, name_end)
    if assignment is not None:
        return assignment.end(), assignment.group("operator")
    if name.startswith("-") and not name.lower().endswith(_IDENTIFIER_FLAG_SUFFIXES):
        gap = _FLAG_GAP.match(text, name_end)
        if gap is not None and not text.startswith("-", gap.end()):
            return gap.end(), _FLAG_OPERATOR
    return None


def redact_named_values(text: str) -> str:
    if _ANY_SECRET_STEM.search(text.lower()) is None:
        return text
    # Code in a value (code.py): the literal part before it is masked here, the code is read as any text, and the
    # value's rest after the code (where its region closes) is masked when the scan gets there.
    closes = pair_regions(text) if not text.isascii() and any(mark in text for mark in MARKS) else {}
    run = names_run_as_code(text)  # `DB_PASSWORD='…'; eval "$DB_PASSWORD"`: the value is code, kept (attack 4, A4)
    after_code: list[int] = []  # a heap of where a secret value goes on after its code
    pieces: list[str] = []
    copied = 0  # text[:copied] is already in pieces
    position = 0
    while True:
        candidate = _SECRET_NAME_CANDIDATE.search(text, position)
        limit = len(text) if candidate is None else candidate.start()
        while after_code and after_code[0] <= limit:
            start = heapq.heappop(after_code)
            rest = value_after_code(text, start) if start >= copied else None
            if rest is not None:
                copied = _emit(text, pieces, copied, start, rest, closes, after_code)
        if candidate is None:
            break
        if candidate.start() < copied:
            position = max(copied, candidate.end())
            continue
        name = candidate.group()
        position = candidate.end()
        # A name right after '/' or '@' is a path or host (`https://token:x@h`, `registry/token-svc:1.0`).
        if candidate.start() > 0 and text[candidate.start() - 1] in "/@":
            continue
        found = _value_start(text, name, position)
        if found is None:
            continue
        value_start, operator = found
        if operator == "=" and name in run:
            continue
        strength = secret_name_strength(name)
        quoted_name = text.startswith(('"', "'", "\\"), position)
        if strength == NOT_SECRET or (strength == WEAK and operator == ":" and not quoted_name):
            continue  # `auth: handle expiry` is prose; `"auth": "…"` and `pwd=…` are not
        if not quoted_name and _CLOSING_QUOTE.match(text, value_start):
            continue  # an unquoted name, then a quote that ends the string around it
        found_value = secret_value_at(text, value_start)
        if found_value is None:
            continue
        copied = position = _emit(text, pieces, copied, value_start, found_value, closes, after_code)
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)


def _emit(
    text: str,
    pieces: list[str],
    copied: int,
    start: int,
    found_value: tuple[int, str],
    closes: dict[int, int],
    after_code: list[int],
) -> int:
    """Write text[copied:start] and the masked value; when the value reached code, remember where the value goes
    on after it. Returns the new `copied`."""
    end, replacement = found_value
    pieces.append(text[copied:start])
    pieces.append(replacement)
    if replacement.endswith(OPEN_SECRET):
        close = closes.get(end - 1, len(text))
        if close < len(text):
            heapq.heappush(after_code, close + 1)
    return end


# `git config --global github.token X`, `npm config set //registry.npmjs.org/:_authToken X`,
# `aws configure set aws_secret_access_key X`, `redis-cli CONFIG SET requirepass X`: name and value
# separated by a space. Anchored at the command word; everything after it is possessive and at most six
# words long ({0,3}: an unbounded run of `set set set …` would be rescanned from every `set`), so each
# word is scanned by a bounded number of attempts.
_CONFIG_SET = compile_pattern(
    r"(?<![\w.-])(?i:config|configure|set|setx)(?:[ \t]++(?:--?[\w-]++|(?i:set|add)(?![\w.-]))){0,3}+[ \t]++"
    r"(?:[^\s:=]*+:)?([\w.-]++)[ \t]++"
)


def redact_config_set(text: str) -> str:
    if "set" not in text.lower() and "config" not in text.lower():
        return text
    pieces: list[str] = []
    copied = 0
    position = 0
    while (command := _CONFIG_SET.search(text, position)) is not None:
        position = command.end()
        if not is_secret_name(command.group(1)):
            continue
        value = VALUE.match(text, position)
        if value is not None and value.group().startswith("-"):
            continue  # `gh secret set NAME --body …`: an option, not the value
        found_value = secret_value_at(text, position)
        if found_value is None:
            continue
        pieces.append(text[copied:position])
        pieces.append(found_value[1])
        copied = position = found_value[0]
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)


# `<password>hunter2</password>` (Maven settings.xml and friends). Starts only at '<'; the content scan
# stops at the next '<', which is where the next attempt starts, so scans never overlap.
_XML_ELEMENT = compile_pattern(r"<([\w.:-]++)>([^<\n]++)</")


def redact_xml_elements(text: str) -> str:
    if "</" not in text:
        return text
    return _XML_ELEMENT.sub(
        lambda match: (
            f"<{match.group(1)}>{keep_code(match.group(2))}</" if is_secret_name(match.group(1)) else match.group()
        ),
        text,
    )


# .netrc: `machine h login bob password X` on one line, or a line that is only `password X`. Anchored at
# `login` / a line start; possessive runs.
_NETRC_INLINE = compile_pattern(r"(?<![\w-])(login[ \t]++\S++[ \t]++password[ \t]++)(\S++)")
_NETRC_LINE = compile_pattern(r"(?m)^([ \t]*+password[ \t]++)(\S++)([ \t]*+)$")


def redact_netrc(text: str) -> str:
    if "password" not in text:
        return text
    text = _NETRC_INLINE.sub(lambda match: f"{match.group(1)}{keep_code(match.group(2))}", text)
    return _NETRC_LINE.sub(lambda match: f"{match.group(1)}{keep_code(match.group(2))}{match.group(3)}", text)
