"""Shell builtins that evaluate text or change what later text means: `alias` and `hash -p` (a name runs other
text), `enable -f` (a builtin loaded from a library), `let`, `[[ … -eq … ]]`, `((…))`, `declare -i` (arithmetic,
where bash runs the `$(…)` of an `a[…]` subscript), `printf -v`, `read`, `mapfile -C` (a callback run every few
lines), `unset`, `test -v`, `declare -n` (name references), and `export`/`declare`/`local`/`readonly` setting a
code-carrying variable (code_env.py). What they run is classified as shell text (Verdict.shell); the variables they
set (Verdict.assignments), the arithmetic they evaluate (Verdict.arithmetic) and the names they redefine
(Verdict.aliases) are read by classify.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, verdict
from relay_shell.policy.vocabulary import words

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARITHMETIC_TESTS = words("-eq -ne -lt -le -gt -ge")
_CONVERSION = re.compile(r"%[-+ #0-9.]{0,16}[a-zA-Z]")


def _alias(call: Call) -> Verdict:
    """`alias NAME=TEXT`: NAME runs TEXT from the next line on (sh always; bash with expand_aliases). TEXT is
    classified as what it runs."""
    aliases = []
    for word in call.words[1:]:
        name, equals, text = word.partition("=")
        if equals and not name.startswith("-"):
            aliases.append((name, text))
    if not aliases:
        return READ
    return Verdict(0, "alias makes a name run other text", shell=tuple(text for _, text in aliases))


def _hash(call: Call) -> Verdict:
    """`hash -p PATH NAME`: NAME runs the program at PATH from then on."""
    path = call.value("-p")
    if not path:
        return READ
    names = [word for word in call.operands if word != path]  # read_state keeps what they now run
    return Verdict(1, f"hash -p makes {' '.join(names) or 'a name'} run {path}", shell=(path,))


def _enable(call: Call) -> Verdict:
    if call.value("-f") is not None:
        return verdict(2, "enable -f loads a builtin from a shared library: code that cannot be seen")
    return READ


def _let(call: Call) -> Verdict:
    return Verdict(0, "let evaluates arithmetic", arithmetic=tuple(call.words[1:]))


def _arithmetic_command(call: Call) -> Verdict:
    return Verdict(0, "evaluates arithmetic")  # its text is in the tokenizer's arithmetic list


def _double_bracket(call: Call) -> Verdict:
    """`[[ A -eq B ]]` evaluates A and B as arithmetic; `-v NAME[SUB]` evaluates SUB."""
    words_ = call.words
    arithmetic = []
    for index, word in enumerate(words_[1:-1], start=1):
        if word in _ARITHMETIC_TESTS:
            arithmetic += [words_[index - 1], words_[index + 1]]
        elif word == "-v":
            arithmetic += _subscripts(words_[index + 1 : index + 2])
    return Verdict(0, "a test", arithmetic=tuple(arithmetic)) if arithmetic else READ


def _test(call: Call) -> Verdict:
    """`test -v NAME[SUB]` / `[ -v NAME[SUB] ]` evaluate SUB (its -eq takes integers only)."""
    words_ = call.words
    names = [words_[index + 1] for index, word in enumerate(words_[:-1]) if word == "-v"]
    subscripts = _subscripts(names)
    return Verdict(0, "a test", arithmetic=tuple(subscripts)) if subscripts else READ


def _printf(call: Call) -> Verdict:
    """`printf -v NAME FORMAT ARGS`: sets NAME (checked as a code-carrying variable) to what it formats."""
    words_ = call.words
    if len(words_) >= 2 and words_[1].startswith("-v") and len(words_[1]) > 2:
        name, arguments = words_[1][2:], words_[2:]  # `printf -vNAME`: the name attached
    elif len(words_) >= 3 and words_[1] == "-v":
        name, arguments = words_[2], words_[3:]
    else:
        return READ
    value = arguments[0] if arguments else ""
    for argument in arguments[1:]:
        value = _CONVERSION.sub(argument.replace("\\", "\\\\"), value, count=1)
    return Verdict(
        0,
        "printf -v sets a variable",
        assignments=((name.split("[", 1)[0], value),),
        arithmetic=tuple(_subscripts([name])),
    )


_READER_VALUES = {
    "read": words("-a -d -i -n -N -p -t -u"),
    "mapfile": words("-d -n -O -s -u -C -c"),
    "readarray": words("-d -n -O -s -u -C -c"),
}


def _reader(call: Call) -> Verdict:
    """read / mapfile / readarray set names from their input (only known at run time); mapfile -C runs a command."""
    value_options = _READER_VALUES[call.program]
    names: list[str] = []
    callback = None
    words_ = call.words
    position = 1
    while position < len(words_):
        word = words_[position]
        if word.startswith("-") and word != "-":
            # Options cluster and take their value attached or as the next word: `-C'cmd'`, `-raNAME`, `-a NAME`.
            for index, letter in enumerate(word[1:], start=2):
                if "-" + letter not in value_options:
                    continue
                attached = word[index:]
                value = attached or (words_[position + 1] if position + 1 < len(words_) else "")
                if letter == "C":
                    callback = value
                elif letter == "a":
                    names.append(value)
                position += 0 if attached else 1
                break
        else:
            names.append(word)
        position += 1
    if call.program != "read" and not names:
        names = ["MAPFILE"]
    assignments = tuple((name.split("[", 1)[0], None) for name in names)
    shell = (callback + " 0 line",) if callback else ()
    reason = f"{call.program} -C runs a command for every few lines" if callback else f"{call.program} reads input"
    return Verdict(0, reason, shell=shell, assignments=assignments, arithmetic=tuple(_subscripts(names)))


def _declare(call: Call) -> Verdict:
    """declare, typeset, local, export, readonly: `NAME=VALUE` sets NAME (checked as a code-carrying variable);
    `-i` evaluates VALUE as arithmetic; `-n` makes NAME refer to another name (a subscript there is evaluated)."""
    flags = {letter for word in call.words[1:] if word.startswith(("-", "+")) for letter in word[1:]}
    assignments: list[tuple[str, str | None]] = []
    arithmetic: list[str] = []
    for word in call.words[1:]:
        if word.startswith(("-", "+")):
            continue
        name, equals, value = word.partition("=")
        base = name.split("[", 1)[0].rstrip("+")
        if not _NAME.fullmatch(base):
            continue
        arithmetic += _subscripts([name])
        if not equals:
            continue
        assignments.append((base, value))
        if "i" in flags:
            arithmetic.append(value)
        if "n" in flags:
            arithmetic += _subscripts([value])
            if "$" in value or "`" in value:
                return verdict(2, f"{call.program} -n refers to a name only known at run time")
    if not assignments and not arithmetic:
        return READ
    return Verdict(0, f"{call.program} sets variables", assignments=tuple(assignments), arithmetic=tuple(arithmetic))


def _unset(call: Call) -> Verdict:
    subscripts = _subscripts(call.words[1:])
    return Verdict(0, "unset", arithmetic=tuple(subscripts)) if subscripts else READ


def _subscripts(names: list[str]) -> list[str]:
    """The subscripts of `NAME[SUB]` words: bash evaluates them as arithmetic (after expanding them)."""
    found = []
    for name in names:
        start = name.find("[")
        if start > 0 and name.endswith("]") and _NAME.fullmatch(name[:start]):
            found.append(name[start + 1 : -1])
    return found


RULES: dict[str, Callable[[Call], Verdict]] = {
    "alias": _alias,
    "hash": _hash,
    "enable": _enable,
    "let": _let,
    "((": _arithmetic_command,
    "[[": _double_bracket,
    "test": _test,
    "[": _test,
    "printf": _printf,
    "read": _reader,
    "mapfile": _reader,
    "readarray": _reader,
    "declare": _declare,
    "typeset": _declare,
    "local": _declare,
    "export": _declare,
    "readonly": _declare,
    "unset": _unset,
}
