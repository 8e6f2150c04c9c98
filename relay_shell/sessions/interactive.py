"""What an interactive shell keeps from a typed line (adr/0026): the settings, aliases, prompts and hooks that
change what it runs for the lines typed after it.

`sh -c` forgets them when it ends; a session's shell keeps them, so `PROMPT_COMMAND='touch M'` (harmless as a
one-shot) runs `touch M` at every prompt that follows, and `alias ls='rm -rf ~'` turns the next `ls` into that.
A typed line is classified by what it makes the shell do later:

- the variables a shell, a pager or an editor runs as code, or that keep escapes off (the policy's table of
  code-carrying variables, and PROMPT_COMMAND, PS0–PS4, INPUTRC, HISTFILE, histchars, LESSSECURE, the editors):
  a plain assignment is judged as the same variable in shell_spawn's env (a literal prompt, PAGER=less pass);
  any other change (unset, export -n, read, printf -v, declare -n, for, a value computed at run time) is tier 2,
  and so is a prompt that reads like a password prompt (it would withhold the lines typed at it);
- a builtin that assigns to a variable named at run time (`$`, a glob or a brace in the name): tier 2;
- `alias NAME=VALUE`: VALUE is classified as the shell text it stands for;
- `bind`, `enable`, `shopt -s/-u`, `set -k`, `hash -p`, `r` (ksh and zsh re-run a line), `exec < FILE` (the shell
  reads its commands from FILE), `eval` of text computed at run time, and `stty` settings other than echo and
  size (a kill or interrupt character, `-isig`, case mapping: the line the program reads is not the one typed):
  tier 2.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from relay_shell.plan import Subject
from relay_shell.policy.code_env import PROMPT_VARIABLES, VARIABLES
from relay_shell.policy.shell_tokens import Command
from relay_shell.policy.vocabulary import words
from relay_shell.sessions.escapes import commands_of
from relay_shell.sessions.typed import Finding
from relay_shell.settings.patterns import Regex, matches

# Variables whose change disables an escape the server turned off, or changes how typed lines are read.
PINNED = words(
    "LESSSECURE SYSTEMD_PAGERSECURE INPUTRC histchars LESSEDIT MAILPATH FCEDIT SUDO_EDITOR SYSTEMD_EDITOR"
    " GIT_SEQUENCE_EDITOR KUBE_EDITOR"
)
# IFS changes how every later line splits into words.
SESSION_VARIABLES = frozenset(VARIABLES) | PINNED | {"IFS"}
_NAMES = "|".join(sorted(SESSION_VARIABLES, key=len, reverse=True))
_ASSIGNMENT = re.compile(rf"(?<![\w$])(?P<name>{_NAMES})(?P<index>\[[^\]]*\])?(?P<op>\+?=)")
_DEFAULTING = re.compile(rf"\$\{{(?P<name>{_NAMES}):?=")  # ${NAME:=value} assigns
_RUN_TIME_NAME = re.compile(r"[$`*?\[{]")
_DECLARATIONS = frozenset({"export", "declare", "typeset", "local", "readonly"})
_SAFE_STTY = words(
    "-a --all -g --save size speed echo -echo echoe -echoe echok -echok echonl -echonl echoctl -echoctl echoke"
    " -echoke sane rows cols columns"
)
# Options of read, mapfile and env that take a value (the word after them is not a name).
_READ_VALUE_OPTIONS = frozenset({"-d", "-i", "-n", "-N", "-p", "-t", "-u", "-O", "-s", "-c"})
_ENV_VALUE_OPTIONS = frozenset({"-C", "--chdir", "-S", "--split-string"})
_BIND_QUERIES = frozenset({"-p", "-P", "-v", "-V", "-s", "-S", "-l", "-q"})

CHANGES_VARIABLE = "changes {name} in the session's shell, which runs it as code or keeps an escape off with it"
RUN_TIME_NAME = "assigns to a variable named at run time: it may be one that runs code in the session's shell"
PASSWORD_LIKE_PROMPT = "a prompt that reads like a password prompt: the lines typed at it would be withheld"


def interactive_findings(
    line: str, passprompt: Sequence[Regex], commands: list[Command] | None = None
) -> list[Finding]:
    """What `line` (split into `commands` already, or not), read by an interactive shell, leaves behind that
    changes the lines after it."""
    findings = _assignment_findings(line, passprompt) if "=" in line else []
    for command in commands_of(line, []) if commands is None else commands:
        words = _without_builtin_prefix(command.words)
        dynamic = command.dynamic[len(command.words) - len(words) :]
        findings += _builtin_findings(words, dynamic, command)
        # An assignment spelled with quotes (`eval 'PROMPT_'"COMMAND=x"`), as the shell reads the word.
        for word in words:
            if "=" in word and word not in line:
                findings += _assignment_findings(word, passprompt)
    return findings


def _assignment_findings(text: str, passprompt: Sequence[Regex]) -> list[Finding]:
    """`NAME=value` wherever it appears (alone, after export or env, in a quoted eval string, in a printf format
    that becomes a file sourced later), and `${NAME:=value}`."""
    findings: list[Finding] = []
    for found in _ASSIGNMENT.finditer(text):
        name = found.group("name")
        if found.group("index") or found.group("op") == "+=":
            findings.append((found.group(0), 2, CHANGES_VARIABLE.format(name=name)))
            continue
        value, computed = _value_at(text, found.end())
        findings += judge_assignment(name, value, computed, passprompt)
    for found in _DEFAULTING.finditer(text):
        findings.append((found.group(0), 2, CHANGES_VARIABLE.format(name=found.group("name"))))
    return findings


def judge_assignment(name: str, value: str, computed: bool, passprompt: Sequence[Regex]) -> list[Finding]:
    """An assignment of a session variable, judged as the same variable in a spawn's env overlay."""
    shown = f"{name}={value}"[:200]
    if computed or name in PINNED:
        return [(shown, 2, CHANGES_VARIABLE.format(name=name))]
    if name in PROMPT_VARIABLES and any(matches(pattern, value) for pattern in passprompt):
        return [(shown, 2, PASSWORD_LIKE_PROMPT)]
    from relay_shell.policy.classify import classify  # loaded on first use (policy/admission.py says why)

    verdict = classify(Subject(env=((name, value),)))
    if verdict.tier == 0 or not verdict.reasons:
        return []
    # The shell keeps the value for every later line (a prompt hook runs at each prompt, an editor variable for each
    # program that opens one): what it runs then is never typed, so anything beyond a read is tier 2.
    return [(shown, 2, f"kept by the session's shell for later lines: {verdict.reasons[0]}")]


