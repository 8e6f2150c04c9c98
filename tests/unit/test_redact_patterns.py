"""Redaction patterns match the same on every Python: possessive quantifiers of groups are compiled as the
atomic groups they mean. Python before 3.11.5 (Debian 12's python3 is 3.11.2) matched some of them wrongly
(CPython gh-106052), and redaction let secrets through; CI runs this file on that interpreter."""

from __future__ import annotations

import pytest

from relay_shell.redaction.pattern_compiler import compile_pattern, possessive_as_atomic
from relay_shell.redaction.redact import redact


def test_the_cpython_bug_report_example_matches_as_an_atomic_group() -> None:
    # gh-106052: on 3.11.2 `re.fullmatch('(?:ab?c)*+', 'a')` matched although `(?:ab?c)*` does not.
    assert compile_pattern("(?:ab?c)*+").fullmatch("a") is None
    assert compile_pattern("(?:ab?c)*+").fullmatch("abcac") is not None


@pytest.mark.parametrize(
    ("pattern", "rewritten"),
    [
        ("(?:ab?c)*+", "(?>(?:ab?c)*)"),
        ("(x|y){0,3}+z", "(?>(x|y){0,3})z"),
        ("(?i:a|b)++", "(?>(?i:a|b)+)"),
        # Single-character repeats keep their possessive form (no backtracking inside them: not affected).
        (r"[^'\n]*+'?", r"[^'\n]*+'?"),
        (r"\S++", r"\S++"),
        (r"[a-z]{30,}+", r"[a-z]{30,}+"),
        # Lazy and greedy quantifiers, escapes, classes with `]` and `(`, inline flags and lookarounds stay.
        (r"(?i)(?<![\w-])(a+?)(?=b)\(\[\]]", r"(?i)(?<![\w-])(a+?)(?=b)\(\[\]]"),
        (r"[](+]++(?P<name>x)?", r"[](+]++(?P<name>x)?"),
    ],
)
def test_possessive_groups_become_atomic_groups(pattern: str, rewritten: str) -> None:
    assert possessive_as_atomic(pattern) == rewritten


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("git config --global github.token gc-1", "gc-1"),
        ("redis-cli CONFIG SET requirepass rcs-1", "rcs-1"),
        ("aws configure set aws_secret_access_key awsc-1", "awsc-1"),
    ],
)
def test_config_set_secrets_are_redacted_on_this_interpreter(text: str, secret: str) -> None:
    assert secret not in redact(text)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ('echo "token: tk-echo-1" && ls', '" && ls'),
        ("curl -H 'x-api-key: xak-444' https://api.example", " https://api.example"),
        ("curl 'https://x.example/login?user=bob&pwd=pw-111'", "'"),
    ],
)
def test_a_value_ends_where_the_shell_word_ends_on_this_interpreter(text: str, kept: str) -> None:
    assert redact(text).endswith(kept)
