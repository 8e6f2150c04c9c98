"""RELAY_SHELL_EXEC_DENY: whether a pattern refuses an exec. Matched (bounded, and RE2: linear time whatever the
pattern, adr/0019) on `path argv…` as asked, on the program the path resolves to in the process's context (links,
/dev/fd, /proc/self followed, adr/0027), and on each level of a `#!` chain as the kernel runs it: the
interpreter, the line's argument, the script, argv[1:]; for an `env`-style interpreter, the program it is told to
run too; for the dynamic loader run as a program (or as a `#!` interpreter), the program it loads (loader.py). An
exec whose program cannot be determined is refused while patterns are set (fail closed)."""

from __future__ import annotations

from typing import Any

from relay_shell.trace import loader, resolve
from relay_shell.trace.resolve import Target

DENY_TEXT_MAX = 8192  # characters of `path argv…` the deny patterns see (bounded matching time)
REFUSAL_SHOWN = 300  # characters of a refused exec the call's result shows
LOADER_LEVELS = 4  # a loader told to run a loader: followed this deep, then refused as undetermined


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


def refusal(patterns: list[Any], target: Target, arguments: list[str], pid: int, cwd: str | None = None) -> str | None:
    """Whether EXEC_DENY refuses an exec whose program was found (outcome ok): None when it runs; "" when a
    pattern matched; else why its program, or the program a loader in it would load, cannot be determined."""
    if target.undetermined:
        return target.undetermined
    if denies(patterns, deny_texts(target, arguments)):
        return ""
    for found, argv in _loaded(target, arguments, pid, cwd, 0):
        if found.undetermined:
            return f"the program its loader runs, {found.path}: {found.undetermined}"
        if found.outcome == "ok" and denies(patterns, deny_texts(found, argv)):
            return ""
    return None


def _loaded(
    target: Target, arguments: list[str], pid: int, cwd: str | None, depth: int
) -> list[tuple[Target, list[str]]]:
    """The programs the dynamic loader will map and run for this exec: the exec's own file or one of its `#!`
    interpreters being a loader (its argv as the kernel gives it), each with the argv it runs with."""
    runs = [(target.handle, arguments)]
    filename, argv = target.path, arguments
    for level in target.interpreters:
        argv = [level.path, *([level.argument] if level.argument else []), filename, *argv[1:]]
        runs.append((level.handle, argv))
        filename = level.path
    found: list[tuple[Target, list[str]]] = []
    for handle, argv in runs:
        if not handle or not loader.is_loader(handle):
            continue
        index = loader.loaded_program(argv)
        if index is None:
            continue
        name = argv[index]
        if depth >= LOADER_LEVELS:
            found.append((Target(path=name, undetermined="a loader told to run a loader, too deep"), argv[index:]))
        elif "/" not in name:
            searched = Target(path=name, undetermined="a name without a slash is searched in the library directories")
            found.append((searched, argv[index:]))
        else:
            program = resolve.locate(pid, name, cwd=cwd)
            found.append((program, argv[index:]))
            found.extend(_loaded(program, argv[index:], pid, cwd, depth + 1))
    return found


def refusal_shown(path: str, shown: list[Any], why: str = "") -> str:
    """A refused exec as the call's result names it: its path and its redacted arguments, and why when no pattern
    matched."""
    text = " ".join(str(item) for item in [path, *shown[1:]])[:REFUSAL_SHOWN]
    return f"{text} ({why})" if why else text
