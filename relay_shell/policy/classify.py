"""Tier classification of all the text that reaches the target.

A speed bump, not a boundary: a program can always construct at run time a command that no text
classifier sees. What we can see we classify conservatively, reading it the way the shell and the program read it
(adr/0025): the tokenizer finds every command, redirection, here-document and assignment as sh and bash do;
wrappers (`sudo`, `env`, `nice`, `timeout`, `xargs`, `flock`, `watch`, `su -c`, …) are stripped, quotes removed,
braces and globbed command words expanded, paths reduced to basenames; loop bodies, `sh -c` / `eval` strings,
`$(…)` contents, here-document expansions, `find -exec`, `fd -x` and `xargs` commands, aliases, `ssh HOST CMD`'s
remote command and every command a program's options, configuration or environment say it runs are classified
recursively (to a bounded depth); variables that carry code (code_env.py) are checked wherever they are set; and a
command word only known at run time is tier 3. stdin and the env overlay are classified as the text that reaches
the program: shell text for programs that run it, SQL for database clients.

Linear time: the shell tokenizer is one pass over the text with an index that only moves forward; nested
text (`$(…)`, `sh -c '…'`) is re-read at most MAX_DEPTH times. No regex here can backtrack on input size.
Text nested deeper than that, or under more wrappers than wrappers.MAX_WRAPPERS, is tier 3: what it runs was
not looked at, and the classifier fails towards caution (confirmation in open mode, refusal in guarded mode).
"""

from __future__ import annotations

from collections.abc import Sequence

from relay_shell.plan import Subject
from relay_shell.policy import code_env, own_files, shell_state
from relay_shell.policy.calls import Context, Verdict
from relay_shell.policy.command_words import MAX_CANDIDATES, candidates, expand_words
from relay_shell.policy.env_substitution import Env, substitute, substituted_values, unsubstituted
from relay_shell.policy.field_splitting import known_values, positional_words, split_readings
from relay_shell.policy.find import fd_selection, find_selection
from relay_shell.policy.findings import Classification, Finding
from relay_shell.policy.git_config import config_verdict
from relay_shell.policy.interpreters import interpreter_verdict, is_interpreter
from relay_shell.policy.known_places import STARTS, Places, advance
from relay_shell.policy.network import connection_findings
from relay_shell.policy.pipelines import dc_pipe_findings, has_fork_bomb, upstream_context
from relay_shell.policy.python_code import python_verdict
from relay_shell.policy.rules import known_names, known_program, program_verdict
from relay_shell.policy.shell_invocation import inline_script, script_operand
from relay_shell.policy.shell_state import (
    TextState,
    arithmetic_findings,
    read_state,
    subscript_commands,
    subscripts_in,
)
from relay_shell.policy.shell_tokens import tokenize
from relay_shell.policy.simple_commands import Command
from relay_shell.policy.stdin import (
    HEADERS,
    Readers,
    group_stdin_findings,
    piped_code_findings,
    relayed_text,
    stdin_findings,
    stdin_of_text,
    strip_reserved,
    unseen_script_findings,
)
from relay_shell.policy.vocabulary import DB_CLIENTS, SHELLS, STDIN_SHELLS
from relay_shell.policy.wrappers import Unwrapped, basename, init_script_words, replaced, unwrap
from relay_shell.policy.writes import given_terminal, no_command_findings, redirect_findings, tree_findings

MAX_DEPTH = 6
_TOO_DEEP = "nested too deeply to classify: treated as irreversible"
_SHELL_SESSION = "starts a shell that reads its commands from stdin"
_DYNAMIC_WORD = "a command word only known at run time: it could be any program, treated as irreversible"
_UNTERMINATED = "a quote or substitution that is never closed: the rest is read as commands too"
_PIPED_SCRIPT = ("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/", "/dev/stdin")
_NO_ENV: Env = {}
_NO_STATE = TextState()
_NO_CONTEXT = Context()


