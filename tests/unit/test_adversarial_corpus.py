"""The adversarial corpus (tests/data/adversarial/) against the classifier and the policy, in process: every
command case, in its mode, gets the decision the file says. The same cases run end to end in
tests/e2e/policy/test_adversarial_e2e.py, where a marker file must not appear."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.admission import Policy
from tests.adversarial import CORPUS, load_cases, tool_call

ROOT = "/tmp/adversarial"
CASES = load_cases()


def _values(case_id: str) -> dict[str, str]:
    base = f"{ROOT}/{case_id}"
    return {
        "{marker}": f"{base}/marker",
        "{case}": base,
        "{doomed}": f"{base}/doomed",
        "{pid}": "424242",
        "{repo}": f"{ROOT}/repo",
        "{tar}": f"{ROOT}/archive.tar",
        "{text}": f"{ROOT}/text.txt",
    }


def subject_of(fields: dict[str, Any]) -> Subject:
    """The Subject the tool's plan classifies (relay_shell/local/plans.py)."""
    tool, arguments = tool_call(fields)
    env = tuple((arguments.get("env") or {}).items())
    if tool == "shell_script":
        return Subject(script=arguments["script"], interpreter=arguments["interpreter"], env=env)
    command = arguments["command"]
    if isinstance(command, list):
        return Subject(argv=tuple(command), stdin=arguments.get("stdin"), env=env)
    return Subject(command=command, stdin=arguments.get("stdin"), env=env)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_case_gets_its_decision(case: Any) -> None:
    fields = case.filled(_values(case.id))
    decision = Policy(case.mode).decide(subject_of(fields))
    text = fields.get("command") or fields.get("script") or fields.get("argv")
    shown = f"{case.id}: tier {decision.tier} ({decision.reason}) for {text!r}"
    if case.expect == "refused":
        assert decision.denied, shown
    elif case.expect == "confirm":
        assert not decision.denied and decision.tier == 3, shown
    else:
        assert not decision.denied, shown
        if case.mode == "open":
            assert decision.tier < 3, shown


def test_the_corpus_is_large_and_covers_every_class_in_every_mode() -> None:
    """≥ 400 cases; every class has refused cases, and all three modes appear; the issue's examples are in."""
    assert len(CASES) >= 400, len(CASES)
    by_class = Counter(case.fields["class"] for case in CASES)
    assert len(by_class) >= 12, by_class
    for name in by_class:
        refused = [case for case in CASES if case.fields["class"] == name and case.expect != "admitted"]
        assert len(refused) >= 6, (name, len(refused))  # an issue example and at least five more spellings
    assert {case.mode for case in CASES} == {"readonly", "guarded", "open"}
    assert sum(case.fields["source"] == "issue" for case in CASES) >= 30
    assert len({case.id for case in CASES}) == len(CASES)
    assert sorted(path.stem for path in CORPUS.glob("*.jsonl") if not path.stem.startswith("pty-")) == sorted(by_class)
