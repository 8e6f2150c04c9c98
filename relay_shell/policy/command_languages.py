"""Programs with a command language of their own that can run shell commands (adr/0025, round 4): vim/ex (`-c`,
`+cmd`, `--cmd`, ex commands on stdin with `-es`), ed, gdb (`-ex`, attaching with `-p`), lldb, m4 (`syscmd`),
groff -U (`.sy`), sqlite3 and mysql (`.shell`, `.system`, `system`, `\\!`), split --filter, zip -TT, socat
EXEC/SYSTEM, and the code options of lua, php, gnuplot, emacs, expect and exiftool. What such a language runs is
handed back as shell text (Verdict.shell); code that reaches a shell or changes files some other way is 2.

Also which programs read their program or commands from stdin (`awk -f /dev/stdin`, `perl -`, `python3
/dev/fd/0`, `sed -f -`, `vim -es`, `ed`, `m4`): the classifier reads the literal stdin text as that language when
it can see it (a here-document, a here-string, an upstream echo/printf), and rates it 2 when it cannot."""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import Call, Verdict, verdict

STDIN_NAMES = frozenset(["-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/thread-self/fd/0"])
EDITORS = frozenset(["vim", "vi", "nvim", "ex", "view", "vimdiff", "gvim", "evim", "rvim", "nex"])
_EX_RANGE = re.compile(r"[\s:]*(?:[0-9.,$%;+\-]|'[a-z<>]|/[^/\n]*/|\?[^?\n]*\?)*\s*")
_EX_CODE = re.compile(
    r"(?:sh|shell|te|ter|term|terminal|py|py3|python|python3|pyx|pythonx|lua|luado|luafile|perl|perldo|rub|ruby"
    r"|rubydo|tcl|tcldo|exe|exec|execute|so|source|mak|make|lmak|lmake|cal|call|let|redi|redir|mks|mkvimrc"
    r"|mkexrc|mksession|diffp|diffpatch)\b"
)
_EX_WRITE = re.compile(r"(?:w|wq|wa|wqa|wqall|x|xa|xit|exi|exit|up|update|sav|saveas|wn|wN|wp|write|file)\b!?")
_FUNCTION_COMMAND = re.compile(
    r"\b(?:system|systemlist|os\.execute|io\.popen|shell_exec|passthru|popen|proc_open|exec|spawn|shell-command"
    r"|call-process-shell-command|start-process-shell-command|syscmd|esyscmd)\s*\(?\s*[\"']?([^\"')]*)"
)
_TCL_EXEC = re.compile(r"(?:^|[\[;{\s])(?:exec|spawn|open\s+\"\|)\s+([^\];}\n]+)")


def ex_commands(text: str) -> Verdict:
    """ex/vim commands, one a line (`|` separates them, except after `!`): `!cmd`, `r !cmd`, `w !cmd` run shell
    text; `:sh`, `:terminal`, `:call system()`, `:py`, `:source` and friends run code (2); `:w FILE` writes (1)."""
    shell: list[str] = []
    tier, reason = 1, "an editor's commands"
    for line in text.splitlines():
        for command in _bar_split(line):
            command = command[_EX_RANGE.match(command).end() :] if _EX_RANGE.match(command) else command  # type: ignore[union-attr]
            bang = re.match(r"(?:r|re|rea|read|w|wr|wri|writ|write|e|ed|edi|edit|new|vne|vnew)?\s*!(.*)", command)
            if bang is not None and bang.group(1).strip():
                shell.append(bang.group(1))
            elif _EX_CODE.match(command):
                tier, reason = 2, f"an editor command runs code: {command[:40]}"
            elif _EX_WRITE.match(command) and tier < 1:
                tier, reason = 1, "an editor command writes a file"
    return Verdict(
        max(tier, 1 if shell else tier), reason if not shell else "an editor runs shell commands", tuple(shell)
    )


def _bar_split(line: str) -> list[str]:
    parts: list[str] = []
    for part in line.split("|"):
        if parts and "!" in parts[-1]:
            parts[-1] += "|" + part  # `!cmd | other` is one shell command
        else:
            parts.append(part)
    return parts