def classify(subject: Subject) -> Classification:
    findings = analyze(subject)
    if not findings:
        return Classification(0, (), ())
    top = max(findings, key=lambda finding: finding.tier)
    reasons = tuple(dict.fromkeys(finding.reason for finding in findings if finding.tier == top.tier))
    return Classification(top.tier, reasons, tuple(finding.canonical for finding in findings))


def analyze(subject: Subject) -> list[Finding]:
    """Every simple command and other classified piece of the subject, with its tier."""
    findings: list[Finding] = []
    if subject.fixed_tier is not None:
        findings.append(Finding("", subject.fixed_tier, "inspection tool"))
        return findings + connection_findings(subject)
    env = {name: value for name, value in subject.env if value is not None}
    if env:
        findings += _variables_findings(tuple(env.items()), 0, _NO_ENV)
        for value in env.values():
            findings += _literal_code(value, 0, _NO_ENV)
    if subject.command is not None:
        findings += shell_findings(subject.command, 0, env, TextState(directories=subject.directories))
        if subject.stdin:
            findings += stdin_of_text(subject.command, subject.stdin, _readers(env))
    if subject.argv is not None:
        words = list(subject.argv)
        findings += Places(list(subject.directories)).read(_command(words), command_findings, 0, env)
        if subject.stdin:
            findings += stdin_findings(words, subject.stdin, _readers(env))
    if subject.stdin:
        findings += _literal_code(subject.stdin, 0, env)
    if subject.script is not None:
        if subject.interpreter == "python":
            findings += _verdict_findings(python_verdict(subject.script), "python script", 0, env)
        else:
            findings += shell_findings(subject.script, 0, env, TextState(directories=subject.directories))
    if subject.typed is not None:
        # Which program reads the keyboard cannot be known for sure (`exec -a`, sudo, a remote shell): every
        # line counts as shell text, and Python's view adds what it finds stateful.
        findings += shell_findings(subject.typed, 0, env, TextState(directories=subject.directories))
        python = _verdict_findings(python_verdict(subject.typed), "python input", 0, env)
        findings += [finding for finding in python if finding.tier >= 2]
    findings += [Finding(text[:200], tier, reason) for text, tier, reason in subject.session_findings]
    if subject.transfer is not None:
        findings.append(Finding(subject.transfer, 2, "file transfer"))
    if subject.transfer_writes is not None and subject.transfer_tree:
        findings += tree_findings(subject.transfer_writes)
    elif subject.transfer_writes is not None:
        findings += redirect_findings([(">", subject.transfer_writes)])
    return findings + connection_findings(subject)


def _variables_findings(assigned: Sequence[tuple[str, str | None]], depth: int, env: Env) -> list[Finding]:
    """Variables set for a program (the overlay, `VAR=… cmd`, `env VAR=…`, `export VAR=…`), checked against the
    table of code-carrying variables; git's configuration overlay read as git configuration."""
    findings: list[Finding] = []

    def shell(text: str, level: int) -> list[Finding]:
        return shell_findings(text, level, env)

    def command(words: list[str], level: int) -> list[Finding]:
        return command_findings(_command(words), level, env)

    for name, value in assigned:
        if value is None:
            if code_env.kind_of(name) is not None:
                findings.append(
                    Finding(f"{name}=…", 2, f"sets {name}, which carries code, from input: cannot classify")
                )
            continue
        findings += code_env.assignment_findings(name, value, depth, shell, command)
    if any(name.startswith("GIT_CONFIG") for name, _value in assigned):
        values = {name: value for name, value in assigned if value is not None}
        for key, value in code_env.git_overlay_pairs(values):
            found = config_verdict(key, value)
            findings += _verdict_findings(found, f"git config {key}={value}"[:200], depth, env)
    return findings


def _literal_code(text: str, depth: int, env: Env) -> list[Finding]:
    """Commands in `NAME[…$(…)…]` in literal text: bash runs them when the text reaches arithmetic."""
    if "[" not in text or ("$(" not in text and "`" not in text):
        return []
    return [finding for inner in subscript_commands(text) for finding in shell_findings(inner, depth + 1, env)]


