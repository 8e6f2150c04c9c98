"""Python code as the policy reads it (policy/python_code.py): only calls are looked at, so a text without `(`
skips the walk of its tree. That holds because Python has no call without a parenthesis: checked here over
generated lines, and the calls written every way Python allows are still found."""

from __future__ import annotations

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
    ["7*7", "x = 6*7", "a[1:2]", "{1: 2}", "d['k']", "import os", "x if y else z", "@dec\nclass C: pass"],
)
def test_a_line_without_a_parenthesis_is_python_code_of_tier_1(code: str) -> None:
    verdict = python_verdict(code)
    assert (verdict.tier, verdict.reason, verdict.shell, verdict.commands) == (1, "python code", (), ())


@pytest.mark.parametrize("code", ["os.system", "f = os.system", "@exec\n@input\nclass X: pass", "@eval\nclass C: pass"])
def test_a_callable_that_runs_code_named_without_a_parenthesis_counts_as_called(code: str) -> None:
    """A call needs no `(`: a decorator calls its callable, a stored reference is called later (adr/0025 G4)."""
    assert python_verdict(code).tier >= 2, code
