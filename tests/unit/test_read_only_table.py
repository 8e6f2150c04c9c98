"""The tier-0 list (relay_shell/policy/read_only.py) walked entry by entry: each program says why it is read-only,
is read-only when run bare, and every spelling of its options, sub-commands or operands that writes, runs or
changes something (the table's PROBES, and every option the option table marks as writing, acting or running)
classifies at tier 1 or more."""

from __future__ import annotations

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.calls import Context
from relay_shell.policy.classify import classify
from relay_shell.policy.output_options import SPECS
from relay_shell.policy.read_only import PROBES, READ_ONLY
from relay_shell.policy.rules import RULES, program_verdict

# What a program's command-running option takes, where it has a syntax of its own (ugrep --filter EXTS:COMMAND).
_RUN_VALUES = {("ugrep", "--filter"): "txt:touch M"}
# Rules on tier-0 programs that only read their arguments more finely (they lower nothing and find no writes).
_RULES_WITHOUT_WRITES = {"((", "local", "typeset", "unset"}


def tier(command: str) -> int:
    return classify(Subject(command=command)).tier


@pytest.mark.parametrize("program", sorted(READ_ONLY))
def test_each_entry_says_why_and_is_read_only_when_run_bare(program: str) -> None:
    reason = READ_ONLY[program]
    assert len(reason) >= 20, (program, reason)
    found = program_verdict(program, [program], Context())
    assert found.tier == 0, (program, found)


@pytest.mark.parametrize(
    ("program", "spelling"), [(name, spelling) for name, spellings in PROBES.items() for spelling in spellings]
)
def test_each_writing_or_running_spelling_is_not_read_only(program: str, spelling: str) -> None:
    assert program in READ_ONLY
    assert tier(spelling) >= 1, spelling


def test_every_program_with_a_rule_of_its_own_lists_what_it_does() -> None:
    """A tier-0 program with a rule has options or operands that act: the table must name them."""
    missing = sorted(
        name for name in READ_ONLY if name in RULES and name not in PROBES and name not in _RULES_WITHOUT_WRITES
    )
    spec_only = [name for name in missing if name in SPECS]  # their options are walked below
    assert [name for name in missing if name not in spec_only] == []


def _spec_spellings() -> list[tuple[str, str, int]]:
    spellings = []
    for program, spec in SPECS.items():
        if program not in READ_ONLY:
            continue
        for option in sorted(spec.outputs):
            spellings.append((program, f"{program} {option} out.txt x", 1))
        for option in sorted(spec.acts):
            value = " 1" if option in spec.values else ""
            spellings.append((program, f"{program} {option}{value} x", spec.acts[option][0]))
        for option in sorted(spec.runs):
            joined = "=" if option.startswith("--") and not spec.single_dash else " "
            value = _RUN_VALUES.get((program, option), "touch M")
            spellings.append((program, f"{program} {option}{joined}'{value}' x", 1))
        for verb in sorted(spec.verbs):
            spellings.append((program, f"{program} {verb}", spec.verbs[verb][0]))
    return spellings


@pytest.mark.parametrize(("program", "spelling", "least"), _spec_spellings())
def test_each_option_the_option_table_marks_is_handled(program: str, spelling: str, least: int) -> None:
    assert tier(spelling) >= least, spelling
