"""The programs a globbed command word can run (policy/command_words.py): the names found by bisection on the
pattern's literal prefix and suffix are exactly those the pattern's regex matches among all the known names."""

from __future__ import annotations

import fnmatch
import random
import re

import pytest

from relay_shell.policy import command_words
from relay_shell.policy.command_words import candidates
from relay_shell.policy.rules import known_names


def every_match(pattern: str, known: frozenset[str]) -> tuple[str, ...]:
    """The pattern's regex tried on every known name, as the classifier matched them before."""
    regex = re.compile(fnmatch.translate(pattern.replace("[^", "[!")))
    return tuple(sorted(name for name in known if regex.match(name)))


EDGES = [
    "*",
    "?",
    "r*",
    "*sh",
    "p?thon*",
    "py*3",
    "7*7",
    "x*y",
    "a*b*c",
    "ab*b",  # the prefix and the suffix overlap: `ab` starts and ends right but is too short
    "*[",
    "[*",
    "[a-c]*",
    "[!a-y]*",
    "[^a-y]*",
    "*[0-9]",
    "s[sc]*",
    "*]",
    "?*?",
    "*.*",
    "*-*",
    "\\*",
    "*\U0010ffff",
    "é*",
    "",
]


@pytest.mark.parametrize("pattern", EDGES)
def test_a_pattern_matches_what_its_regex_matches_among_all_known_names(pattern: str) -> None:
    command_words._matching.cache_clear()
    assert command_words._matching(pattern, known_names()) == every_match(pattern, known_names())


def test_generated_patterns_over_the_known_names_match_as_the_regex_does() -> None:
    rng = random.Random(27)
    known = known_names()
    names = sorted(known)
    patterns = set()
    for _ in range(3000):
        # A known name with parts replaced by wildcards or classes (so that many match), or random text.
        word = list(rng.choice(names)) if rng.random() < 0.8 else [rng.choice("abrsx-._0123") for _ in range(4)]
        for _ in range(rng.randint(1, 3)):
            where = rng.randrange(len(word) + 1)
            length = rng.randint(0, 3)
            word[where : where + length] = [rng.choice(["*", "?", "[a-m]", "[!s]", "[", "]", "*?", "x"])]
        patterns.add("".join(word))
    assert len(patterns) > 2000
    compared = 0
    for pattern in sorted(patterns):
        if "*" not in pattern and "?" not in pattern:
            continue  # not a pattern _matching is asked about (candidates: `_finite` or no glob)
        command_words._matching.cache_clear()
        assert command_words._matching(pattern, known) == every_match(pattern, known), pattern
        compared += 1
    assert compared > 1500


def test_a_known_name_set_with_names_sharing_a_prefix_and_a_suffix() -> None:
    known = frozenset({"ab", "abb", "abab", "b", "ba", "a\U0010ffffb", "a", "bab", ""})
    for pattern in ["ab*b", "a*", "*b", "*", "?", "a*b", "b*", "*a*", "a\U0010ffff*"]:
        command_words._matching.cache_clear()
        assert command_words._matching(pattern, known) == every_match(pattern, known), pattern


def test_a_typed_expression_that_is_a_pattern_still_may_run_a_program_nothing_knows() -> None:
    """`7*7` typed at a prompt is a globbed command word to a shell: no known name matches, and an unknown one may."""
    assert candidates("7*7", known_names()) == ([], True)
    names, unknown = candidates("/usr/bin/r?", known_names())
    assert "/usr/bin/rm" in names and unknown