def ed_commands(text: str) -> Verdict:
    shell = [match.group(1) for match in re.finditer(r"^[\s0-9.,$;+\-]*[erw]?\s*!(.+)$", text, re.MULTILINE)]
    return Verdict(1, "ed runs shell commands" if shell else "ed edits a file", tuple(shell))


def gdb_commands(commands: list[str]) -> Verdict:
    """gdb's commands: `shell CMD`, `!CMD`, `pipe … | CMD` run shell text; `attach PID` and `python` are 2."""
    shell: list[str] = []
    tier, reason = 1, "gdb runs a program"
    for command in commands:
        stripped = command.strip()
        word = stripped.split(None, 1)[0] if stripped else ""
        if word in ("shell", "she", "!") or stripped.startswith("!"):
            shell.append(
                stripped.split(None, 1)[1] if word in ("shell", "she", "!") and " " in stripped else stripped[1:]
            )
        elif word in ("pipe", "|") or stripped.startswith("|"):
            shell.append(stripped.rsplit("|", 1)[-1])
        elif word in ("attach", "at", "att", "python", "py", "python-interactive", "pi", "guile", "gu", "compile"):
            tier, reason = 2, f"gdb {word}: acts on another process or runs code"
        elif word in ("source", "so"):
            tier, reason = max(tier, 1), "gdb sources a file"
    return Verdict(tier, reason, tuple(shell))


def _gdb(call: Call) -> Verdict:
    words, commands, attaches = call.words, [], False
    operands: list[str] = []
    position = 1
    debugged: tuple[tuple[str, ...], ...] = ()
    while position < len(words):
        word = words[position]
        name, equals, attached = word.partition("=")
        bare = name.lstrip("-")
        value = attached if equals else (words[position + 1] if position + 1 < len(words) else "")
        step = 1 if equals else 2
        if word in ("--args", "-args"):  # the program and its arguments: `run` starts it as given
            debugged = (tuple(words[position + 1 :]),) if position + 1 < len(words) else ()
            break
        if word.startswith("-") and bare in ("ex", "eval-command", "iex", "init-eval-command"):
            commands.append(value)
        elif word.startswith("-") and bare in ("p", "pid", "c", "core", "x", "command", "ix", "init-command", "cd"):
            attaches = attaches or bare in ("p", "pid")
        elif word.startswith("-"):
            step = 1
        else:
            operands.append(word)
            step = 1
        position += step
    found = gdb_commands(commands)
    if attaches or (len(operands) >= 2 and operands[1].isdigit()):
        return Verdict(2, "gdb attaches to a running process", found.shell, debugged)
    return Verdict(found.tier, found.reason, found.shell, debugged)


def _lldb(call: Call) -> Verdict:
    commands = _values_of(call.words, ("-o", "--one-line", "-O", "--one-line-before-file"))
    shell = [text.split("shell", 1)[1] for text in commands if text.strip().startswith("platform shell")]
    attaching = call.has("-p", "--attach-pid", "-n", "--attach-name", "-w", "--wait-for")
    if attaching or any(text.strip().startswith(("process attach", "attach", "script")) for text in commands):
        return Verdict(2, "lldb attaches to a running process or runs code", tuple(shell))
    return Verdict(1, "lldb runs a program", tuple(shell))


def _editor(call: Call) -> Verdict:
    """vim's `-c CMD` (clustered too: `ex -sc CMD`), `+CMD`, `--cmd CMD`, `-S FILE` (sourced: 1)."""
    commands: list[str] = []
    words = call.words
    position = 1
    while position < len(words):
        word = words[position]
        if word == "--cmd" and position + 1 < len(words):
            commands.append(words[position + 1])
            position += 1
        elif word.startswith("+") and len(word) > 1:
            commands.append(word[1:])
        elif word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            rest = word[word.index("c", 1) + 1 :]
            if rest:
                commands.append(rest)
            elif position + 1 < len(words):
                commands.append(words[position + 1])
                position += 1
        position += 1
    found = ex_commands("\n".join(commands)) if commands else verdict(1, f"{call.program}: an editor")
    return found


def _split(call: Call) -> Verdict:
    value = call.value("--filter")
    if value:
        return Verdict(1, "split runs its filter through a shell", (value,))
    return verdict(1, "split writes files")


