"""What reading every rest of a line typed into a remote terminal costs the server, per `session_send` (adr/0026
Rounds 7–8): the policy's reading of one typed line for an `ssh_spawn` session (sessions/reading.typed_subject,
then the decision), where every rest of the line is classified because the remote reader cannot be seen. It runs
on the event loop, so every other client waits for it.

In process, CPU time of the thread (time.thread_time), per send, for lines of 16, 64, 256 and 512 characters of
five kinds: realistic (several commands, one long pipeline, a loop over hosts) and adversarial (a quoted string
full of separators, one long command of many words). Each line is measured with its rests classified (the remote
terminal) and with the line kept whole (a local shell at its prompt), so the difference is what the rests cost.

`--before REV` measures the code of commit REV beside this checkout, batches interleaved in one run (each tree in
a child process importing its own relay_shell). The rows: the largest CPU per send of a 512-character line here,
of the realistic kinds and of the adversarial ones.

Usage: python -m benchmarks.bench_remote_rests [--before REV]"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

from benchmarks.common import Options, Row, code_at, run_alone, this_code

LENGTHS = (16, 64, 256, 512)
ROUNDS = 5  # batches per tree, interleaved with the other tree's
LIMIT_MS = 5.0  # CPU per send of a 512-character line at most: a send should not hold the loop longer
REALISTIC = ("commands", "pipeline", "loop")
ROWS = {
    "realistic": "remote typed line, 512 characters (commands, pipeline, loop), CPU per send",
    "adversarial": "remote typed line, 512 characters (quoted, one command), CPU per send",
}

# Pieces a line of each kind is made of, repeated and cut at a piece's end, then padded with spaces (trailing
# spaces add no rest) to the exact length.
KINDS = {
    "commands": ("uptime; ", "df -h /; ", "free -m; ", "ls -la /var/log; ", "cat /etc/hostname; ", "who; "),
    "pipeline": (
        "ps aux ",
        "| grep -v grep ",
        "| awk '{print $2, $11}' ",
        "| sort -k2 ",
        "| uniq -c ",
        "| sort -rn ",
        "| head -n 20 ",
    ),
    "loop": ("for host in web1 web2 db1 cache1; do ", "echo $host; ", "getent hosts $host; ", "done; "),
    "quoted": ('echo "', "a;b|c&&d ", "x||y ", "$(date) ", "`id` ", "'q' ", 'e\\"f ', "> out ", '"; '),
    "single": ("grep -rn --include=*.conf ", "-e listen ", "-e server_name ", "-e ssl_certificate ", "/etc/nginx "),
}

# Runs in a child process whose working directory is a tree's root, so it imports that tree's relay_shell.
WORKER = r"""
import json, sys, termios, time
from types import SimpleNamespace
from relay_shell.policy.admission import Policy
from relay_shell.sessions.reading import typed_subject
from relay_shell.sessions.typed import Typing
from relay_shell.settings.sessions import DEFAULT_PASSPROMPT

class Terminal:
    kind = "ssh"
    kernel_confined = False
    def interrupt_clears_line(self):
        return True
    def line_settings(self):
        return None

def send(policy, line, kept_whole):
    session = SimpleNamespace(
        typing=Typing(), history=[], open_input="", passprompt=DEFAULT_PASSPROMPT, terminal=Terminal()
    )
    subject, _ = typed_subject(session, line, True, [], kept_whole)
    return policy.decide(subject)

lines = json.loads(sys.argv[1])
policy = Policy("readonly")
result = {}
for line in lines:
    for kept_whole in (False, True):
        decision = send(policy, line, kept_whole)  # warm
        repeat = max(2, 2000 // (len(line) * (1 if kept_whole else 8)))
        started = time.thread_time()
        for _ in range(repeat):
            send(policy, line, kept_whole)
        cost = (time.thread_time() - started) / repeat
        result[f"{kept_whole}:{line}"] = [cost, decision.tier, decision.denied]
print(json.dumps(result))
"""


def line_of(kind: str, length: int) -> str:
    pieces = KINDS[kind]
    text = ""
    index = 0
    while len(text + pieces[index % len(pieces)]) <= length:
        text += pieces[index % len(pieces)]
        index += 1
    if not text:
        text = pieces[0][:length]
    return text.ljust(length)


def lines() -> list[tuple[str, int, str]]:
    return [(kind, length, line_of(kind, length)) for kind in KINDS for length in LENGTHS]


def batch(root: Path, texts: list[str]) -> dict[str, list[float]]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(texts)], cwd=root, capture_output=True, text=True, check=True
    )
    measured: dict[str, list[float]] = json.loads(done.stdout)
    return measured


def rows(options: Options) -> list[Row]:
    cases = lines()
    texts = [text for _, _, text in cases]
    trees = [("here", this_code().root)]
    with code_at(options.before) if options.before else nullcontext() as before:
        if before is not None:
            trees.append((f"before {options.before}", before.root))
        samples: dict[str, list[dict[str, list[float]]]] = {label: [] for label, _ in trees}
        for _ in range(ROUNDS):
            for label, root in trees:
                samples[label].append(batch(root, texts))
    worst = {"realistic": 0.0, "adversarial": 0.0}
    print(f"CPU per send (ms, median of {ROUNDS}): every rest read / the line kept whole; decision with rests")
    header = "".join(f"  {label:>26}" for label, _ in trees)
    print(f"{'kind':>9} {'chars':>5}{header}")
    for kind, length, text in cases:
        cells = []
        for label, _ in trees:
            rested = statistics.median(batch_[f"False:{text}"][0] for batch_ in samples[label]) * 1000
            whole = statistics.median(batch_[f"True:{text}"][0] for batch_ in samples[label]) * 1000
            tier, denied = samples[label][0][f"False:{text}"][1:]
            cells.append(f"{rested:8.2f} / {whole:5.2f} t{int(tier)}{' refused' if denied else '        '}")
            if label == "here" and length == 512:
                row = "realistic" if kind in REALISTIC else "adversarial"
                worst[row] = max(worst[row], rested)
        print(f"{kind:>9} {length:>5}" + "".join(f"  {cell:>26}" for cell in cells))
    return [Row(ROWS[row], f"{worst[row]:.2f} ms", f"≤ {LIMIT_MS:.1f} ms", worst[row] <= LIMIT_MS) for row in ROWS]


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
