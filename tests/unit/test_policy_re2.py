"""The policy's patterns in RE2 (settings/patterns.py) keep what the policy relied on with Python's `re`: search
anywhere in the text, case-sensitive unless the pattern says (?i), `$` also before a final newline; RE2's silent
differences are rewritten to keep `re`'s meaning, refused, or documented (README, "Operator patterns", whose table
the tests read). Through the server: tests/e2e/policy/test_policy_re2.py."""

from __future__ import annotations

import ast
import random
import re
import time
import unicodedata
import warnings

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.admission import Policy
from relay_shell.settings.model import Settings
from relay_shell.settings.patterns import OperatorPattern, compile_re2, matches
from tests.conftest import REPO_ROOT


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
    started = time.process_time()
    assert not matches(pattern, "a" * 100_000 + "!")
    assert time.process_time() - started < 1.0  # `re` would not finish in the lifetime of the machine


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


def readme_pattern_rows() -> list[tuple[str, str | None, str, str]]:
    """The README's table of RE2 differences: (pattern, text or None, `re`'s result, relay-shell's)."""
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme.split("<!-- pattern-differences:start -->")[1].split("<!-- pattern-differences:end -->")[0]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        example, results = cells[-2], cells[-1]
        literals = re.findall(r"`([^`]+)`", example)
        pattern = ast.literal_eval(literals[0])
        text = ast.literal_eval(literals[1]) if len(literals) > 1 else None
        with_re, with_relay_shell = (part.strip() for part in results.split("/"))
        rows.append((pattern, text, with_re, with_relay_shell))
    return rows


def python_re(pattern: str, text: str | None) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # `[[` is a FutureWarning ("possible nested set")
        try:
            compiled = re.compile(pattern)
        except re.error:
            return "error"
    if text is None:
        return "accepted"
    return "match" if compiled.search(text) else "no match"


def relay_shell_re2(pattern: str, text: str | None) -> str:
    try:
        (compiled,) = compile_re2([pattern])
    except ValueError:
        return "refused"
    if text is None:
        return "accepted"
    return "match" if matches(compiled, text) else "no match"


def test_the_syntax_differences_the_readme_lists() -> None:
    """Every row of the README's table ("Operator patterns") says what `re` and relay-shell do with its example."""
    rows = readme_pattern_rows()
    assert len(rows) >= 15
    for pattern, text, with_re, with_relay_shell in rows:
        assert python_re(pattern, text) == with_re, (pattern, text)
        assert relay_shell_re2(pattern, text) == with_relay_shell, (pattern, text)


CLASS_CHARACTERS = "".join(chr(code) for code in range(0x30000) if not 0xD800 <= code < 0xE000)


@pytest.mark.parametrize("escape", ["s", "S", "d", "D", "w", "W"])
def test_the_classes_match_what_re_matches(escape: str) -> None:
    """\\s \\d \\w and their negations, alone and inside brackets, against every character of the BMP and the
    planes after it: what `re` matches, RE2 matches too; a character RE2 adds is one the interpreter's Unicode
    tables do not have yet (README)."""
    for pattern in (f"(?:\\{escape})+", f"[\\{escape}]+", f"[^\\{escape}]+"):  # runs: fewer matches, faster
        (compiled,) = compile_re2([pattern])
        assert isinstance(compiled, OperatorPattern)
        theirs = set(re.sub(pattern, "", CLASS_CHARACTERS))  # the characters it does not match
        ours = set(compiled.compiled.sub("", CLASS_CHARACTERS))  # with the RE2 pattern the translation compiled
        assert {unicodedata.category(character) for character in theirs ^ ours} <= {"Cn"}, pattern


@pytest.mark.parametrize(
    "pattern",
    [r"\bshutdown\b", r"\b(rm|mv)\b", r"(?i)\bkill\b", r"rm\b", r"\b[a-z]+sh\b", r"(?:\brm)+"],
)
def test_a_word_boundary_beside_an_ascii_word_character_never_misses_a_match_of_re(pattern: str) -> None:
    texts = ["shutdown", "\xe9shutdown", " shutdown ", "rm x", "xrm", "\u212aill", " \u212aILL", "kill\xe9", "mv",
             "a rm", "bash", "\u0431ash", "\xe9rm", "zsh\u0301"]  # fmt: skip
    (compiled,) = compile_re2([pattern])
    for text in texts:
        if re.search(pattern, text):
            assert matches(compiled, text), (pattern, text)


ATOMS = ["a", "b", "r", "m", "-", " ", "\xe9", "\u0663", ".", r"\s", r"\S", r"\w", r"\W", r"\d", r"\D", "[a-z]",
         r"[\s;]", r"[^\w]", r"[\d_]", r"\b", r"\u00e9", "$", "^"]  # fmt: skip
