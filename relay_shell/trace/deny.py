"""RELAY_SHELL_EXEC_DENY: whether a pattern refuses an exec. Matched (bounded, and RE2: linear time whatever the
pattern, adr/0019) on `path argv…` as asked, on the program the path resolves to in the process's context (links,
/dev/fd, /proc/self followed, adr/0027), and on each level of a `#!` chain as the kernel runs it: the
interpreter, the line's argument, the script, argv[1:]; for an `env`-style interpreter, the program it is told to
run too. An exec whose program cannot be determined is refused while patterns are set (fail closed)."""

from __future__ import annotations

from typing import Any

from relay_shell.trace.resolve import Target

DENY_TEXT_MAX = 8192  # characters of `path argv…` the deny patterns see (bounded matching time)
REFUSAL_SHOWN = 300  # characters of a refused exec the call's result shows


def deny_text(path: str, arguments: list[str]) -> str:
    """What the patterns are matched on."""
    return " ".join([path, *arguments])[:DENY_TEXT_MAX]


def deny_texts(target: Target, arguments: list[str]) -> list[str]:
    """Every text the patterns see for one exec: as asked, as resolved, and per interpreter level with the argv
    the kernel gives it (binfmt_script: interpreter, its argument, the previous level's file, argv[1:])."""
    texts = [deny_text(target.path, arguments)]
    if target.program and target.program != target.path:
        texts.append(deny_text(target.program, arguments))
    filename, argv = target.path, arguments
    for level in target.interpreters:
        argv = [level.path, *([level.argument] if level.argument else []), filename, *argv[1:]]
        texts.append(deny_text(level.path, argv))
        if level.program and level.program != level.path:
            texts.append(deny_text(level.program, argv))
        if level.target:
            runs = [*level.target, *argv[2 if level.argument else 1 :]]
            texts.append(deny_text(level.target[0], runs))
        filename = level.path
    return texts


def denies(patterns: list[Any], texts: list[str]) -> bool:
    return any(pattern.search(text) for pattern in patterns for text in texts)


def refusal_shown(path: str, shown: list[Any]) -> str:
    """A refused exec as the call's result names it: its path and its redacted arguments."""
    return " ".join(str(item) for item in [path, *shown[1:]])[:REFUSAL_SHOWN]
