"""find and fd: what an expression selects (paths, names, types, negations), whether it deletes, what its
-exec / -x actions run (classified as commands of their own) and whether it writes a file; and a deletion rated
by what it selects (adr/0004).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import (
    READ,
    Call,
    Selection,
    Verdict,
    is_device,
    is_protected,
    is_rootish,
    parse_options,
    verdict,
)
from relay_shell.policy.vocabulary import CRITICAL_FILES, USER_CONFIG
from relay_shell.policy.vocabulary import words as word_set


def deletion_by_selection(selection: Selection, what: str) -> Verdict:
    """A find-driven deletion: by what the find expression selects (the rubric's find rules)."""
    if selection.dirs_only or selection.empty_only:
        return verdict(2, f"{what} removes empty entries only")
    if selection.negated_filter:
        return verdict(3, f"{what} deletes every file except some")
    if selection.name_filter:
        return verdict(2, f"{what} deletes files selected by name")
    return verdict(3, f"{what} deletes every file of a tree")


def find_selection(words: list[str]) -> tuple[Selection, bool, list[list[str]], bool]:
    """What a find expression selects, whether it has -delete, the commands of its -exec/-ok actions, and whether
    it writes a file (-fprint)."""
    paths: list[str] = []
    index = 1
    while (index < len(words) and words[index] in ("-H", "-L", "-P")) or (
        index < len(words) and words[index].startswith(("-D", "-O")) and len(words[index]) <= 3
    ):
        index += 2 if words[index] == "-D" else 1
    while index < len(words) and not words[index].startswith(("-", "(", "!", ")", ",")):
        paths.append(words[index])
        index += 1
    files_only = dirs_only = name_filter = extension_filter = negated = empty = delete = writes = False
    execs: list[list[str]] = []
    negate_next = False
    while index < len(words):
        word = words[index]
        if word in ("!", "-not"):
            negate_next = True
            index += 1
            continue
        if word in ("-type", "-xtype") and index + 1 < len(words):
            kinds = set(words[index + 1].split(","))
            files_only = files_only or (kinds == {"f"} and not negate_next)
            dirs_only = dirs_only or (kinds == {"d"} and not negate_next)
            index += 2
        elif word in ("-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-wholename", "-iwholename", "-lname"):
            pattern = words[index + 1] if index + 1 < len(words) else ""
            if negate_next:
                negated = True
            else:
                name_filter = True
                extension_filter = extension_filter or bool(re.search(r"\.[A-Za-z0-9]{1,10}['\"]?$", pattern))
            index += 2
        elif word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(words) and words[end] not in (";", "+", "\\;"):
                end += 1
            execs.append(words[index + 1 : end])
            index = end + 1
        else:
            empty = empty or (word == "-empty" and not negate_next)
            delete = delete or word == "-delete"
            writes = writes or word in ("-fprint", "-fprintf", "-fls", "-fprint0")
            index += 1
        negate_next = False
    selection = Selection(tuple(paths), files_only, dirs_only, name_filter, extension_filter, negated, empty)
    return selection, delete, execs, writes


_FD_VALUES = word_set(
    "-e --extension -t --type -E --exclude -d --max-depth --min-depth --exact-depth -S --size --changed-within"
    " --changed-before --newer --older -o --owner -j --threads --max-results -c --color --search-path"
    " --base-directory --path-separator --batch-size --format --ignore-file --hyperlink -x --exec -X"
    " --exec-batch"
)
_FD_EXEC = frozenset(["-x", "--exec", "-X", "--exec-batch"])
_FD_KINDS = {"f": "file", "d": "directory", "e": "empty"}


def fd_selection(arguments: list[str]) -> tuple[Selection, list[list[str]]]:
    """What `fd [PATTERN] [PATH…]` selects and the commands of its -x/--exec and -X/--exec-batch (each up to `;`
    or the end): the same selection a find expression gives, for the deletions it drives."""
    kinds: set[str] = set()
    extensions = excludes = False
    operands: list[str] = []
    execs: list[list[str]] = []
    position = 1
    while position < len(arguments):
        word = arguments[position]
        if not word.startswith("-") or word == "-":
            operands.append(word)
            position += 1
            continue
        options, position = parse_options(arguments, position, _FD_VALUES)
        for name, value in options:
            if name in _FD_EXEC:
                end = position
                while end < len(arguments) and arguments[end] != ";":
                    end += 1
                execs.append(([value] if value is not None else []) + arguments[position:end])
                position = end + 1
            if name in ("-t", "--type"):
                kinds.add(_FD_KINDS.get((value or "")[:1], "other"))
            extensions = extensions or name in ("-e", "--extension")
            excludes = excludes or name in ("-E", "--exclude")
    pattern = operands[0] if operands else ""
    named = extensions or pattern not in ("", ".", "^", ".*")
    selection = Selection(
        paths=tuple(operands[1:]) or (".",),
        files_only=kinds == {"file"},
        dirs_only=kinds == {"directory"},
        name_filter=named,
        extension_filter=extensions or bool(re.search(r"\.[A-Za-z0-9]{1,10}\$?$", pattern)),
        negated_filter=excludes and not named,
        empty_only=kinds == {"empty"},
    )
    return selection, execs


_FIND_OUTPUTS = ("-fprint", "-fprintf", "-fls", "-fprint0")


def _find(call: Call) -> Verdict:
    selection, delete, _execs, writes = find_selection(call.words)
    if delete:
        if any(map(is_rootish, selection.paths)) and not (selection.name_filter or selection.empty_only):
            return verdict(3, "find -delete on / or a system directory")
        return deletion_by_selection(selection, "find -delete")
    words = call.words
    targets = [words[index + 1] for index in range(len(words) - 1) if words[index] in _FIND_OUTPUTS]
    for path in targets:  # -fprint/-fprintf/-fls FILE: written like `> FILE`
        if is_device(path) or path in CRITICAL_FILES or path.startswith("/boot/"):
            return verdict(3, f"find writes onto {path}")
        if is_protected(path) or USER_CONFIG.match(path):
            return verdict(2, f"find writes into {path}")
    return verdict(1, "find writes a file") if writes else READ


RULES: dict[str, Callable[[Call], Verdict]] = {
    "find": _find,
}
