"""What one shell text sets up for the commands in it, read before any of them is classified (a loop may use a
name before the line that sets it): the values it gives variables, the names whose values are only known at run
time (`read`, `for`, `$(…)`), the names an `alias` or `hash -p` makes mean other text, and the arithmetic it
evaluates.

bash evaluates array subscripts inside arithmetic recursively: with `x='a[$(cmd)]'`, `$((x))`, `(( x ))`,
`[[ $x -eq 1 ]]`, `let x` and `${arr[$x]}` run `cmd`. So arithmetic that refers to a value only known at run
time is tier 2, and a literal `NAME[…$(…)…]` anywhere is read as the command it holds (arithmetic.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay_shell.policy.env_substitution import Env
from relay_shell.policy.findings import Finding
from relay_shell.policy.shell_invocation import parse_shell
from relay_shell.policy.shell_words import SETTERS
from relay_shell.policy.simple_commands import Tokens
from relay_shell.policy.vocabulary import SHELLS

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names an arithmetic text refers to: `$name`, `${name}`, `$1`, `$@`, or a bare name.
_ARITHMETIC_NAME = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*|[0-9@*])|(?<![A-Za-z0-9_$#])([A-Za-z_][A-Za-z0-9_]*)")
_SUBSCRIPT = re.compile(r"\$\{!?[A-Za-z_][A-Za-z0-9_]*\[([^\]]{1,4096})\]")
# Programs whose output is a number (or nothing): `$(date +%s)` in arithmetic cannot carry a subscript.
_NUMERIC = frozenset(
    [
        "date",
        "wc",
        "stat",
        "nproc",
        "getconf",
        "id",
        "expr",
        "seq",
        "du",
        "df",
        "awk",
        "cut",
        "head",
        "tail",
        "tr",
        "printf",
        "echo",
        "bc",
    ]
)
# Builtins that set a variable from their input, and the options among theirs that take a value.
_READERS = {
    "read": frozenset(["-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"]),
    "mapfile": frozenset(["-d", "-n", "-O", "-s", "-u", "-C", "-c"]),
    "readarray": frozenset(["-d", "-n", "-O", "-s", "-u", "-C", "-c"]),
}
_DECLARERS = frozenset(["declare", "typeset", "local", "export", "readonly"])
_RUN_TIME = "arithmetic on a value only known at run time: bash runs the $(…) of an a[…] subscript in it"


@dataclass
class TextState:
    values: dict[str, set[str]] = field(default_factory=dict)  # literal values a name is given in the text
    runtime: set[str] = field(default_factory=set)  # names given values only known at run time
    aliases: dict[str, str] = field(default_factory=dict)  # name -> the text it runs (alias, hash -p)
    # The positional parameters `set -- …` gives them, when the text sets them once to literal words.
    positional: list[str] | None = None
    positional_set: int = 0  # how many `set` commands give positional parameters
    directories: tuple[str, ...] = ()  # where the text may start, when the caller knows (plan.Subject.directories)

    def ifs_choices(self) -> list[str] | None:
        """The values IFS can have where a word is split: the default and every literal value the text gives it
        (where it is assigned relative to the word is not tracked); None when a value is only known at run time."""
        if "IFS" in self.runtime:
            return None
        return [" \t\n", *sorted(self.values.get("IFS", ()))]

    def known_positional(self) -> list[str] | None:
        return self.positional if self.positional_set == 1 else None

    def env(self, overlay: Env) -> Env:
        """The overlay with the names the text gives exactly one literal value (and no run-time one): substituted
        into the words that use them, as the overlay's are."""
        if not self.values:
            return overlay
        merged = dict(overlay)
        for name, values in self.values.items():
            if len(values) == 1 and name not in self.runtime and (name not in overlay or overlay[name] in values):
                merged[name] = next(iter(values))
            else:
                merged.pop(name, None)
        return merged

    def assign(self, name: str, value: str | None) -> None:
        """A value the text gives a name: None, or one with expansions other than arithmetic, is only known at run
        time (unless the names it expands are all known)."""
        if value is None or _is_run_time(value, self.runtime):
            self.runtime.add(name)
        else:
            self.values.setdefault(name, set()).add(value)


def _is_run_time(value: str, runtime: set[str]) -> bool:
    if "$" not in value and "`" not in value:
        return False
    if "`…`" in value or "$(…)" in value or "${" in value:
        return True
    return any(
        (match.group(1) or "") in runtime or (match.group(1) or "x").isdigit()
        for match in _ARITHMETIC_NAME.finditer(value)
    )


_EMPTY = TextState()
_DEFINES_FUNCTION = re.compile(r"(?:^|[\s;&|({])(?:function\s+\S|[\w.:-]+\s*\(\s*\))")


