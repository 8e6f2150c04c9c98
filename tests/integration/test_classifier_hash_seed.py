"""A security decision and its reason must not depend on Python's hash seed: the classifier run under two
PYTHONHASHSEED values (in two processes) gives every command the same tier, reasons and canonical text. The
commands: the labelled tldr-pages sets, the adversarial corpus, and the whole tldr corpus when it is on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

_CLASSIFY = """
import json, sys
from relay_shell.plan import Subject
from relay_shell.policy.classify import classify
for line in sys.stdin:
    found = classify(Subject(command=json.loads(line)))
    print(json.dumps([found.tier, found.reasons, found.canonical]))
"""


def _commands() -> list[str]:
    commands = []
    for name in ("tier_labels.jsonl", "tier_labels_fresh.jsonl"):
        for line in (REPO_ROOT / "tests" / "data" / name).read_text(encoding="utf-8").splitlines():
            commands.append(json.loads(line)["command"])
    for path in sorted((REPO_ROOT / "tests" / "data" / "adversarial").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#") and "command" in json.loads(line):
                commands.append(json.loads(line)["command"])
    for corpus in (REPO_ROOT.parent / "shared" / "corpus", REPO_ROOT.parent.parent / "shared" / "corpus"):
        path = corpus / "tldr-commands.jsonl"
        if path.exists():
            commands += [json.loads(line)["command"] for line in path.read_text(encoding="utf-8").splitlines()]
            break
    return commands


def _classified(commands: list[str], seed: str) -> list[str]:
    environment = {**os.environ, "PYTHONHASHSEED": seed}
    text = "".join(json.dumps(command) + "\n" for command in commands)
    done = subprocess.run(
        [sys.executable, "-c", _CLASSIFY],
        input=text,
        capture_output=True,
        text=True,
        env=environment,
        cwd=Path(REPO_ROOT),
        timeout=600,
        check=True,
    )
    return done.stdout.splitlines()


def test_decisions_and_reasons_do_not_depend_on_the_hash_seed() -> None:
    commands = _commands()
    assert len(commands) > 2500
    first = _classified(commands, "1")
    second = _classified(commands, "4242")
    assert len(first) == len(second) == len(commands)
    differing = [command for command, one, two in zip(commands, first, second, strict=True) if one != two]
    assert differing == []