def _zip(call: Call) -> Verdict:
    value = call.value("-TT", "--unzip-command")
    if value:
        return Verdict(1, "zip -TT runs its test command", (value,))
    return verdict(1, "zip writes an archive")


def _values_of(words: list[str], options: tuple[str, ...]) -> list[str]:
    """The values of options that take the next word (or `=VALUE`), wherever written."""
    values = []
    for position, word in enumerate(words[1:], start=1):
        name, equals, attached = word.partition("=")
        if word in options and position + 1 < len(words):
            values.append(words[position + 1])
        elif equals and name in options:
            values.append(attached)
    return values


def _socat(call: Call) -> Verdict:
    from relay_shell.policy.network import RULES as NETWORK_RULES

    shell: list[str] = []
    for word in call.operands:
        kind, colon, rest = word.partition(":")
        if colon and kind.upper() in ("EXEC", "SYSTEM"):
            shell.append(rest.split(",", 1)[0] if kind.upper() == "EXEC" else rest)
    found = NETWORK_RULES["socat"](call)
    if shell:
        return Verdict(max(2, found.tier), "socat runs a program for an address", tuple(shell))
    return found


def code_text_verdict(program: str, code: str) -> Verdict:
    """Code in a language the classifier does not parse (lua, php, gnuplot, emacs lisp, Tcl/expect, m4): the
    literal commands of its command-running calls are shell text, and any such call is 2."""
    shell = [match.group(1) for match in _FUNCTION_COMMAND.finditer(code) if match.group(1).strip()]
    shell += [match.group(1) for match in _TCL_EXEC.finditer(code)] if program in ("expect", "tclsh", "wish") else []
    if shell or _FUNCTION_COMMAND.search(code):
        return Verdict(2, f"{program} code runs commands", tuple(shell))
    return verdict(1, f"{program} runs code")


_CODE_OPTIONS = {
    "lua": ("-e",),
    "luajit": ("-e",),
    "php": ("-r", "-B", "-R", "-F", "-E"),
    "gnuplot": ("-e",),
    "emacs": ("--eval", "-eval", "--execute", "-l", "--load"),
    "expect": ("-c",),
}


def _code_options(call: Call) -> Verdict:
    codes = _values_of(call.words, _CODE_OPTIONS[call.program])
    if call.program == "php" and call.has("-S"):
        from relay_shell.policy.network import RULES as NETWORK_RULES

        return NETWORK_RULES["php"](call)
    if not codes:
        return verdict(1, f"{call.program} runs code")
    found = [code_text_verdict(call.program, code) for code in codes]
    worst = max(found, key=lambda item: item.tier)
    return Verdict(worst.tier, worst.reason, tuple(text for item in found for text in item.shell))


def _exiftool(call: Call) -> Verdict:
    from relay_shell.policy.perl_code import perl_verdict

    codes = _values_of(call.words, ("-if", "-p"))
    codes += [word[word.index("${") :] for word in call.words if "${" in word and ";" in word]
    if not codes:
        return verdict(1, "exiftool reads or writes metadata")
    found = [perl_verdict(["perl", "-e", code]) for code in codes]
    worst = max(found, key=lambda item: item.tier)
    return Verdict(max(1, worst.tier), worst.reason, worst.shell, worst.commands)


RULES: dict[str, Callable[[Call], Verdict]] = {
    **dict.fromkeys(EDITORS, _editor),
    "gdb": _gdb,
    "gdb-multiarch": _gdb,
    "lldb": _lldb,
    "split": _split,
    "zip": _zip,
    "socat": _socat,
    **dict.fromkeys(_CODE_OPTIONS, _code_options),
    "exiftool": _exiftool,
}


def client_commands(text: str) -> list[str]:
    """Shell commands in a database client's input: sqlite3's `.shell`/`.system`, mysql's `system`/`\\!`, psql's
    `\\!`."""
    pattern = r"^\s*(?:\.shell|\.system|\.sh|system|\\!)\s+(.+?);?\s*$"
    return [match.group(1) for match in re.finditer(pattern, text, re.MULTILINE | re.IGNORECASE)]