def _value_at(text: str, start: int) -> tuple[str, bool]:
    """The value of the word that starts at `start` (quotes removed), and whether it is computed at run time."""
    rest = text[start:]
    if not rest or rest[0] in " \t\n;&|)":
        return "", False
    commands = commands_of(": " + rest, [])
    if not commands or len(commands[0].words) < 2 or commands[0].words[0] != ":":
        return rest[:200], True  # an array `(…)` or something stranger: not a plain value
    return commands[0].words[1], commands[0].dynamic[1]


def _without_builtin_prefix(words: list[str]) -> list[str]:
    index = 0
    while index < len(words) and words[index] in ("builtin", "command"):
        index += 1
    return words[index:]


def _builtin_findings(words: list[str], dynamic: list[bool], command: Command) -> list[Finding]:
    if not words:
        return []
    program, arguments = words[0], words[1:]
    shown = " ".join(words)[:200]
    if program == "alias":
        return _alias_findings(arguments, dynamic[1:])
    if program in ("declare", "typeset", "local") and any(
        word.startswith("-") and "n" in word[1:] for word in arguments
    ):
        return [(shown, 2, "a name reference: assigning to it changes the variable it names")]
    names = _assigned_names(program, arguments, dynamic[1:])
    if names is not None:
        return [(shown, 2, finding) for finding in _name_problems(names)]
    problem = _statement_problem(program, arguments, dynamic, command)
    return [(shown, 2, problem)] if problem else []


def _statement_problem(program: str, arguments: list[str], dynamic: list[bool], command: Command) -> str | None:
    if program == "bind" and not all(word in _BIND_QUERIES for word in arguments):
        return "binds keys to text or commands: a key then types or runs what no line shows"
    if program == "enable" and any(not word.startswith("-") or word in ("-f", "-n", "-d") for word in arguments):
        return "loads or disables shell builtins"
    if program == "shopt" and any(word in ("-s", "-u") for word in arguments):
        return "changes how the session's shell reads the lines typed next (globs, aliases, history)"
    if program == "set" and any(_sets_keyword(word, arguments) for word in arguments):
        return "set -k: assignments anywhere on a line reach the command's environment"
    if program == "hash" and "-p" in arguments:
        return "hash -p: a command name then runs another program"
    if program == "r":
        return "r re-runs a line from the history (ksh, zsh)"
    if program == "exec" and not arguments and any(op.startswith("<") for op, _ in command.redirects):
        return "the session's shell then reads its commands from a file"
    if program == "eval" and any(dynamic[1:]):
        return "evaluates text computed at run time: what it sets stays in the session's shell"
    if program == "stty" and not all(word in _SAFE_STTY or word.isdigit() for word in arguments):
        return "changes how the terminal turns keys into the line a program reads (special characters, signals)"
    return None


