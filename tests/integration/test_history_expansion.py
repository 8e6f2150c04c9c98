"""The history-expansion scanner (sessions/history.py) against bash itself: every line bash would expand (or fail
to expand: "event not found" is an expansion attempted) must be found by the scanner. The scanner may find more
(it over-approximates); it must never find less, or a typed line would run text from the history unclassified.

bash does the expansion with `history -p`, which applies the same rules (and the same exceptions: quotes, `$!`,
`${!…}`, `[!…]`) as an interactive shell reading a line."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from relay_shell.sessions.history import expansion_points

WRITTEN = [
    "!!",
    "!!:1*",
    "!$",
    "!-2",
    "^old^new",
    "!prefix",
    "!?str?",
    "!#",
    "sudo !!",
    "echo '!x'",
    'echo "!x"',
    'echo "done!"',
    'echo "a!"b',
    "echo \\!x",
    "kill $!",
    "echo ${!x}",
    "ls [!a]*",
    "ls [!a",
    "echo !(x)",
    "a != b",
    "x=!y",
    "echo $'\\'!x'",
    "echo 'unterminated !x",
    "# comment !x",
    "echo !",
    "echo a!",
    "!1",
    "!:0",
    "!^",
    "!*",
    "!%",
    ' "!x"',
    'echo "it\'s !x"',
    "echo '\"'!x",
]
ALPHABET = list("!!!\"\"''\\${}[]  a=()^#-1:%?*")


def bash_expands(lines: list[str], tmp_path: Path) -> list[bool]:
    """For each line: whether bash's history expansion changes it or fails on it."""
    source = tmp_path / "lines"
    source.write_bytes(b"\0".join(line.encode() for line in lines) + b"\0")
    script = (
        "set -o history -H; history -s 'echo previous line'\n"
        'while IFS= read -r -d "" line; do\n'
        '  if expanded=$(history -p -- "$line" 2>/dev/null) && [ "$expanded" = "$line" ]; then echo same;\n'
        "  else echo expanded; fi\n"
        f"done < {source}\n"
    )
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, check=True)
    answers = result.stdout.split()
    assert len(answers) == len(lines), result.stderr
    return [answer == "expanded" for answer in answers]


def test_every_line_bash_expands_is_found(tmp_path: Path) -> None:
    randomness = random.Random(26)
    generated = ["".join(randomness.choice(ALPHABET) for _ in range(randomness.randint(1, 10))) for _ in range(3000)]
    # A leading `-` would be read by `history -p` as an option; a trailing newline is lost by $( ).
    lines = [line for line in WRITTEN + generated if not line.startswith("-") and not line.endswith("\n")]
    missed = [
        line
        for line, expands in zip(lines, bash_expands(lines, tmp_path), strict=True)
        if expands and not expansion_points(line)
    ]
    assert missed == []


def test_the_written_cases_bash_does_not_expand_are_not_found(tmp_path: Path) -> None:
    """Not a safety property (finding more only refuses more): the exceptions bash makes are modelled, so that
    `kill $!`, `${!x}`, `[!a]*`, quoted and trailing `!` type as usual."""
    plain = [
        "echo '!x'",
        'echo "done!"',
        "echo \\!x",
        "kill $!",
        "echo ${!x}",
        "ls [!a]*",
        "a != b",
        "echo !",
        "echo a!",
    ]
    assert bash_expands(plain, tmp_path) == [False] * len(plain)
    assert [line for line in plain if expansion_points(line)] == []
