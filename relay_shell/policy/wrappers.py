"""Wrappers: programs that run another command with the same effect (`sudo`, `env`, `nice`, `timeout`, `xargs`,
`flock`, `chroot`, `nsenter`, `watch`, `script -c`, `su -c`, `runuser`, `busybox`, …). The classifier looks
through them to the command they run; some of them run shell text given as one argument, which is handed back
to be classified as shell text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay_shell.policy.vocabulary import ASSIGNMENT_WORD, ESCALATION, WRAPPER_OPERANDS, WRAPPERS

MAX_WRAPPERS = 32  # wrappers nest (sudo env nice …); bounded


@dataclass
class Unwrapped:
    words: list[str]
    dynamic: list[bool]
    escalated: bool = False  # sudo, doas, su, runuser, pkexec: the command runs with more privileges
    via_xargs: bool = False  # xargs, parallel: the arguments arrive on stdin
    inline: list[str] = field(default_factory=list)  # shell text a wrapper runs (su -c 'cmd', watch 'cmd')
    shell_session: bool = False  # an interactive shell (sudo -i, su -): reads commands from stdin


def basename(word: str) -> str:
    stripped = word.rstrip("/")
    return stripped.rsplit("/", 1)[-1] if "/" in stripped else word


_WATCH_VALUE_OPTIONS = frozenset(["-n", "--interval", "-q", "--equexit"])
_SU_VALUE_OPTIONS = frozenset(["-s", "--shell", "-g", "--group", "-G", "--supp-group", "-w", "--whitelist-environment"])
_SCRIPT_VALUE_OPTIONS = frozenset(["-E", "--echo", "-I", "--log-in", "-O", "--log-out", "-B", "--log-io", "-T", "-t"])
_AST_GREP = frozenset(["run", "scan", "test", "new", "lsp", "completions", "help"])
_SUDO_ONLY_OPTIONS = frozenset(["-l", "-v", "-k", "-K", "--list", "--validate", "--reset-timestamp", "-V", "--version"])


def unwrap(words: list[str], dynamic: list[bool]) -> Unwrapped:
    """Strip wrappers from a simple command; what is left is the command they run."""
    result = Unwrapped(words, dynamic)
    index = 0
    for _ in range(MAX_WRAPPERS):
        if index >= len(words):
            break
        program = basename(words[index])
        step = _step(program, words, index, result)
        if step is None:
            break
        index = step
    result.words = words[index:]
    result.dynamic = dynamic[index:]
    return result


def _step(program: str, words: list[str], index: int, result: Unwrapped) -> int | None:
    """Where the wrapped command starts after the wrapper at words[index], or None if it is not a wrapper."""
    if program in ("busybox", "toybox"):
        following = words[index + 1] if index + 1 < len(words) else "-"
        return None if following.startswith("-") else index + 1
    if (
        program == "sg"
        and index + 1 < len(words)
        and (words[index + 1] in _AST_GREP or words[index + 1].startswith("-"))
    ):
        return None  # ast-grep's `sg run --pattern …`, not `sg GROUP cmd`
    if program in ("su", "runuser", "sg", "script", "sudoedit"):
        return _inline_wrapper(program, words, index, result)
    if program == "watch":
        return _watch(words, index, result)
    if program in WRAPPER_OPERANDS:
        value_options, operands = WRAPPER_OPERANDS[program]
        position = _skip_options(words, index + 1, value_options)
        if program == "flock" and position + 1 < len(words) and words[position + 1] in ("-c", "--command"):
            if position + 2 < len(words):
                result.inline.append(words[position + 2])
            return len(words)
        if program in ("taskset", "chrt") and any(word in ("-p", "--pid") for word in words[index + 1 : position]):
            return None  # changes a running process: no command
        return position + operands
    if program not in WRAPPERS:
        return None
    if program in ("sudo", "doas") and index + 1 < len(words) and words[index + 1] in _SUDO_ONLY_OPTIONS:
        return None
    result.escalated = result.escalated or program in ESCALATION
    result.via_xargs = result.via_xargs or program in ("xargs", "parallel")
    position = index + 1
    while position < len(words):
        word = words[position]
        if word == "--":
            position += 1
            break
        if program == "env" and ASSIGNMENT_WORD.fullmatch(word):
            position += 1
            continue
        if program == "env" and word in ("-S", "--split-string") and position + 1 < len(words):
            result.inline.append(words[position + 1])
            return len(words)
        if program == "nice" and re.fullmatch(r"-\d+", word):
            position += 1
            continue
        if program == "sudo" and word in ("-i", "-s", "--login", "--shell"):
            result.shell_session = True
        if not word.startswith("-") or word == "-":
            break
        position += 2 if word in WRAPPERS[program] else 1
    if program == "parallel" and ":::" in words[position:]:
        return position  # the command is before `:::`, the arguments after: classified together
    return position


def _skip_options(words: list[str], position: int, value_options: frozenset[str]) -> int:
    while position < len(words) and words[position].startswith("-") and words[position] != "-":
        if words[position] == "--":
            return position + 1
        position += 2 if words[position] in value_options else 1
    return position


def _inline_wrapper(program: str, words: list[str], index: int, result: Unwrapped) -> int | None:
    """su [-] [user] [-c cmd]; runuser -u user [--] cmd, or runuser user -c cmd; sg group [-c] cmd; script -c cmd.
    Without a command, su and runuser start a shell that reads stdin."""
    if program == "sudoedit":
        return None
    value_options = _SCRIPT_VALUE_OPTIONS if program == "script" else _SU_VALUE_OPTIONS
    position = index + 1
    operands = 0
    while position < len(words):
        word = words[position]
        if word in ("-c", "--command", "--session-command"):
            result.escalated = result.escalated or program in ESCALATION
            if position + 1 < len(words):
                result.inline.append(words[position + 1])
            return len(words)
        if program == "runuser" and word in ("-u", "--user"):
            result.escalated = True
            following = _skip_options(words, position + 2, value_options)
            return following
        if word == "--":
            position += 1
            break
        if word.startswith("-") and word != "-":
            position += 2 if word in value_options else 1
            continue
        operands += 1
        position += 1
        if program == "sg" and operands == 1 and position < len(words):
            rest = words[position:]
            rest = rest[1:2] if rest[0] == "-c" else rest
            result.inline.append(" ".join(rest))  # sg runs the rest through /bin/sh -c
            return len(words)
    if program == "script":
        return None  # records an interactive shell: rated as itself
    result.escalated = result.escalated or program in ESCALATION
    result.shell_session = True
    return len(words)


def _watch(words: list[str], index: int, result: Unwrapped) -> int:
    """watch runs its arguments joined with spaces through `sh -c`, unless -x/--exec gives an argv."""
    position = index + 1
    execs = False
    while position < len(words) and words[position].startswith("-"):
        word = words[position]
        execs = execs or word in ("-x", "--exec")
        position += 2 if word in _WATCH_VALUE_OPTIONS else 1
    if execs:
        return position
    if position < len(words):
        result.inline.append(" ".join(words[position:]))
    return len(words)