def _sets_keyword(word: str, arguments: list[str]) -> bool:
    if word == "keyword":
        return arguments.index(word) > 0 and arguments[arguments.index(word) - 1] in ("-o", "+o")
    return word.startswith("-") and not word.startswith("--") and "k" in word[1:]


def _alias_findings(arguments: list[str], dynamic: list[bool]) -> list[Finding]:
    from relay_shell.policy.classify import classify  # loaded on first use (policy/admission.py says why)

    findings: list[Finding] = []
    for word, computed in zip(arguments, dynamic, strict=False):
        name, equals, value = word.partition("=")
        if not equals:
            continue
        if computed or _RUN_TIME_NAME.search(name):
            findings.append((word[:200], 2, "an alias defined at run time: what it runs cannot be read"))
            continue
        verdict = classify(Subject(command=value))
        if verdict.tier > 0:
            reason = verdict.reasons[0] if verdict.reasons else "not known to be read-only"
            findings.append((value[:200], verdict.tier, f"alias {name} runs this in the lines typed next: {reason}"))
    return findings


def _assigned_names(program: str, arguments: list[str], dynamic: list[bool]) -> list[tuple[str, bool]] | None:
    """The variables a builtin (or `env -u`) assigns or unsets, each with whether its name is computed; None when
    `program` assigns none."""
    if program in ("for", "select"):
        return [(arguments[0], dynamic[0])] if arguments else []
    if program == "getopts":
        return [(arguments[1], dynamic[1])] if len(arguments) > 1 else []
    if program == "printf":
        if arguments and arguments[0].startswith("-v") and len(arguments[0]) > 2:
            return [(arguments[0][2:], dynamic[0])]  # `printf -vNAME`
        position = arguments.index("-v") + 1 if "-v" in arguments else 0
        return [(arguments[position], dynamic[position])] if 0 < position < len(arguments) else []
    if program in ("unset", "mapfile", "readarray", "read", "env"):
        return _operand_names(program, arguments, dynamic)
    if program in _DECLARATIONS:
        # NAME=value is judged as an assignment (_assignment_findings); here only its name must be readable.
        return [
            (word, computed) if "=" not in word else (word.split("=", 1)[0], False)
            for word, computed in zip(arguments, dynamic, strict=False)
            if not word.startswith(("-", "+")) and ("=" not in word or _RUN_TIME_NAME.search(word.split("=", 1)[0]))
        ]
    return None


def _operand_names(program: str, arguments: list[str], dynamic: list[bool]) -> list[tuple[str, bool]]:
    names: list[tuple[str, bool]] = []
    takes_value = _ENV_VALUE_OPTIONS if program == "env" else _READ_VALUE_OPTIONS
    index = 0
    while index < len(arguments):
        word, computed = arguments[index], dynamic[index]
        if program == "env" and word.startswith(("-u", "--unset")):
            attached = word.partition("=")[2] if word.startswith("--unset=") else word[2:]
            if attached or word.startswith("--unset="):
                names.append((attached, computed))
            elif index + 1 < len(arguments):
                names.append((arguments[index + 1], dynamic[index + 1]))
                index += 1
        elif program in ("mapfile", "readarray") and word.startswith("-") and "C" in word[1:]:
            names.append(("(a mapfile callback)", True))  # evaluated as code for every line read
            index += 0 if word[word.index("C", 1) + 1 :] else 1  # the callback attached, or the next word
        elif program == "read" and word.startswith("-") and "a" in word[1:] and not word.endswith("a"):
            names.append((word[word.index("a", 1) + 1 :], computed))  # `read -aNAME`, `-raNAME`
        elif word in takes_value:
            index += 1  # the option's value
        elif program == "read" and word.startswith("-") and word.endswith("a"):
            pass  # the array's name follows (`-a NAME`, `-ra NAME`)
        elif program != "env" and not word.startswith("-"):
            names.append((word, computed))
        index += 1
    return names


def _name_problems(names: list[tuple[str, bool]]) -> list[str]:
    problems: list[str] = []
    for name, computed in names:
        if computed or _RUN_TIME_NAME.search(name):
            problems.append(RUN_TIME_NAME)
        elif name.split("[", 1)[0] in SESSION_VARIABLES:
            problems.append(CHANGES_VARIABLE.format(name=name))
    return list(dict.fromkeys(problems))
