"""The rests of a line: what the next reader gets when the one before took a part of the line and stopped (`dd
bs=1 count=1`, `head -c2`, `read -n1`, less quitting on `q`). A shell that reads after such a program runs the
rest: `Xrm -rf D` given to `dd bs=1 count=1; sh` deletes D (attack 3, W2, J2, J3; adr/0026 Round 6, adr/0025
Round 7). Used for typed input (sessions/reading.py), a job's stdin (sessions/job_plans.py) and a one-shot call's
stdin shared by several commands (policy/stdin.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

from relay_shell.policy.vocabulary import words

LINE_MAX = 512  # characters of a line whose every rest is classified
TOTAL_MAX = 4096  # characters of one input classified at every rest
PROBE = "rm -rf /relay-shell-probe\n"  # input a reader of code would run: tier 3
TOO_LONG = "input too long to classify at every point where a reader may stop and leave the rest to the next"

# What a shell runs by name without a program file: a rest whose command is one of these runs something.
SHELL_WORDS = words(
    "alias bg bind break builtin caller cd command compgen complete compopt continue coproc declare dirs disown echo "
    "enable eval exec exit export false fc fg getopts hash help history jobs kill let local logout mapfile popd "
    "printf pushd pwd read readarray readonly return set shift shopt source suspend test times trap true type "
    "typeset ulimit umask unalias unset wait . : [ [[ (( function time if then else elif fi for while until do done "
    "case esac select { } !"
)


def runs_something(canonical: str, elsewhere: bool = False) -> bool:
    """Whether a finding of a rest names something the shell would run: a builtin or keyword, a program on PATH, a
    path, or a word only known when it runs (a glob, an expansion); `elsewhere` (a remote host's shell, whose PATH
    is not this server's: attack 5, W3-PATH), also a program a rule or the vocabulary knows by name. A rest is cut
    out of a word, and a cut that is no command at all (`cho start` from `echo start`: an unknown verb guess) is the
    `command not found` it would be, not what the line would do."""
    found = [word for word in canonical.split() if "=" not in word.split("/")[0] or word.startswith("=")]
    if not found:
        return False
    word = found[0].replace("'", "").replace('"', "").replace("\\", "")
    if not word:
        return False
    if any(char in word for char in "*?[{$`(") or "/" in word:
        return True
    if word in SHELL_WORDS or shutil.which(word, path=os.environ.get("PATH", os.defpath)) is not None:
        return True
    if not elsewhere:
        return False
    from relay_shell.policy.rules import known_program  # rules' tree reads rests (through stdin): imported late

    return known_program(word)


def line_rests(text: str) -> Iterator[tuple[int, str]] | None:
    """Every distinct rest of every line of `text` with where it starts; None when the text (or a line of it) is
    too long to classify at every point (the caller decides what that costs)."""
    if len(text) > TOTAL_MAX or any(len(line) > LINE_MAX for line in text.split("\n")):
        return None
    return _rests(text)


def _rests(text: str) -> Iterator[tuple[int, str]]:
    seen: set[str] = set()
    for line in text.split("\n"):
        for start in range(1, len(line)):
            rest = line[start:].lstrip()
            if rest and rest not in seen:
                seen.add(rest)
                yield start, rest
