"""awk (POSIX awk, gawk, mawk, busybox awk) read as awk reads its command line and its program: options first
(`-f`/`-i`/`-E` program files nobody sees, gawk's `-l` libraries, `-o`/`-p`/`-d` output files, `--sandbox`), then
the program lexed into strings, regular expressions and names, so that what it runs or writes is found however it
is spelled: `system(…)`, output piped to a command (`print | "cmd"`, `|&`), a command read with `"cmd" | getline`,
output redirected to a file (`print > "f"`, `printf(…) >> f`), gawk's `@load`, `@include` and indirect calls
(`@name()`). A literal command is classified as shell text (output piped into a command as `: | cmd`); one built at
run time is 2; a file named at run time is 1. Without any of these an awk program only reads and prints: 0.

A `/` is a regex where awk expects an operand (after an operator, `(`, `,`, `{`, `;`, `!`, `~`, the start) and a
division after an operand (a name, a number, a string, `)`, `]`, `$NF`): the same choice awk's grammar makes.
"""

from __future__ import annotations

import re

from relay_shell.policy.calls import READ, Verdict, read_options, verdict
from relay_shell.policy.outputs import written
from relay_shell.policy.vocabulary import words

_VALUES = words("-F -v -f -i -l -E -W --field-separator --assign --file --include --load --exec --source -e")
_OPTIONAL = words("-o -p -d -D -M --pretty-print --profile --dump-variables --debug")
_KNOWN = words(
    "--field-separator --assign --file --include --load --exec --source --pretty-print --profile --dump-variables"
    " --debug --sandbox --posix --traditional --lint --bignum --characters-as-bytes --re-interval --use-lc-numeric"
    " --optimize --no-optimize --csv --version --help --copyright --gen-pot"
)
_TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"?|[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\|\||&&|>>|\|&|[!=<>]=|!~|\+\+|--'
    r"|@[A-Za-z_][A-Za-z0-9_]*|\S"
)
_OPERAND_END = frozenset([")", "]"])
_STATEMENT_END = frozenset([";", "\n", "}", "{"])
_NOT_A_FILE = frozenset(["/dev/stdout", "/dev/stderr", "-", "/dev/null", "/dev/tty"])


def awk_verdict(arguments: list[str]) -> Verdict:
    options, operands = read_options(arguments, _VALUES, _OPTIONAL, _KNOWN)
    names = {name for name, _value in options}
    found = [READ]
    if "-i" in names and any(value == "inplace" for name, value in options if name in ("-i", "--include")):
        return verdict(2, "awk edits files in place")
    sources = [value or "" for name, value in options if name in ("-e", "--source")]
    for name, value in options:
        program_file = name in ("-f", "--file", "-i", "--include", "-E", "--exec")
        if program_file or (name == "-W" and (value or "").startswith("exec")):
            found.append(verdict(1, "awk runs a program file that cannot be seen"))
        elif name in ("-l", "--load"):
            found.append(verdict(2, "gawk loads an extension library: code that cannot be seen"))
        elif name in ("-o", "-p", "-d", "--pretty-print", "--profile", "--dump-variables"):
            found.append(verdict(1, f"awk {name} writes {value or 'a file in the working directory'}"))
        elif name in ("-D", "--debug"):
            found.append(verdict(2, "gawk's debugger runs commands from its input"))
    if not sources and not names & {"-f", "--file", "-E", "--exec"} and operands:
        sources, operands = operands[:1], operands[1:]
    if "--sandbox" in names:  # gawk: no system(), no redirections, no getline from files or commands
        return max(found, key=lambda item: item.tier)
    shell: list[str] = []
    for source in sources:
        found += _program(source, shell)
    worst = max(found, key=lambda item: item.tier)
    return Verdict(worst.tier, worst.reason, shell=tuple(shell)) if shell else worst


