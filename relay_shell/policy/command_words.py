"""Words the shell expands before it runs them: brace expansion (`{rm,-rf,/srv}`, `r{m,}`, `{1..3}`; bash) and a
command word with glob characters (`/usr/bin/r[m]`, `r?`, `*`), which pathname expansion turns into whatever
names match in the working directory or the path given. The classifier cannot know what the directory will hold
when the command runs (an earlier command may create `rm` there), so a globbed command word is read as every
program name it can match: the names the classifier knows, and, when the pattern can match other names too, a
program nothing knows (tier 1). A pattern that matches more than MAX_CANDIDATES known names is tier 3: it could be
any of them.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from functools import lru_cache
from itertools import product

from relay_shell.policy.shell_words import MARK_BRACE, MARK_GLOB

MAX_BRACE_WORDS = 256
MAX_CANDIDATES = 32
_SEQUENCE = re.compile(r"(-?\d{1,6}|[A-Za-z])\.\.(-?\d{1,6}|[A-Za-z])(?:\.\.(-?\d{1,6}))?")
_CLASS = re.compile(r"\[(!|\^)?(\]?[^\]]*)\]")


def expand_words(
    words: list[str], dynamic: list[bool], marks: dict[int, int], offset: int
) -> tuple[list[str], list[bool], list[bool]]:
    """Brace expansion of the marked words (words[i] is the command's word offset + i); and, per resulting word,
    whether it has unquoted glob characters."""
    expanded: list[str] = []
    flags: list[bool] = []
    globbed: list[bool] = []
    for index, word in enumerate(words):
        mark = marks.get(index + offset, 0)
        parts = expand_braces(word) if mark & MARK_BRACE else [word]
        expanded += parts
        flags += [dynamic[index]] * len(parts)
        globbed += [bool(mark & MARK_GLOB) and has_glob(part) for part in parts]
    return expanded, flags, globbed


def expand_braces(word: str) -> list[str]:
    """bash's brace expansion of one word (at most MAX_BRACE_WORDS results); a word without a valid brace
    expression is itself."""
    results = [word]
    for _round in range(64):
        changed = False
        next_results: list[str] = []
        for item in results:
            parts = _expand_first(item)
            changed = changed or parts is not None
            next_results += parts if parts is not None else [item]
            if len(next_results) > MAX_BRACE_WORDS:
                return next_results[:MAX_BRACE_WORDS]
        results = next_results
        if not changed:
            break
    return results


def _expand_first(word: str) -> list[str] | None:
    """The first brace expression of a word expanded, or None when it has none."""
    start = word.find("{")
    while start >= 0:
        if start > 0 and word[start - 1] == "$":
            start = word.find("{", start + 1)
            continue
        depth, index, commas = 0, start, []
        while index < len(word):
            char = word[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    break
            elif char == "," and depth == 1:
                commas.append(index)
            index += 1
        if index >= len(word):
            return None
        prefix, suffix, inner = word[:start], word[index + 1 :], word[start + 1 : index]
        if commas:
            bounds = [start, *commas, index]
            return [prefix + word[bounds[i] + 1 : bounds[i + 1]] + suffix for i in range(len(bounds) - 1)]
        sequence = _SEQUENCE.fullmatch(inner)
        if sequence is not None:
            return [prefix + item + suffix for item in _sequence(*sequence.groups())]
        start = word.find("{", start + 1)
    return None


def _sequence(first: str, last: str, step_text: str | None) -> list[str]:
    step = abs(int(step_text)) if step_text and int(step_text) else 1
    if first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
        low, high = int(first), int(last)
        items = range(low, high + 1, step) if low <= high else range(low, high - 1, -step)
        return [str(item) for item in list(items)[:MAX_BRACE_WORDS]]
    if first.isalpha() and last.isalpha():
        low, high = ord(first), ord(last)
        items = range(low, high + 1, step) if low <= high else range(low, high - 1, -step)
        return [chr(item) for item in items][:MAX_BRACE_WORDS]
    return [f"{{{first}..{last}}}"]


def has_glob(word: str) -> bool:
    """Whether pathname expansion would treat the word as a pattern: `*`, `?`, or a `[…]` that closes."""
    return "*" in word or "?" in word or _CLASS.search(word) is not None


def candidates(word: str, known: frozenset[str]) -> tuple[list[str], bool]:
    """The program names a globbed command word can run: the known names its last part matches (as paths when it
    has a directory part), and whether it may match a name nothing knows."""
    directory, _slash, pattern = word.rpartition("/")
    prefix = directory + "/" if _slash else ""
    if not has_glob(pattern):
        return [word], False  # only the directory part is a pattern: the program is the last part
    finite = _finite(pattern)
    if finite is not None:
        return [prefix + name for name in finite if name in known], any(name not in known for name in finite)
    return [prefix + name for name in _matching(pattern, known)], True


@lru_cache(maxsize=512)
def _matching(pattern: str, known: frozenset[str]) -> tuple[str, ...]:
    """The known names a pattern with `*` or `?` matches, sorted (one regex, compiled once per pattern). Only names
    that start with the pattern's literal prefix and end with its literal suffix can match, found by bisection: a
    word typed into a Python REPL (`7*7`) is such a pattern, a new one at every step, and trying a freshly compiled
    regex on all ~1,000 names took ~170 µs of each step."""
    translated = _fnmatch_pattern(pattern)
    prefix = translated[: min(translated.find(char) % (len(translated) + 1) for char in "*?[")]
    suffix = translated[max(translated.rfind(char) for char in "*?[]") + 1 :]
    by_start, by_end = _sorted_names(known)
    starting = _prefixed(by_start, prefix)
    ending = [name[::-1] for name in _prefixed(by_end, suffix[::-1])]
    tried = (
        [name for name in starting if name.endswith(suffix)]
        if len(starting) <= len(ending)
        else sorted(name for name in ending if name.startswith(prefix))
    )
    if not tried:
        return ()  # no regex compiled (~20 µs) when no name can match
    regex = re.compile(fnmatch.translate(translated))
    return tuple(name for name in tried if regex.match(name))


def _prefixed(names: list[str], prefix: str) -> list[str]:
    """The names of a sorted list that start with `prefix`."""
    first = bisect.bisect_left(names, prefix)
    last = bisect.bisect_left(names, prefix + "\U0010ffff", first)
    while last < len(names) and names[last].startswith(prefix):  # a name with U+10FFFF after the prefix
        last += 1
    return names[first:last]


@lru_cache(maxsize=4)
def _sorted_names(known: frozenset[str]) -> tuple[list[str], list[str]]:
    """The names sorted, and the names reversed and sorted (to find those that end with a suffix)."""
    return sorted(known), sorted(name[::-1] for name in known)


def _finite(pattern: str) -> list[str] | None:
    """Every name a pattern with only `[…]` classes matches (at most 512), or None when it has `*`, `?`, a negated
    class, or too many."""
    if "*" in pattern or "?" in pattern:
        return None
    pieces: list[list[str]] = []
    position = 0
    for match in _CLASS.finditer(pattern):
        if match.group(1):
            return None
        pieces += [[char] for char in pattern[position : match.start()]]
        pieces.append(_class_members(match.group(2)))
        position = match.end()
    pieces += [[char] for char in pattern[position:]]
    total = 1
    for piece in pieces:
        total *= len(piece)
        if total > 512:
            return None
    return ["".join(combination) for combination in product(*pieces)]


def _class_members(body: str) -> list[str]:
    members: list[str] = []
    index = 0
    while index < len(body):
        if index + 2 < len(body) and body[index + 1] == "-":
            low, high = ord(body[index]), ord(body[index + 2])
            members += [chr(code) for code in range(low, min(high, low + 255) + 1)]
            index += 3
        else:
            members.append(body[index])
            index += 1
    return list(dict.fromkeys(members))


def _fnmatch_pattern(pattern: str) -> str:
    """bash's `[^…]` negation is fnmatch's `[!…]`."""
    return pattern.replace("[^", "[!")
