"""A shell's own options, parsed as sh and bash parse them (adr/0025, round 4): long options first (`--rcfile F`,
`--init-file F` take a value), then clusters of letters after `-` or `+`, where `o` and `O` each take the next word
in turn (`-co pipefail`, `+o nounset`), up to a lone `-` or `--` or the first word that is neither; that word is the
script — the command text with `-c` (`sh -c -e 'TEXT'`, `bash -c -- 'TEXT'`), a script file without it. A shell
with no script, or with `-s`, reads its commands from stdin."""

from __future__ import annotations

from dataclasses import dataclass

from relay_shell.policy.vocabulary import SHELLS

_LONG_VALUES = frozenset(["--rcfile", "--init-file"])


@dataclass(frozen=True, slots=True)
class Invocation:
    inline: bool  # -c: the operand is command text
    operand: str | None  # the first operand: the text with -c, else a script file
    stdin_script: bool  # -s was given: commands come from stdin even with operands


def parse_shell(arguments: list[str]) -> Invocation:
    """The arguments after the shell's name."""
    inline = stdin_script = False
    position = 0
    while position < len(arguments):
        word = arguments[position]
        position += 1
        if word in ("-", "--"):
            break
        if word.startswith("--"):
            position += 1 if word in _LONG_VALUES else 0
            continue
        if len(word) < 2 or word[0] not in "-+":
            position -= 1
            break
        for letter in word[1:]:
            if letter in "oO":
                position += 1  # the option's name is the next word (bash and dash take them in order)
            elif letter == "c" and word[0] == "-":
                inline = True
            elif letter == "s" and word[0] == "-":
                stdin_script = True
    operand = arguments[position] if position < len(arguments) else None
    return Invocation(inline, operand, stdin_script)


def inline_script(program: str, words: list[str]) -> str | None:
    """The shell text `eval WORDS` or `sh … -c TEXT` runs."""
    if program == "eval":
        return " ".join(words[1:])
    if program == "exec":
        return None
    invocation = parse_shell(words[1:])
    return invocation.operand if invocation.inline else None


def script_operand(words: list[str], shells: frozenset[str] = SHELLS) -> str:
    """A shell's script file (its first operand), or any other program's first operand."""
    if words[0].rsplit("/", 1)[-1] in shells:
        return parse_shell(words[1:]).operand or ""
    return next((word for word in words[1:] if not word.startswith("-")), "")
