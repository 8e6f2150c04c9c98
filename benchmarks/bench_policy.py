"""The classifier measured against real commands: the hand-labelled tldr-pages sets and the whole corpus.

Prints, for the labelled set (tests/data/tier_labels.jsonl) and the held-out fresh set
(tests/data/tier_labels_fresh.jsonl): exact-tier agreement, misses (label >= 2 rated <= 1, guarded mode would run
them) with every label-3 miss listed, false alarms (label 0 rated >= 2, guarded mode would refuse them) and the
confusion matrix. Then the throughput over the whole corpus (29,496 tldr-pages commands, read from
shared/corpus/tldr-commands.jsonl beside the repository (or beside the worktrees' directory) or
RELAY_SHELL_BENCH_CORPUS) and the slowest single command.

Targets, which decide the exit status: on the labelled set, no label-3 command rated <= 1, and issue 26's "no worse
than today": misses <= 1%, false alarms <= 0.5%, exact >= 93% (issue 17's were 3%, 3%, 85%); over the corpus,
>= 40,000 commands/s (issue 26; issue 17 asked 20,000) and no command over 5 ms. The fresh set is printed and
reported against the same figures for information, never gated: it measures how well the rules carry over to
commands nobody looked at while tuning, and a gate there would invite tuning against it.

Usage: .venv/bin/python -m benchmarks.bench_policy [--list-misses] [--list-false-alarms] [--list-wrong] [--no-fresh]
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from relay_shell.plan import Subject
from relay_shell.policy.classify import classify

ROOT = Path(__file__).resolve().parent.parent
LABELLED = ROOT / "tests" / "data" / "tier_labels.jsonl"
FRESH = ROOT / "tests" / "data" / "tier_labels_fresh.jsonl"
_SHARED = [base / "shared" / "corpus" / "tldr-commands.jsonl" for base in (ROOT.parent, ROOT.parent.parent)]
CORPUS = Path(
    os.environ.get("RELAY_SHELL_BENCH_CORPUS") or next((path for path in _SHARED if path.exists()), _SHARED[0])
)

MISS_TARGET = 0.01
FALSE_ALARM_TARGET = 0.005
EXACT_TARGET = 0.93
THROUGHPUT_TARGET = 40_000
SLOWEST_TARGET_MS = 5.0


@dataclass
class Labelled:
    command: str
    label: int
    why: str


@dataclass
class Scores:
    total: int = 0
    exact: int = 0
    stateful: int = 0  # label >= 2
    misses: list[tuple[Labelled, int]] = field(default_factory=list)
    read_only: int = 0  # label 0
    false_alarms: list[tuple[Labelled, int]] = field(default_factory=list)
    wrong: list[tuple[Labelled, int]] = field(default_factory=list)
    confusion: list[list[int]] = field(default_factory=lambda: [[0] * 4 for _ in range(4)])

    @property
    def miss_rate(self) -> float:
        return len(self.misses) / self.stateful if self.stateful else 0.0

    @property
    def false_alarm_rate(self) -> float:
        return len(self.false_alarms) / self.read_only if self.read_only else 0.0

    @property
    def exact_rate(self) -> float:
        return self.exact / self.total if self.total else 0.0

    @property
    def label3_misses(self) -> list[tuple[Labelled, int]]:
        return [(item, tier) for item, tier in self.misses if item.label == 3]


def load_labels(path: Path) -> list[Labelled]:
    """The labelled commands; lines labelled null (not shell commands: key presses, crontab lines) are left out."""
    items = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["label"] is not None:
                items.append(Labelled(row["command"], row["label"], row.get("why", "")))
    return items


def tier_of(command: str) -> int:
    return classify(Subject(command=command)).tier


def score(items: list[Labelled]) -> Scores:
    scores = Scores()
    for item in items:
        tier = tier_of(item.command)
        scores.total += 1
        scores.confusion[item.label][tier] += 1
        if tier == item.label:
            scores.exact += 1
        else:
            scores.wrong.append((item, tier))
        if item.label >= 2:
            scores.stateful += 1
            if tier <= 1:
                scores.misses.append((item, tier))
        if item.label == 0:
            scores.read_only += 1
            if tier >= 2:
                scores.false_alarms.append((item, tier))
    return scores


def report(
    name: str, scores: Scores, list_misses: bool, list_false_alarms: bool, list_wrong: bool, gated: bool = True
) -> bool:
    print(f"== {name}: {scores.total} commands")
    print(f"exact tier      {scores.exact_rate:7.1%}  ({scores.exact}/{scores.total})  target >= {EXACT_TARGET:.1%}")
    print(
        f"misses          {scores.miss_rate:7.1%}  ({len(scores.misses)}/{scores.stateful} labelled 2-3 rated 0-1)"
        f"  target <= {MISS_TARGET:.1%}"
    )
    print(f"label-3 misses  {len(scores.label3_misses):7d}  target 0")
    print(
        f"false alarms    {scores.false_alarm_rate:7.1%}  ({len(scores.false_alarms)}/{scores.read_only} labelled 0 "
        f"rated 2-3)  target <= {FALSE_ALARM_TARGET:.1%}"
    )
    print("confusion (rows: label, columns: rated)")
    print("          " + "".join(f"{tier:>7}" for tier in range(4)))
    for label in range(4):
        print(f"  label {label} " + "".join(f"{count:>7}" for count in scores.confusion[label]))
    for item, tier in scores.label3_misses:
        print(f"  LABEL-3 MISS rated {tier}: {item.command}   [{item.why}]")
    if list_misses:
        for item, tier in scores.misses:
            if item.label != 3:
                print(f"  miss {item.label}->{tier}: {item.command}   [{item.why}]")
    if list_false_alarms:
        for item, tier in scores.false_alarms:
            print(f"  false alarm 0->{tier}: {item.command}   [{item.why}]")
    if list_wrong:
        for item, tier in scores.wrong:
            print(f"  wrong {item.label}->{tier}: {item.command}   [{item.why}]")
    ok = (
        not scores.label3_misses
        and scores.miss_rate <= MISS_TARGET
        and scores.false_alarm_rate <= FALSE_ALARM_TARGET
        and scores.exact_rate >= EXACT_TARGET
    )
    if gated:
        print(f"{name}: {'PASS' if ok else 'FAIL'}")
    else:
        print(f"{name}: {'meets' if ok else 'below'} the targets (reported, not gated)")
    return ok


def corpus_commands() -> list[str]:
    if not CORPUS.exists():
        print(f"corpus {CORPUS} not found (set RELAY_SHELL_BENCH_CORPUS): throughput over the labelled sets only")
        return [item.command for item in load_labels(LABELLED) + load_labels(FRESH)]
    with CORPUS.open(encoding="utf-8") as handle:
        return [json.loads(line)["command"] for line in handle]


def speed() -> bool:
    commands = corpus_commands()
    for command in commands[:500]:  # warm the caches (regexes, lru caches) as a running server has them
        tier_of(command)
    timed: list[tuple[float, str]] = []
    for command in commands:
        before = time.perf_counter()
        tier_of(command)
        timed.append((time.perf_counter() - before, command))
    # Throughput: the best of five passes without per-command timing, in wall time and in this process's CPU time.
    # The target is read on the CPU time: on a machine shared with other work the wall time measures the others.
    passes, cpu_passes = [], []
    for _ in range(5):
        started, started_cpu = time.perf_counter(), time.process_time()
        for command in commands:
            tier_of(command)
        passes.append(time.perf_counter() - started)
        cpu_passes.append(time.process_time() - started_cpu)
    throughput = len(commands) / min(cpu_passes)
    wall_throughput = len(commands) / min(passes)
    # The slowest commands once more, each alone and five times: a scheduler hiccup is not a slow command.
    candidates = sorted(timed, reverse=True)[:20]
    retimed = max((min(_time_one(command) for _ in range(5)), command) for _, command in candidates)
    print(
        f"== whole corpus: {len(commands)} commands, best of 5 passes {min(cpu_passes):.2f} s CPU, {min(passes):.2f} s"
    )
    print(f"throughput      {throughput:9,.0f} commands/s of CPU time  target >= {THROUGHPUT_TARGET:,}")
    print(f"                {wall_throughput:9,.0f} commands/s of wall time (for information)")
    print(f"slowest         {retimed[0] * 1000:9.3f} ms  target <= {SLOWEST_TARGET_MS} ms: {retimed[1][:160]}")
    ok = throughput >= THROUGHPUT_TARGET and retimed[0] * 1000 <= SLOWEST_TARGET_MS
    print(f"speed: {'PASS' if ok else 'FAIL'}")
    return ok


def _time_one(command: str) -> float:
    started = time.perf_counter()
    tier_of(command)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> bool:
    flags = set(argv if argv is not None else sys.argv[1:])
    listing = ("--list-misses" in flags, "--list-false-alarms" in flags, "--list-wrong" in flags)
    labelled_ok = report("labelled set", score(load_labels(LABELLED)), *listing)
    # --no-fresh while tuning: the held-out set is only looked at to check the result, never to tune it; its
    # figures are reported, and only the labelled set's targets and the speed decide the exit status.
    if "--no-fresh" not in flags:
        report("fresh set (held out)", score(load_labels(FRESH)), False, False, False, gated=False)
    speed_ok = speed()
    return labelled_ok and speed_ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
