"""The classifier against the hand-labelled tldr-pages commands (tests/data/tier_labels.jsonl, labelled by the
rubric in adr/0004 before the classifier was tuned; NOTICE for the source). Correctness against labels, not
speed: throughput and latency are in benchmarks/bench_policy.py, which also reports the held-out fresh set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay_shell.plan import Subject
from relay_shell.policy.classify import classify

LABELS = Path(__file__).resolve().parents[1] / "data" / "tier_labels.jsonl"


def _labelled() -> list[tuple[str, int]]:
    with LABELS.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    # Lines labelled null are not shell commands (key presses, crontab lines): left out of every measurement.
    return [(row["command"], row["label"]) for row in rows if row["label"] is not None]


@pytest.fixture(scope="module")
def rated() -> list[tuple[str, int, int]]:
    return [(command, label, classify(Subject(command=command)).tier) for command, label in _labelled()]


def test_the_labelled_set_is_large_and_covers_every_tier() -> None:
    labels = [label for _command, label in _labelled()]
    assert len(labels) >= 1500
    assert all(labels.count(tier) >= 200 for tier in range(4))


def test_no_irreversible_command_is_rated_as_admissible_in_guarded_mode(rated: list[tuple[str, int, int]]) -> None:
    missed = [f"{command} (rated {tier})" for command, label, tier in rated if label == 3 and tier <= 1]
    assert not missed, "label-3 commands rated 0 or 1:\n" + "\n".join(missed)


def test_misses_false_alarms_and_exact_tier_meet_the_targets(rated: list[tuple[str, int, int]]) -> None:
    stateful = [(command, tier) for command, label, tier in rated if label >= 2]
    read_only = [(command, tier) for command, label, tier in rated if label == 0]
    misses = [command for command, tier in stateful if tier <= 1]
    false_alarms = [command for command, tier in read_only if tier >= 2]
    exact = sum(1 for _command, label, tier in rated if label == tier)
    assert len(misses) <= 0.03 * len(stateful), misses
    assert len(false_alarms) <= 0.03 * len(read_only), false_alarms
    assert exact >= 0.85 * len(rated), f"exact tier {exact}/{len(rated)}"