def _verdict_findings(found: Verdict, canonical: str, depth: int, env: Env) -> list[Finding]:
    findings = [Finding(canonical, found.tier, found.reason)]
    for text in found.shell:
        findings += shell_findings(text, depth + 1, env)
    for argv in found.commands:
        findings += command_findings(_command(list(argv)), depth + 1, env)
    return findings


def _readers(env: Env) -> Readers:
    """How stdin.py reads the text it finds to be shell text or Python, with the overlay."""

    def shell(text: str, depth: int) -> list[Finding]:
        return shell_findings(text, depth, env)

    def python(text: str, depth: int) -> list[Finding]:
        return _verdict_findings(python_verdict(text), "python script", depth, env)

    def command(words: list[str], depth: int) -> list[Finding]:
        return command_findings(_command(words), depth, env)

    return Readers(shell, python, command)


def _command(words: list[str]) -> Command:
    return Command(words=words, dynamic=["$" in word or "`" in word for word in words])


# -- shell text -----------------------------------------------------------------------------------------------------


def shell_findings(text: str, depth: int, env: Env = _NO_ENV, outer: TextState | None = None) -> list[Finding]:
    """Shell text: read as bash reads it and, where POSIX sh would read a quote otherwise (`$'…'`), as sh too."""
    if depth > MAX_DEPTH:
        return [Finding(text[:200], 3, _TOO_DEEP)]
    findings: list[Finding] = []
    if has_fork_bomb(text):
        findings.append(Finding("fork bomb", 3, "fork bomb"))
    nested: list[str] = []
    tokens = tokenize(text, nested)
    readings = [tokens]
    if tokens.ansi_c:
        readings.append(tokenize(text, nested, ansi_c=False))
    state = read_state(tokens, outer, text)
    here = state.env(env) if state.values else env
    for reading in readings:
        findings += _commands_findings(reading.commands, depth, here, state) + own_files.loop_writes(
            reading.commands, nested
        )
        if "<<" in text:
            findings += group_stdin_findings(text, reading.commands, _readers(here))
        if reading.arithmetic:
            findings += arithmetic_findings(reading.arithmetic, state)
        for tail in reading.unterminated:
            findings.append(Finding(tail[:200] or text[-200:], 1, _UNTERMINATED))
            if tail.strip():
                findings += shell_findings(tail, depth + 1, here)
    for inner in dict.fromkeys(nested):
        findings += shell_findings(inner, depth + 1, here, state)
    return findings


def _commands_findings(commands: list[Command], depth: int, env: Env, state: TextState) -> list[Finding]:
    findings: list[Finding] = []
    loop_depth = 0
    every_entry = False  # the innermost `for` loop runs over every entry of a directory
    upstream = _NO_CONTEXT  # what the commands before this one in its pipeline select
    previous: list[str] = []
    relayed: str | None = None  # the literal text the command before writes to the pipe (echo, cat <<EOF, …)
    places = Places(list(state.directories)) if state.directories else None  # the caller's cwd (C1)
    for index, command in enumerate(commands):
        first = command.words[0] if command.words else ""
        if first == "done":
            loop_depth = max(0, loop_depth - 1)
        elif first in ("for", "select"):
            every_entry = any(word == "*" or word.endswith("/*") for word in command.words[2:])
        elif "do" in command.words[:2]:
            loop_depth += 1
        # Updated only for piped commands, one command at a time: linear, and free for the common case.
        upstream = upstream_context(upstream, previous) if command.piped_into else _NO_CONTEXT
        context = upstream
        if loop_depth:
            context = Context(context.via_xargs, True, context.selection, context.all_but, every_entry)
        if places is None:  # else read again where a `cd` went, with a loop variable's words (adr/0025 Round 9)
            findings += command_findings(command, depth, env, context, state)
        else:
            findings += places.read(command, command_findings, depth, env, context, state)
        places = advance(places, command) if first in STARTS else places
        if command.piped_into and any(word == "dc" or word.endswith("/dc") for word in command.words):
            findings += dc_pipe_findings(command.words, previous, lambda text: shell_findings(text, depth + 1, env))
        if command.piped_into:
            findings += piped_code_findings(command.words, previous, _readers(env), depth, relayed)
        if index + 1 < len(commands) and commands[index + 1].piped_into:
            relayed = relayed_text(command, relayed if command.piped_into else None)
        previous = command.words
    return findings