def _program(program: str, shell: list[str]) -> list[Verdict]:
    """What an awk program runs and writes (its commands go to `shell`)."""
    tokens = _tokens(program)
    found: list[Verdict] = []
    in_print = False
    depth = 0  # parentheses since the print statement began
    for index, token in enumerate(tokens):
        previous = tokens[index - 1] if index else ""
        following = tokens[index + 1] if index + 1 < len(tokens) else ""
        if token in ("print", "printf"):
            in_print, depth = True, 0
        elif token in _STATEMENT_END:
            in_print = False
        elif token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        if token == "system" and following == "(":
            found.append(_command(tokens, index + 2, shell, "awk's system() runs a command"))
        elif token in ("|", "|&") and following == "getline":
            found.append(_command_before(tokens, index, shell))
        elif token in ("|", "|&") and in_print and depth <= 0:
            found.append(_command(tokens, index + 1, shell, "awk pipes its output into a command", piped=True))
        elif token in (">", ">>") and in_print and depth <= 0:
            found.append(_redirected(following))
        elif token in ("@load", "@include"):
            found.append(verdict(2 if token == "@load" else 1, f"gawk {token} loads code that cannot be seen"))
        elif token.startswith("@") and token not in ("@namespace",) and following == "(":
            found.append(verdict(2, "gawk calls a function named at run time (@name)"))
        elif token == "getline" and previous not in ("|", "|&") and following == "<" and _is_network(tokens, index + 2):
            found.append(verdict(1, "gawk reads from a network connection"))
    return found


def _command(tokens: list[str], index: int, shell: list[str], what: str, piped: bool = False) -> Verdict:
    """The command at tokens[index]: a lone string literal is classified, anything else is only known at run time."""
    token = tokens[index] if index < len(tokens) else ""
    following = tokens[index + 1] if index + 1 < len(tokens) else ""
    if token.startswith('"') and following in (")", ";", "\n", "}", "", ","):
        text = _unquoted(token)
        if text.startswith("/inet"):
            return verdict(2, "gawk sends data to a network connection")
        shell.append(f": | {text}" if piped else text)
        return verdict(0, what)
    return verdict(3, f"{what} built at run time: a command only known at run time (adr/0025)")


def _command_before(tokens: list[str], index: int, shell: list[str]) -> Verdict:
    """`"cmd" | getline`: the command is the operand before the pipe."""
    token = tokens[index - 1] if index else ""
    before = tokens[index - 2] if index >= 2 else ""
    if token.startswith('"') and (not before or before in _STATEMENT_END or before in ("(", ",", "=", "&&", "||")):
        shell.append(_unquoted(token))
        return verdict(0, "awk reads a command's output")
    return verdict(3, "awk reads the output of a command built at run time: a command only known at run time")


def _redirected(target: str) -> Verdict:
    if target.startswith('"'):
        path = _unquoted(target)
        if path in _NOT_A_FILE or path.startswith("/dev/fd/"):
            return READ
        if path.startswith("/inet"):
            return verdict(2, "gawk sends data to a network connection")
        return written("awk", path, [])
    return verdict(1, "awk writes a file named at run time")


def _is_network(tokens: list[str], index: int) -> bool:
    return index < len(tokens) and tokens[index].startswith('"/inet')


def _unquoted(token: str) -> str:
    return token[1:-1] if token.endswith('"') and len(token) > 1 else token[1:]


def _tokens(program: str) -> list[str]:
    """awk's tokens: strings, regexes (as one token "/…/"), names, numbers, operators; newlines kept (they end
    statements); comments dropped."""
    tokens: list[str] = []
    index = 0
    length = len(program)
    while index < length:
        char = program[index]
        if char in " \t\r" or (char == "\\" and program.startswith("\\\n", index)):
            index += 1 if char != "\\" else 2
            continue
        if char == "#":
            newline = program.find("\n", index)
            index = length if newline < 0 else newline
            continue
        if char == "\n":
            tokens.append("\n")
            index += 1
            continue
        if char == "/" and _expects_operand(tokens):
            end = _regex_end(program, index + 1)
            tokens.append(program[index:end])
            index = end
            continue
        match = _TOKEN.match(program, index)
        assert match is not None
        tokens.append(match.group())
        index = match.end()
    return tokens


def _expects_operand(tokens: list[str]) -> bool:
    if not tokens:
        return True
    last = tokens[-1]
    if last in _OPERAND_END or last.startswith('"') or last[0].isdigit() or last == "$":
        return False
    return not (last[0].isalpha() or last[0] == "_") or last in ("in", "printf", "print", "return", "getline")


def _regex_end(program: str, index: int) -> int:
    in_class = False
    while index < len(program) and program[index] != "\n":
        char = program[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "/" and not in_class:
            return index + 1
        index += 1
    return index
