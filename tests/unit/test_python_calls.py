"""Python code as the policy reads it (policy/python_code.py): only calls are looked at, so a text without `(`
skips the walk of its tree. That holds because Python has no call without a parenthesis: checked here over
generated lines, and the calls written every way Python allows are still found."""

from __future__ import annotations

import ast
import random
import warnings

import pytest

from relay_shell.policy.python_code import python_verdict

CALLS = [
    'os.system("rm -rf /srv/x")',
    '(os.system)("rm -rf /srv/x")',
    "f\"{os.system('rm -rf /srv/x')}\"",
    '@os.system("rm -rf /srv/x")\ndef f(): pass',
    'x = lambda: os.system("rm -rf /srv/x")',
    '[os.system(c) for c in ["rm -rf /srv/x"]]',
    'shutil.rmtree("/srv/x")',
    'os.remove("/srv/x")',
    'subprocess.run(["rm", "-rf", "/srv/x"])',
    'eval("1")',
    'x = 1\nos.system("rm -rf /srv/x")',
    'open("/srv/x", "w")',
]


@pytest.mark.parametrize("code", CALLS)
def test_a_call_written_any_way_is_still_classified(code: str) -> None:
    assert python_verdict(code).tier >= 2, code


@pytest.mark.parametrize(
    "code",
    ["7*7", "x = 6*7", "a[1:2]", "{1: 2}", "d['k']", "import os", "os.system", "x if y else z", "@dec\nclass C: pass"],
)
def test_a_line_without_a_parenthesis_is_python_code_of_tier_1(code: str) -> None:
    verdict = python_verdict(code)
    assert (verdict.tier, verdict.reason, verdict.shell, verdict.commands) == (1, "python code", (), ())


def test_no_python_text_without_a_parenthesis_holds_a_call() -> None:
    """The property the shortcut stands on, over random Python-like lines (most do not parse)."""
    rng = random.Random(27)
    pieces = ["os", ".", "system", "f", "x", "@", "[", "]", "{", "}", ":", "=", "*", "lambda", " ", "'a'", '"b"', "\n"]
    pieces += ["f'{", "}'", "print", ",", "1", "+", "import ", "from ", "if ", "else ", "class ", "def ", "->", ";"]
    parsed = 0
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # `'a'1` and the like warn before they fail
                tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        parsed += 1
        assert not any(isinstance(node, ast.Call) for node in ast.walk(tree)), text
    assert parsed > 1000
