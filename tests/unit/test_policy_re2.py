"""The policy's patterns in RE2 (settings/patterns.py) keep what the policy relied on with Python's `re`: search
anywhere in the text, case-sensitive unless the pattern says (?i), `$` also before a final newline; RE2's silent
differences are refused or documented (README). Through the server: tests/e2e/policy/test_policy_re2.py."""

from __future__ import annotations

import time

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.admission import Policy
from relay_shell.settings.model import Settings
from relay_shell.settings.patterns import compile_re2, matches


def test_dollar_still_matches_before_a_final_newline_as_with_re() -> None:
    """RE2's `$` is the end of the text only; a deny pattern written for `re` must keep refusing `reboot\\n`."""
    policy = Policy("open", deny=[r"^reboot$"])
    assert policy.decide(Subject(command="reboot\n")).denied
    assert policy.decide(Subject(command="cat", stdin="reboot\n")).denied
    assert not policy.decide(Subject(command="cat", stdin="reboot\n\n")).denied  # as with re: one newline only
    assert not policy.decide(Subject(command="reboot now")).denied


def test_search_anywhere_and_case_as_written() -> None:
    policy = Policy("open", deny=["shutdown", "(?i)HALT"])
    assert policy.decide(Subject(command="echo x; shutdown -h now")).denied
    assert not policy.decide(Subject(command="SHUTDOWN")).denied
    assert policy.decide(Subject(command="halt")).denied


def test_a_backtracking_pattern_is_linear() -> None:
    (pattern,) = compile_re2([r"(a+)+$"])
    started = time.perf_counter()
    assert not matches(pattern, "a" * 100_000 + "!")
    assert time.perf_counter() - started < 1.0  # `re` would not finish in the lifetime of the machine


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"rm(?!dir)", "invalid perl operator: (?!"),
        (r"(?<=sudo )rm", "invalid perl operator: (?<="),
        (r"(?P<verb>rm) (?P=verb)", "invalid perl operator: (?P"),
        (r"(?>rm)", "invalid perl operator: (?>"),
        (r"rm\Z", "invalid escape sequence: \\Z"),
        (r"x{1001}", "invalid repetition size: {1001}"),
        (r"rm -r{,1}f", "{,1} repeats in Python's re"),
        (r"a{,}", "{,} repeats in Python's re"),
    ],
)
def test_a_pattern_re2_would_refuse_or_read_otherwise_names_the_construct(pattern: str, construct: str) -> None:
    with pytest.raises(ValueError, match="is not a valid regex") as raised:
        Policy("open", deny=[pattern])
    assert repr(pattern) in str(raised.value) and construct in str(raised.value)


@pytest.mark.parametrize("pattern", [r"[{,1}]", r"\{,1}", r"[]{,1}]", r"[^]{,]"])
def test_braces_that_are_literal_in_both_are_accepted(pattern: str) -> None:
    compile_re2([pattern])


def test_the_syntax_differences_the_readme_lists() -> None:
    """What stays different and is documented rather than refused: RE2's classes are ASCII, `\\z` is the end."""
    digit, word, space, end = compile_re2([r"\d", r"\w", r"\s", r"a\z"])
    assert not matches(digit, "٣") and not matches(word, "é") and not matches(space, "\v")
    assert matches(end, "a") and not matches(end, "ab")


def test_the_settings_compile_once_and_the_policy_uses_their_patterns() -> None:
    settings = Settings(policy={"policy_deny": '["^rm -rf /$"]', "policy_allow": ["^systemctl restart nginx$"]})
    policy = Policy("guarded", settings.policy.policy_deny, settings.policy.policy_allow)
    assert policy.deny[0] is settings.policy.policy_deny[0] and policy.allow[0] is settings.policy.policy_allow[0]
    assert policy.decide(Subject(command="rm -rf /")).denied
    assert not policy.decide(Subject(command="sudo systemctl restart nginx")).denied