def command_findings(
    command: Command, depth: int, env: Env = _NO_ENV, context: Context | None = None, state: TextState = _NO_STATE
) -> list[Finding]:
    if depth > MAX_DEPTH:  # argv a program runs (kubectl exec … kubectl exec …) nests like shell text
        return [Finding(" ".join(command.words)[:200], 3, _TOO_DEEP)]
    findings = redirect_findings(command.redirects, env, state.known_positional()) if command.redirects else []
    if command.assignments:
        assigned = [(name, value) for name, value, _dynamic in command.assignments]
        findings += _variables_findings(assigned, depth, env)
        for _name, value in assigned:
            findings += _literal_code(value, depth, env)
    raw_words = strip_reserved(command.words)
    if not raw_words:
        return findings + no_command_findings(command, False, False)
    offset = len(command.words) - len(raw_words)
    if raw_words[0] in HEADERS:
        return findings  # a loop or case header, a function keyword: its substitutions are classified as nested text
    flags = command.dynamic[offset:]
    unquoted = [index + offset in command.unquoted for index in range(len(raw_words))] if command.unquoted else None
    globbed: list[bool] = []
    if command.marks:
        count = len(raw_words)
        raw_words, flags, globbed = expand_words(raw_words, flags, command.marks, offset)
        if unquoted is not None and len(raw_words) != count:
            unquoted = ["$" in word for word in raw_words]
    moved: list[bool] | None = None
    positional = state.known_positional()
    if positional is not None and any(flags):
        count = len(raw_words)
        raw_words, flags, unquoted, moved = positional_words(raw_words, flags, unquoted or [False] * count, positional)
        globbed = globbed if len(raw_words) == count else []
    words = substitute(raw_words, env)
    substituted = substituted_values(raw_words, env) if words is not raw_words else {}
    split = [False] * len(words)
    if unquoted is not None:
        split = [bare and word != original for bare, word, original in zip(unquoted, words, raw_words, strict=True)]
        if moved is not None:
            split = [cut or (bare and was) for cut, bare, was in zip(split, unquoted, moved, strict=True)]
    if words is not raw_words:  # substituted words are known, unless a value names another variable (`y=$x`)
        flags = known_values(flags, words, raw_words)
    for word in words:
        if "${" in word:
            if "[" in word:
                findings += arithmetic_findings(subscripts_in([word]), state)
            if "@P}" in word:
                findings.append(
                    Finding(word[:200], 2, "prompt expansion (${x@P}) runs the $(…) in a value: cannot classify")
                )
    for reading, reading_flags in split_readings(words, flags, split, state.ifs_choices() if any(split) else []):
        base = raw_words if len(reading) == len(raw_words) else reading
        reading_globbed = globbed if len(reading) == len(raw_words) else []
        findings += _expanded_findings(
            command, base, reading, reading_flags, reading_globbed, substituted, depth, env, context, state
        )
    return findings