TEXT_CHARACTERS = "abrm- \t\v\xa0\u3000\xe9\u0663\u0431_;1\n\u212a\u0131K"


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        if depth < 2 and rng.random() < 0.15:
            alternatives = [random_pattern(rng, depth + 1) for _ in range(rng.randint(1, 3))]
            part = "(?:" + "|".join(alternatives) + ")"
        else:
            part = rng.choice(ATOMS)
        if part not in ("$", "^", r"\b") and rng.random() < 0.3:
            part += rng.choice(["*", "+", "?", "{1,2}", "{0,3}", "+?"])
        parts.append(part)
    return ("(?i)" if depth == 0 and rng.random() < 0.2 else "") + "".join(parts)


def test_random_patterns_match_what_re_matches() -> None:
    """A differential test of the class: random patterns of the constructs RE2 reads otherwise, random texts of
    characters where the readings differ. Whatever relay-shell accepts matches what `re` matches, except that an
    accepted \\b may also match beside a non-ASCII letter (README): never fewer matches."""
    rng = random.Random(30)
    accepted = 0
    for _ in range(3000):
        pattern = random_pattern(rng)
        try:
            (compiled,) = compile_re2([pattern])
        except ValueError as refused:
            assert "\\b" in str(refused) or "$ followed" in str(refused), pattern  # all this grammar may meet
            continue
        accepted += 1
        expected = re.compile(pattern)
        for _ in range(20):
            text = "".join(rng.choice(TEXT_CHARACTERS) for _ in range(rng.randint(0, 8)))
            theirs = expected.search(text) is not None
            ours = matches(compiled, text)
            if r"\b" in pattern:
                assert ours or not theirs, (pattern, text)
            else:
                assert ours == theirs, (pattern, text)
    assert accepted > 2000


@pytest.mark.parametrize(
    "pattern",
    [r"\b-rf", r"\b\xe9vil", r"\b\w+\b", r"\B", r"rm\B", r"\b(rm|\.)", r"(?i)\b.", r"x*\b", r"\b(?:)"],
)
def test_a_word_boundary_that_could_miss_a_match_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="is not a valid regex for relay-shell") as raised:
        compile_re2([pattern])
    assert repr(pattern) in str(raised.value) and "\\b" in str(raised.value).replace("\\B", "\\b")


def test_a_lone_surrogate_in_the_text_is_searched_and_still_denied() -> None:
    """Issue 30 review N1: RE2 matches UTF-8 and a lone surrogate cannot be encoded; `re` matched it as one
    character. The deny still matches, in the policy and in the exec trace's patterns (which call search)."""
    (anywhere,) = compile_re2([r"rm -rf /"])
    (dotted,) = compile_re2([r"a.x"])
    assert matches(anywhere, "\ud800rm -rf /\udcff") and matches(dotted, "a\udcffx")
    assert anywhere.search("x\udfff rm -rf /") is not None
    policy = Policy("open", deny=[r"^rm -rf /$"])
    assert policy.decide(Subject(command="rm -rf /", stdin="\ud800")).denied
    assert policy.decide(Subject(command="echo \ud800; rm -rf /")).denied  # its canonical `rm -rf /`
    assert not policy.decide(Subject(command="echo \ud800 rm -rf /")).denied  # anchored: as with re


def test_a_pattern_holding_a_lone_surrogate_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match="lone UTF-16 surrogate"):
        compile_re2(["rm\ud800"])


def test_the_policy_reports_the_pattern_as_the_operator_wrote_it() -> None:
    decision = Policy("open", deny=[r"rm\s+-rf"]).decide(Subject(command="rm\x0b-rf /"))
    assert decision.denied and decision.reason == "matches deny pattern 'rm\\\\s+-rf'"
    settings = Settings(policy={"policy_deny": [r"rm\s+-rf"]})
    assert settings.model_dump(mode="json")["policy"]["policy_deny"] == [r"rm\s+-rf"]


def test_the_settings_compile_once_and_the_policy_uses_their_patterns() -> None:
    settings = Settings(policy={"policy_deny": '["^rm -rf /$"]', "policy_allow": ["^systemctl restart nginx$"]})
    policy = Policy("guarded", settings.policy.policy_deny, settings.policy.policy_allow)
    assert policy.deny[0] is settings.policy.policy_deny[0] and policy.allow[0] is settings.policy.policy_allow[0]
    assert policy.decide(Subject(command="rm -rf /")).denied
    assert not policy.decide(Subject(command="sudo systemctl restart nginx")).denied
