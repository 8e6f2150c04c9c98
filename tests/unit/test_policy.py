"""Modes and patterns: deny first in every mode, guarded allows per command, readonly tier 0 only."""

from __future__ import annotations

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.admission import Policy


def test_open_admits_and_classifies() -> None:
    decision = Policy("open").decide(Subject(command="rm -rf /"))
    assert not decision.denied and decision.tier == 3 and decision.tier_name == "irreversible"


def test_deny_is_checked_first_in_every_mode_against_canonical_forms() -> None:
    for mode in ("open", "guarded", "readonly"):
        policy = Policy(mode, deny=[r"^rm -r"], allow=[r".*"])
        decision = policy.decide(Subject(command="sudo /bin/rm -r '/srv/data'"))
        assert decision.denied and decision.reason == "matches deny pattern '^rm -r'"


def test_deny_sees_stdin_and_env() -> None:
    policy = Policy("open", deny=["forbidden"])
    assert policy.decide(Subject(command="cat", stdin="forbidden")).denied
    assert policy.decide(Subject(command="ls", env=(("X", "forbidden"),))).denied
    assert not policy.decide(Subject(command="ls")).denied


def test_readonly() -> None:
    policy = Policy("readonly")
    assert not policy.decide(Subject(command="ls -la")).denied
    decision = policy.decide(Subject(command="touch x"))
    assert decision.denied and decision.reason.startswith("mode readonly admits tier 0 only")
    assert not policy.decide(Subject(fixed_tier=0)).denied


def test_guarded_needs_an_allow_for_every_stateful_command() -> None:
    policy = Policy("guarded", allow=[r"^systemctl restart nginx$"])
    assert not policy.decide(Subject(command="mkdir -p /tmp/x")).denied
    assert not policy.decide(Subject(command="sudo systemctl restart nginx")).denied
    assert policy.decide(Subject(command="systemctl restart nginx; rm -rf /srv")).denied
    assert policy.decide(Subject(command="systemctl stop nginx")).denied
    assert policy.decide(Subject(fixed_tier=2)).denied


@pytest.mark.parametrize("pattern", ["rm (-rf", "[unclosed"])
def test_bad_regex_names_the_pattern(pattern: str) -> None:
    with pytest.raises(ValueError, match="is not a valid regex"):
        Policy("open", deny=[pattern])


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="open, guarded, readonly"):
        Policy("paranoid")
