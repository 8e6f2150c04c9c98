"""Programs whose own language writes files or runs commands: sed (`w FILE`, `s///w FILE`, `e CMD`, `s///e`),
dc (`!cmd`), awk (`system("cmd")`, `print | "cmd"`, `"cmd" | getline`), and the shell builtins that keep a command
to run later or re-run one (`trap CMD SIG`, `bind -x 'KEY: CMD'`, `complete -C CMD`, `compgen -C CMD`, `fc`) or
write the history file (`history -w/-a`), and `.` / `source` (a script run in the shell). A command found in
their text is classified as shell text (Verdict.shell), like a find -exec command; a file they write is rated as
outputs.written rates a read-only tool's output file. Each parser reads its text once, moving only forward.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.awk_code import awk_verdict
from relay_shell.policy.calls import READ, Call, Verdict, long_names, read_options, verdict
from relay_shell.policy.files import in_place
from relay_shell.policy.outputs import written
from relay_shell.policy.vocabulary import words

# -- sed ------------------------------------------------------------------------------------------------------------

_SED_VALUES = words("-e --expression -f --file -l --line-length")
_SED_OPTIONAL = words("-i --in-place")
_SED_KNOWN = long_names(_SED_VALUES, _SED_OPTIONAL, words("--sandbox"))
_SED_SINGLE = frozenset("=dDgGhHnNpPxzF")


def _sed_delimited(script: str, position: int, delimiter: str) -> int:
    """The position after the next unescaped delimiter (a backslash escapes the next character)."""
    while position < len(script) and script[position] != delimiter:
        position += 2 if script[position] == "\\" else 1
    return position + 1


def _line_rest(script: str, position: int) -> tuple[str, int]:
    end = script.find("\n", position)
    end = len(script) if end < 0 else end
    return script[position:end].strip(), end + 1


def _sed_address(script: str, position: int) -> int:
    """The position after an address (`12`, `$`, `/re/I`, `\\%re%`, `first~step`, `+N`, `~N`), if any."""
    if position < len(script) and script[position] in "+~":
        position += 1
    if position < len(script) and script[position] == "$":
        return position + 1
    if position < len(script) and (script[position] == "/" or script[position] == "\\"):
        if script[position] == "\\":
            position += 1
        delimiter = script[position] if position < len(script) else "/"
        position = _sed_delimited(script, position + 1, delimiter)
        while position < len(script) and script[position] in "IM":
            position += 1
        return position
    while position < len(script) and (script[position].isdigit() or script[position] == "~"):
        position += 1
    return position


def sed_actions(script: str) -> tuple[list[str], list[str], bool]:
    """The files a sed script writes (`w`, `W`, the s flag `w`), the commands it runs (`e CMD`), and whether it
    runs lines of its input as commands (`e` alone, the s flag `e`)."""
    files: list[str] = []
    commands: list[str] = []
    runs_input = False
    position = 0
    while position < len(script):
        if script[position] in " \t\n;{}":
            position += 1
            continue
        position = _sed_address(script, position)
        if position < len(script) and script[position] == ",":
            position = _sed_address(script, position + 1)
        while position < len(script) and script[position] in " \t!":
            position += 1
        if position >= len(script):
            break
        command = script[position]
        position += 1
        if command in "#aic":  # comment, or text to the end of the line
            _text, position = _line_rest(script, position)
        elif command in ":btTv":  # a label: to a semicolon or the end of the line
            while position < len(script) and script[position] not in ";\n":
                position += 1
        elif command in "rRwW":
            name, position = _line_rest(script, position)
            if command in "wW":
                files.append(name)
        elif command == "e":
            text, position = _line_rest(script, position)
            if text:
                commands.append(text)
            else:
                runs_input = True
        elif command in "sy" and position < len(script):
            delimiter = script[position]
            position = _sed_delimited(script, position + 1, delimiter)
            position = _sed_delimited(script, position, delimiter)
            while command == "s" and position < len(script) and script[position] not in ";\n}":
                flag = script[position]
                position += 1
                if flag == "e":
                    runs_input = True
                elif flag == "w":
                    name, position = _line_rest(script, position)
                    files.append(name)
        elif command in "lLqQ":
            while position < len(script) and script[position] in " 0123456789":
                position += 1
        # every other command (=, d, p, n, x, ...) is one letter, or text sed rejects: nothing to read
    return files, commands, runs_input


def _sed(call: Call) -> Verdict:
    """sed: in place (files.in_place), and what its script writes or runs. A script file (-f) cannot be seen:
    tier 1 as a script of unknown effect; --sandbox turns off e, r and w."""
    options, operands = read_options(call.words, _SED_VALUES, _SED_OPTIONAL, _SED_KNOWN)
    names = {name for name, _value in options}
    scripts = [value or "" for name, value in options if name in ("-e", "--expression")]
    if not scripts and not names & {"-f", "--file"} and operands:
        scripts, operands = operands[:1], operands[1:]
    found_verdicts = [in_place(call)]
    if "--sandbox" in names:
        return found_verdicts[0]
    if names & {"-f", "--file"}:
        found_verdicts.append(verdict(1, "sed runs a script file whose commands cannot be seen"))
    commands: list[str] = []
    for script in scripts:
        files, run, runs_input = sed_actions(script)
        found_verdicts += [written("sed", name, operands) for name in files]
        commands += run
        if runs_input:
            # The command is the input line (or what `s///e` made of it): only known at run time, as awk's
            # `system($0)` and `eval "$(…)"` are (adr/0025 Round 6).
            found_verdicts.append(verdict(3, "sed runs lines of its input as commands: only known at run time"))
    worst = max(found_verdicts, key=lambda item: item.tier)
    return Verdict(worst.tier, worst.reason, shell=tuple(commands)) if commands else worst


# -- dc and awk -----------------------------------------------------------------------------------------------------

# dc's `!` runs the rest of the line as a command, except `!<`, `!=`, `!>` (negated comparisons).
_DC_COMMAND = re.compile(r"!(?![<=>])([^\n]*)")
_DC_VALUES = words("-e --expression -f --file")
_DC_KNOWN = long_names(_DC_VALUES)


def dc_commands(program: str) -> list[str]:
    """The commands a dc program runs with `!`."""
    return [match.group(1) for match in _DC_COMMAND.finditer(program) if match.group(1)]


def dc_reads_stdin(words: list[str]) -> bool:
    """dc reads its program from stdin when given no -e, -f or file, or the file `-`."""
    options, files = read_options(words, _DC_VALUES, frozenset(), _DC_KNOWN)
    sources = [value for name, value in options if name in _DC_VALUES]
    return "-" in files or "-" in sources or not (files or sources)


def _dc(call: Call) -> Verdict:
    options, _files = read_options(call.words, _DC_VALUES, frozenset(), _DC_KNOWN)
    expressions = [value for name, value in options if name in ("-e", "--expression") and value]
    commands = [command for text in expressions for command in dc_commands(text)]
    return Verdict(0, "dc runs a command", shell=tuple(commands)) if commands else READ


# -- shell builtins -------------------------------------------------------------------------------------------------


def _trap(call: Call) -> Verdict:
    """`trap ACTION SIGNAL...` runs ACTION when the signal (or EXIT) comes: classified now. `trap - SIG`,
    `trap '' SIG`, `trap -p`, `trap -l` run nothing."""
    operands = [word for word in call.words[1:] if word not in ("-p", "-l", "-P", "--")]
    if len(operands) >= 2 and operands[0] not in ("-", ""):
        return Verdict(0, "trap keeps a command to run later", shell=(operands[0],))
    return READ


def _bind(call: Call) -> Verdict:
    """`bind -x 'KEYSEQ: COMMAND'` runs COMMAND when the keys are pressed."""
    binding = call.value("-x")
    if not binding:
        return READ
    _keys, _colon, command = binding.partition('":') if '":' in binding else binding.partition(":")
    command = command.strip().strip("'\"")
    return Verdict(0, "bind -x keeps a command to run on a key", shell=(command,)) if command else READ


def _completion(call: Call) -> Verdict:
    """`complete -C CMD` / `compgen -C CMD` run CMD to produce completions; the word list of -W is expanded when
    the completion is made, so its `$(…)` and backquotes run then."""
    shell = [command for command in (call.value("-C"),) if command]
    wordlist = call.value("-W") or ""
    if "$(" in wordlist or "`" in wordlist:
        shell.append(f'echo "{wordlist}"')
    return Verdict(0, f"{call.program} runs a command to complete words", shell=tuple(shell)) if shell else READ


def _fc(call: Call) -> Verdict:
    """`fc -l` lists the history; `fc` and `fc -s` re-run commands from it, which cannot be classified."""
    if call.has("-l"):
        return READ
    return verdict(2, "fc re-runs commands from the history: cannot classify")


def _history(call: Call) -> Verdict:
    """`history -w [FILE]` / `-a` write the history file; `-s LINE` adds a line that `!!` or `fc` can run (it is
    classified as shell text); every other use is the shell's own list."""
    if call.has("-s"):
        return Verdict(0, "history -s adds a line that can be re-run", shell=(" ".join(call.operands),))
    if not call.has("-w", "-a"):
        return READ
    operands = call.operands
    return written("history", operands[0], []) if operands else verdict(1, "history writes the history file")


def _source(call: Call) -> Verdict:
    """A script run in the shell itself (fish's `source` with no file reads it from stdin)."""
    return verdict(1, f"{call.program} runs a script in the shell")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "sed": _sed,
    "gsed": _sed,
    "dc": _dc,
    **dict.fromkeys(("awk", "gawk", "mawk", "nawk", "original-awk"), lambda call: awk_verdict(call.words)),
    "trap": _trap,
    "bind": _bind,
    "complete": _completion,
    "compgen": _completion,
    "fc": _fc,
    "history": _history,
    ".": _source,
    "source": _source,
}