def _expanded_findings(
    command: Command,
    raw_words: list[str],
    words: list[str],
    flags: list[bool],
    globbed: list[bool],
    substituted: dict[str, str],
    depth: int,
    env: Env,
    context: Context | None,
    state: TextState,
) -> list[Finding]:
    """A simple command after expansion and field splitting: its wrappers, then its program."""
    findings: list[Finding] = []
    unwrapped = unwrap(words, flags)
    if unwrapped.inline or unwrapped.assignments or unwrapped.writes or unwrapped.effects or unwrapped.possible_command:
        findings += _wrapper_findings(unwrapped, command.words, depth, env, context)
    if unwrapped.too_deep:
        findings.append(Finding(" ".join(command.words)[:200], 3, _TOO_DEEP))
    position = len(words) - len(unwrapped.words)
    words, dynamic = unwrapped.words, unwrapped.dynamic
    if not words:
        return findings + no_command_findings(command, unwrapped.escalated, unwrapped.shell_session)
    if globbed and globbed[position]:
        return findings + _globbed_findings(raw_words, flags, position, depth, env, context, state)
    if words[0].startswith("/etc/"):
        words = init_script_words(words)  # `/etc/init.d/ssh stop` is `service ssh stop`, not the ssh client
    program = basename(words[0])
    canonical = " ".join([program, *words[1:]])
    if substituted:
        # Classified with the overlay's values, shown (to deny patterns, the client, the audit log's reason) as
        # written: a value may be a secret whose name only the overlay's key reveals.
        canonical = unsubstituted(canonical, substituted)
    if dynamic and dynamic[0]:
        findings.append(Finding(canonical, 3, _DYNAMIC_WORD))
        return findings
    if program in state.aliases:
        findings += shell_findings(" ".join([state.aliases[program], *words[1:]]), depth + 1, env)
    return findings + _program_findings(
        program, words, canonical, command, unwrapped.escalated, unwrapped.via_xargs, depth, env, context, state
    )


def _program_findings(
    program: str,
    words: list[str],
    canonical: str,
    command: Command,
    escalated: bool,
    via_xargs: bool,
    depth: int,
    env: Env,
    context: Context | None,
    state: TextState,
) -> list[Finding]:
    context = context or _NO_CONTEXT
    if via_xargs:
        context = Context(True, True, context.selection, context.all_but, context.every)
    found = program_verdict(program, words, context)
    tier, reason = found.tier, found.reason
    findings: list[Finding] = []
    if program in SHELLS or program in ("eval", "exec"):
        inner = inline_script(program, words)
        if inner is not None:
            findings += shell_findings(inner, depth + 1, env, shell_state.inline_arguments(program, words, state))
            tier, reason = max(tier, 1), f"{program} running inline shell text"
        elif program in SHELLS and script_operand(words).startswith(_PIPED_SCRIPT):
            tier, reason = max(tier, 2), f"{program} runs a script from a pipe: code that cannot be classified"
    elif is_interpreter(program):
        found = interpreter_verdict(program, words, found)
        tier, reason = found.tier, found.reason
    if tier < 2 and given_terminal(program, words, canonical):  # its keys, its settings (attack 4, K2)
        tier, reason = 2, f"{program} is given another terminal (a session's, another client's, a user's)"
    if command.heredoc is not None or command.redirects:
        findings += _heredoc_findings(program, command, depth, env)
    if program in SHELLS or program in (".", "source") or "/fd/" in canonical:
        findings += unseen_script_findings(program, words, command, _readers(env), depth)
    piped_script = program in (".", "source") and script_operand(words).startswith(_PIPED_SCRIPT)
    if command.piped_into and (program in SHELLS or is_interpreter(program) or program in STDIN_SHELLS or piped_script):
        operands = [word for word in words[1:] if not word.startswith("-")]
        if not operands or (program in SHELLS and "-s" in words) or program in STDIN_SHELLS or piped_script:
            tier, reason = max(tier, 2), f"pipes into {program}: runs code that cannot be classified"
    truncates = program in (":", "true") or (program == "cat" and words[1:] == ["/dev/null"])
    if truncates and any(op in (">", ">|") and target != "/dev/null" for op, target in command.redirects):
        tier, reason = max(tier, 2), "empties a file"
    if escalated:
        tier, reason = max(tier, 2), reason if tier >= 2 else "privilege escalation"
    findings.append(Finding(canonical, tier, reason))
    if found.shell or found.commands or found.assignments or found.arithmetic:
        findings += _verdict_extras(found, depth, env, state)
    if program == "find":
        selection, _delete, execs, _writes = find_selection(words)
    elif program in ("fd", "fdfind"):
        selection, execs = fd_selection(words)
    else:
        execs = []
    for exec_words in (replaced(argv) for argv in execs if argv):
        findings += [Finding(" ".join(words), tier, why) for tier, why in exec_words.effects]
        findings += command_findings(
            Command(exec_words.words, exec_words.dynamic), depth + 1, env, Context(False, True, selection)
        )
    return findings


