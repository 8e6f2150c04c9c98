"""The PTY dialogues of the adversarial corpus against the session classifier, in process: each spawn through the
real shell_spawn preparation, each step through the reading of typed input (sessions/reading.py) with the
session's state carried from step to step, decided by the policy in the case's mode. The same dialogues run
for real in tests/e2e/sessions/test_adversarial_pty.py."""

from __future__ import annotations

import termios
from types import SimpleNamespace
from typing import Any

import pytest

from relay_shell.policy.admission import Decision, Policy
from relay_shell.sessions.line_settings import DEFAULT_CHARACTERS
from relay_shell.sessions.plans import prepare_spawn
from relay_shell.sessions.reading import remember, typed_subject
from relay_shell.sessions.typed import Typing
from relay_shell.settings.model import Settings, by_area
from relay_shell.settings.sessions import DEFAULT_PASSPROMPT
from tests.pty_dialogues import dialogues, fill, fixed_places

CASES = dialogues()


def test_the_corpus_has_five_spellings_of_every_class_it_names() -> None:
    counts: dict[str, int] = {}
    for case in CASES:
        counts[case["class"]] = counts.get(case["class"], 0) + 1
    required = {"history-expansion", "tab-completion", "shell-escapes", "echo-off", "interactive-hooks"}
    assert required <= set(counts), counts
    assert all(count >= 6 for count in counts.values()), counts  # the example and five more
    assert len({case["id"] for case in CASES}) == len(CASES)
    assert {case["source"] for case in CASES} == {"issue", "review"}


def outcome(decision: Decision) -> str:
    if decision.denied:
        return "refused"
    return "confirm" if decision.tier == 3 else "admitted"


class _LocalTerminal:
    """The in-process stand-in for a local terminal (the dialogues run for real in the e2e test): a new
    terminal's settings, changed by a step's `terminal` field as the step's program would change them."""

    def __init__(self, mode: str) -> None:
        characters = [bytes([default]) for default, _ in DEFAULT_CHARACTERS.values()]
        self.characters = dict(zip(DEFAULT_CHARACTERS, characters, strict=True))
        self.input_flags = termios.ICRNL
        self.local_flags = termios.ICANON | termios.ISIG | termios.IEXTEN | termios.ECHO
        self.keeps = True  # what reads the terminal takes a line whole (a shell at its prompt)
        # Readonly as a host with Landlock confines it, nothing confined in the other modes (the dialogues decide
        # the same with readonly classifier-only: no rest of theirs is tier 1 alone).
        self.kernel_confined = mode == "readonly"
        self.kind = "local"

    def interrupt_clears_line(self) -> bool:
        return True  # the server's terminals start with ISIG on

    def directories(self) -> tuple[str, ...]:
        return ()  # no program: no working directory to read relative words in

    def line_settings(self) -> list[object]:
        characters: list[object] = [b"\x00"] * termios.NCCS
        for index, value in self.characters.items():
            characters[index] = value
        return [self.input_flags, 0, 0, self.local_flags, 0, 0, characters]

    def set(self, changes: dict[str, Any]) -> None:
        for name, value in changes.items():
            if name == "reader":
                self.keeps = value == "whole"
            elif name == "iflag":
                for flag in value:
                    self.input_flags |= getattr(termios, flag)
            else:
                self.characters[getattr(termios, name)] = value.encode()


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_the_session_classifier_decides_every_step(case: dict[str, Any]) -> None:
    case = fill(case, fixed_places(case["id"]))
    mode = case["mode"]
    policy = Policy(mode)
    settings = Settings(**by_area({"policy_mode": mode}))
    spawn = case["spawn"]
    plan = prepare_spawn(
        settings,
        SimpleNamespace(new_id=lambda: "s-000000000000"),  # type: ignore[arg-type]
        "owner",
        "client",
        command=spawn.get("command"),
        cols=120,
        rows=40,
        cwd=None,
        env=spawn.get("env"),
        until=spawn.get("until"),
        timeout=1.0,
    )
    spawned = outcome(policy.decide(plan.subject))
    assert spawned == case.get("spawn_expect", "admitted"), (spawned, plan.subject)
    session: Any = SimpleNamespace(
        typing=Typing(), history=[], open_input="", passprompt=DEFAULT_PASSPROMPT, terminal=_LocalTerminal(mode)
    )
    decided = []
    for step in case["steps"]:
        subject, typed = typed_subject(
            session, step["send"], step.get("enter", True), step.get("keys", []), session.terminal.keeps
        )
        decision = policy.decide(subject)
        decided.append((step["send"], outcome(decision), decision.reason))
        if not decision.denied:
            remember(session, typed)
            session.terminal.set(step.get("terminal", {}))
    assert [item[1] for item in decided] == [step["expect"] for step in case["steps"]], decided
    assert (decided[-1][1] if decided else spawned) == case["expect"]


# Review W3 (adr/0026 Round 7): where no kernel confines what the terminal runs, a rest of a line that a partial
# reader leaves to the shell is refused in readonly when it writes (tier 1), not only when it is tier 2 or more.
# A remote terminal's reader cannot be seen, so its every line is read at every rest (SshTerminal.keeps_lines).
# (mode, kernel confined, the line typed after `dd bs=6 count=1` took the terminal, expected outcome)
RESTS = [
    ("readonly", False, "echo xmv /etc/important /tmp/", "refused"),  # the remote shell (or classifier-only) runs mv
    ("readonly", False, "echo xtouch /etc/flag", "refused"),
    ("readonly", True, "echo xmv /etc/important /tmp/", "admitted"),  # Landlock refuses the rename itself
    ("readonly", False, "echo hello", "admitted"),  # no rest of it runs anything
    ("guarded", False, "qrm -rf /srv/data", "refused"),  # to a remote less: the rest is rm -rf (tier 3)
    ("guarded", False, "echo xsudo reboot", "refused"),
    ("guarded", False, "echo xmv /etc/important /tmp/", "admitted"),  # tier 1: guarded admits it anyway
]


@pytest.mark.parametrize(("mode", "confined", "line", "expected"), RESTS)
def test_a_rest_that_writes_is_refused_where_no_kernel_confines_it(
    mode: str, confined: bool, line: str, expected: str
) -> None:
    terminal = _LocalTerminal(mode)
    terminal.kernel_confined = confined
    terminal.keeps = False  # a program that may read a part of the line has the terminal (or it cannot be seen)
    session: Any = SimpleNamespace(
        typing=Typing(), history=[], open_input="", passprompt=DEFAULT_PASSPROMPT, terminal=terminal
    )
    policy = Policy(mode)
    subject, _ = typed_subject(session, line, True, [], terminal.keeps)
    decision = policy.decide(subject)
    assert outcome(decision) == expected, (line, decision.tier, decision.reason)