def read_state(tokens: Tokens, outer: TextState | None = None, text: str = "") -> TextState:
    """Every name the commands set, before any is classified (with the run-time names of the text around them).
    In a function's body `$1`… are its arguments, not what `set --` gave: a text that defines a function (`text`
    read for `NAME()` and `function NAME`) has its positional parameters only known at run time."""
    if not tokens.sets_names:
        known = outer is not None and (outer.runtime or outer.positional is not None or bool(outer.directories))
        return outer if known and outer is not None else _EMPTY
    commands = tokens.commands
    state = TextState(runtime=set(outer.runtime) if outer is not None else set())
    if outer is not None:
        state.directories = outer.directories
    if outer is not None and outer.positional is not None:
        state.positional, state.positional_set = outer.positional, outer.positional_set
    for command in commands:
        words = command.words
        if command.assignments and not words:
            for name, value, _dynamic in command.assignments:
                state.assign(name, value)
        if not words or words[0] not in SETTERS:
            continue
        program = words[0]
        if program in ("for", "select") and len(words) > 1:
            literal = not any(command.dynamic[2:]) and not command.marks
            for value in words[3:] if literal else ():
                state.assign(words[1], value)
            if not literal:
                state.runtime.add(words[1])
        elif program in _READERS:
            _readers(words, _READERS[program], state)
        elif program == "getopts" and len(words) > 2:
            state.runtime.add(words[2])
        elif program == "printf" and len(words) > 2 and words[1] == "-v":
            state.runtime.add(words[2].split("[", 1)[0])
        elif program == "set":
            _positional(words, command.dynamic, state)
        elif program == "shift":
            state.positional_set += 2  # which parameters are left depends on where it stands: only known at run time
        elif program == "alias":
            for word in words[1:]:
                name, equals, text = word.partition("=")
                if equals and not name.startswith("-"):
                    state.aliases[name] = text
        elif program == "hash" and "-p" in words[1:-2]:
            path = words[words.index("-p") + 1]
            for name in words[words.index("-p") + 2 :]:
                state.aliases[name] = path
        elif program in _DECLARERS:
            for word, dynamic in zip(words[1:], command.dynamic[1:], strict=True):
                name, equals, value = word.partition("=")
                if equals and _NAME.fullmatch(name.split("[", 1)[0].rstrip("+")):
                    state.assign(name.split("[", 1)[0].rstrip("+"), None if dynamic else value)
    if state.positional is not None and _DEFINES_FUNCTION.search(text):
        state.positional_set += 2
    return state


def _positional(words: list[str], dynamic: list[bool], state: TextState) -> None:
    """`set [options] [--] WORDS`: WORDS become the positional parameters (`set -o NAME` sets none)."""
    position = 1
    while position < len(words) and words[position][:1] in ("-", "+") and words[position] not in ("-", "--"):
        position += 2 if words[position] in ("-o", "+o") else 1
    if position < len(words) and words[position] in ("-", "--"):
        position += 1
    elif position >= len(words):
        return
    state.positional_set += 1
    state.positional = None if any(dynamic[position:]) else words[position:]
    if state.positional is None:
        state.positional_set += 1  # only known at run time


def _readers(words: list[str], value_options: frozenset[str], state: TextState) -> None:
    position = 1
    while position < len(words):
        word = words[position]
        if word in value_options:
            if word == "-a" and position + 1 < len(words):
                state.runtime.add(words[position + 1])
            position += 2
            continue
        if not word.startswith("-"):
            state.runtime.add(word.split("[", 1)[0])
        position += 1


def arithmetic_findings(texts: list[str], state: TextState) -> list[Finding]:
    """Arithmetic that refers to a value only known at run time, or to a command's output that is not a number."""
    findings = []
    for text in texts:
        for match in _ARITHMETIC_NAME.finditer(text):
            name = match.group(1) or match.group(2)
            if name in state.runtime or (match.group(1) is not None and name in "0123456789@*"):
                findings.append(Finding(f"(( {text[:120]} ))", 2, _RUN_TIME))
                break
        else:
            if "$(" in text and not _numeric_substitutions(text):
                findings.append(Finding(f"(( {text[:120]} ))", 2, _RUN_TIME))
    return findings


def _numeric_substitutions(text: str) -> bool:
    """Whether every `$(…)` in an arithmetic text ends in a program whose output is a number."""
    for part in text.split("$(")[1:]:
        inner = part.split(")", 1)[0]
        last = inner.rsplit("|", 1)[-1].split()
        if not last or last[0].rsplit("/", 1)[-1] not in _NUMERIC:
            return False
    return True


def subscripts_in(words: list[str]) -> list[str]:
    """The subscripts of `${name[…]}` and `${!name[…]}` in words: arithmetic for indexed arrays."""
    return [match.group(1) for word in words if "${" in word and "[" in word for match in _SUBSCRIPT.finditer(word)]


_SUBSCRIPT_CODE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[[^\]\n]{0,4096}?(\$\(|`)")


def subscript_commands(text: str) -> list[str]:
    """The commands inside `NAME[…$(…)…]` / `NAME[…`…`…]` in literal text: bash runs them when the text reaches
    arithmetic (a variable's value, a name given to printf -v, read, unset, declare -n, test -v, ${!x})."""
    found = []
    for match in _SUBSCRIPT_CODE.finditer(text):
        start = match.end()
        if match.group(1) == "`":
            end = text.find("`", start)
        else:
            depth, end = 1, start
            while end < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
            end -= 1 if depth == 0 else 0
        found.append(text[start : end if end >= 0 else len(text)])
    return found


def inline_arguments(program: str, words: list[str], outer: TextState | None = None) -> TextState | None:
    """`sh -c TEXT NAME ARGS…`: in TEXT, `$1`… are ARGS (attack 5: `sh -c 'echo x > "$1"' sh /etc/passwd` was 1),
    when every one is literal; None otherwise (they are only known at run time, as before). The inner text starts
    in the outer text's directories, when they are known (the caller's cwd: attack 5, C1)."""
    directories = outer.directories if outer is not None else ()
    known = TextState(directories=directories) if directories else None
    if program not in SHELLS:
        return known  # eval's words are its text
    invocation = parse_shell(words[1:])
    if not invocation.inline or invocation.operand is None:
        return known
    position = words.index(invocation.operand, 1)
    arguments = words[position + 2 :]
    if not arguments or any("$" in word or "`" in word or "{}" in word for word in arguments):
        return known
    return TextState(positional=arguments, positional_set=1, directories=directories)