def _verdict_extras(found: Verdict, depth: int, env: Env, state: TextState) -> list[Finding]:
    """What a program's rule says it runs, sets and evaluates."""
    findings: list[Finding] = []
    for text in found.shell:
        findings += shell_findings(text, depth + 1, env)
    for argv in found.commands:
        findings += command_findings(_command(list(argv)), depth + 1, env)
    if found.assignments:
        findings += _variables_findings(list(found.assignments), depth, env)
        for _name, value in found.assignments:
            findings += _literal_code(value or "", depth, env)
    if found.arithmetic:
        findings += arithmetic_findings(list(found.arithmetic), state)
        for text in found.arithmetic:
            findings += _literal_code("a[" + text + "]", depth, env)
    return findings


def _wrapper_findings(
    unwrapped: Unwrapped, raw: list[str], depth: int, env: Env, context: Context | None
) -> list[Finding]:
    """What the wrappers around a command run, set and write themselves."""
    findings: list[Finding] = []
    for text in unwrapped.inline:
        findings += shell_findings(text, depth + 1, env)
    if unwrapped.assignments:
        findings += _variables_findings(list(unwrapped.assignments), depth, env)
    findings += redirect_findings([(">", path) for path in unwrapped.writes])
    for tier, reason in unwrapped.effects:
        findings.append(Finding(" ".join(raw[:3]), tier, reason))
    possible = unwrapped.possible_command
    if possible and known_program(basename(possible[0])) and not _names_a_program(unwrapped.words):
        # A word a wrapper's option took as its value names a program, and what is left names none (the option
        # may take no value after all): the word is classified as the command too.
        findings += command_findings(_command(possible), depth + 1, env, context)
    return findings


def _globbed_findings(
    words: list[str],
    flags: list[bool],
    position: int,
    depth: int,
    env: Env,
    context: Context | None,
    state: TextState,
) -> list[Finding]:
    """A command word with glob characters: every program it can match, classified with the same arguments."""
    pattern = words[position]
    names, unknown = candidates(pattern, known_names())
    if len(names) > MAX_CANDIDATES:
        return [Finding(" ".join(words)[:200], 3, f"the command word {pattern} can match {len(names)} programs")]
    findings = []
    if unknown:
        findings.append(
            Finding(" ".join(words)[:200], 1, f"the command word {pattern} may match a program nothing knows")
        )
    for name in names:
        replaced = Command(words=[*words[:position], name, *words[position + 1 :]], dynamic=list(flags))
        findings += command_findings(replaced, depth, env, context, state)
    return findings


def _names_a_program(words: list[str]) -> bool:
    return bool(words) and known_program(basename(words[0]))


def _heredoc_findings(program: str, command: Command, depth: int, env: Env) -> list[Finding]:
    """A here-document or here-string is the program's stdin: code for shells, SQL for database clients."""
    bodies = [command.heredoc] if command.heredoc is not None else []
    bodies += [target for operator, target in command.redirects if operator == "<<<"]
    findings: list[Finding] = []
    for body in bodies:
        findings += _literal_code(body, depth, env)
        if program in SHELLS or program in STDIN_SHELLS or program == "ssh":
            findings += shell_findings(body, depth + 1, env)
        else:
            findings += stdin_findings(command.words, body, _readers(env), depth)
    if program in DB_CLIENTS and any(operator == "<" for operator, _ in command.redirects):
        findings.append(Finding(" ".join(command.words[:3]), 2, f"{program} runs SQL from a file"))
    return findings
