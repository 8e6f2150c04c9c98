"""Tier classification of all the text that reaches the target.

A speed bump, not a boundary: a program can always construct at run time a command that no text
classifier sees. What we can see we classify conservatively: wrappers (`sudo`, `env`, `nice`, `timeout`,
`xargs`, `flock`, `watch`, `su -c`, …) are stripped, quotes removed, paths reduced to basenames, loop bodies,
`sh -c` / `eval` strings, `$(…)` contents, `find -exec`, `fd -x` and `xargs` commands, `ssh HOST CMD`'s remote
command and the filters of `git filter-branch` classified recursively (to a bounded depth), and dynamic execution
we cannot resolve (`$X` as a command word, `curl … | sh`) is tier 2. stdin and the env overlay are classified as
the text that reaches the program: shell text for programs that run it, SQL for database clients.

Linear time: the shell tokenizer is one pass over the text with an index that only moves forward; nested
text (`$(…)`, `sh -c '…'`) is re-read at most MAX_DEPTH times. No regex here can backtrack on input size.
Text nested deeper than that, or under more wrappers than wrappers.MAX_WRAPPERS, is tier 3: what it runs was
not looked at, and the classifier fails towards caution (confirmation in open mode, refusal in guarded mode).
"""

from __future__ import annotations

from relay_shell.plan import Subject
from relay_shell.policy.calls import Context
from relay_shell.policy.env_substitution import Env, substitute, substituted_values, unsubstituted
from relay_shell.policy.find import fd_selection, find_selection
from relay_shell.policy.findings import Classification, Finding
from relay_shell.policy.rules import known_program, program_verdict
from relay_shell.policy.scripts import dc_commands, dc_reads_stdin
from relay_shell.policy.shell_tokens import Command, tokenize
from relay_shell.policy.sql import mongo_tier, redis_tier, sql_tier
from relay_shell.policy.vocabulary import (
    CODE_INJECTION_ENV,
    COMMAND_ENV,
    DB_CLIENTS,
    HARMLESS_PAGERS,
    INTERPRETERS,
    PROMPT_VARIABLES,
    PYTHON_ROOT_RMTREE,
    PYTHON_SHELL_CALL,
    PYTHON_STATEFUL,
    SHELLS,
    STDIN_SHELLS,
)
from relay_shell.policy.wrappers import basename, unwrap
from relay_shell.policy.writes import redirect_findings, tree_findings

MAX_DEPTH = 6
_TOO_DEEP = "nested too deeply to classify: treated as irreversible"
_SHELL_SESSION = "starts a shell that reads its commands from stdin"
_NO_ENV: Env = {}


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
        return findings + _connection_findings(subject)
    env = {name: value for name, value in subject.env if value is not None}
    findings += _env_findings(subject.env)
    if subject.command is not None:
        findings += shell_findings(subject.command, 0, env)
        if subject.stdin:
            findings += _stdin_of_text(subject.command, subject.stdin, env)
    if subject.argv is not None:
        words = list(subject.argv)
        findings += command_findings(_command(words), 0, env)
        if subject.stdin:
            findings += stdin_findings(words, subject.stdin, env)
    if subject.script is not None:
        if subject.interpreter == "python":
            findings += python_findings(subject.script)
        else:
            findings += shell_findings(subject.script, 0, env)
    if subject.typed is not None:
        # Which program reads the keyboard cannot be known for sure (`exec -a`, sudo, a remote shell): every
        # line counts as shell text, and Python's view adds what it finds stateful.
        findings += shell_findings(subject.typed, 0, env)
        findings += [finding for finding in python_findings(subject.typed) if finding.tier >= 2]
    findings += [Finding(text[:200], tier, reason) for text, tier, reason in subject.session_findings]
    if subject.transfer is not None:
        findings.append(Finding(subject.transfer, 2, "file transfer"))
    if subject.transfer_writes is not None and subject.transfer_tree:
        findings += tree_findings(subject.transfer_writes)
    elif subject.transfer_writes is not None:
        findings += redirect_findings([(">", subject.transfer_writes)])
    return findings + _connection_findings(subject)


def _env_findings(overlay: tuple[tuple[str, str | None], ...]) -> list[Finding]:
    findings = []
    for name, value in overlay:
        if name in HARMLESS_PAGERS and (value or "").strip() in HARMLESS_PAGERS[name]:
            continue
        if name in PROMPT_VARIABLES and not any(char in (value or "") for char in "$`\\"):
            continue  # a literal prompt: nothing in it is expanded
        if name in CODE_INJECTION_ENV or name.startswith(("LD_", "BASH_FUNC_")):
            findings.append(Finding(f"env {name}={value or ''}", 2, f"env {name} can inject code"))
        if name in COMMAND_ENV and value:
            findings += shell_findings(value, 1, _NO_ENV)  # the program runs this value as a command line
    return findings


def _connection_findings(subject: Subject) -> list[Finding]:
    """How an SSH call connects: host-key checking turned off, a listener open to other hosts."""
    findings = []
    if subject.unverified_host_key:
        findings.append(
            Finding("known_hosts=ignore " + " ".join(subject.hosts[:1]), 2, "host-key checking turned off (ignore)")
        )
    if subject.exposed_listener is not None:
        findings.append(Finding(f"bind_address {subject.exposed_listener}", 2, "a listener reachable from other hosts"))
    return findings


def _command(words: list[str]) -> Command:
    return Command(words=words, dynamic=["$" in word or "`" in word for word in words])


# -- stdin --------------------------------------------------------------------------------------------------------


def _stdin_of_text(text: str, stdin: str, env: Env) -> list[Finding]:
    """stdin reaches every top-level command whose input is not a pipe, a file or a here-document."""
    findings: list[Finding] = []
    seen: set[tuple[str, ...]] = set()
    for command in tokenize(text, []):
        if (
            command.piped_into
            or command.heredoc is not None
            or any(op in ("<", "<<<", "<>") for op, _ in command.redirects)
        ):
            continue
        key = tuple(command.words[:4])
        if key in seen:
            continue
        seen.add(key)
        findings += stdin_findings(_strip_reserved(command.words), stdin, env)
    return findings


def stdin_findings(words: list[str], stdin: str, env: Env, depth: int = 0) -> list[Finding]:
    """stdin is code for programs that read their commands from it: shells and `at` without a script, `ssh HOST`
    without a command, wrappers given no command that start a shell (`su`, `runuser -u USER`, `sudo -i`,
    `script FILE`, `chroot DIR`, `nsenter …`, `unshare`), interpreters without a script, database clients (SQL),
    redis-cli, mongosh."""
    unwrapped = unwrap(words, [False] * len(words))
    stripped = unwrapped.words
    if not stripped:
        return shell_findings(stdin, depth + 1, env) if unwrapped.shell_session else []
    program = basename(stripped[0])
    operands = [word for word in stripped[1:] if not word.startswith("-")]
    if program in SHELLS and (not operands or "-s" in stripped) and "-c" not in stripped:
        return shell_findings(stdin, depth + 1, env)
    if program in STDIN_SHELLS and "-f" not in stripped:
        return shell_findings(stdin, depth + 1, env)
    if program == "ssh" and len(operands) <= 1:
        return shell_findings(stdin, depth + 1, env)
    if program == "crontab" and (not operands or operands == ["-"]) and len(stripped) <= 2:
        return _crontab_findings(stdin, env, depth)
    if program in DB_CLIENTS:
        return [Finding(stdin[:200], *sql_tier(stdin))]
    if program in ("redis-cli", "valkey-cli") and not operands:
        return [Finding(stdin[:200], *redis_tier(stdin))]
    if program in ("mongo", "mongosh"):
        return [Finding(stdin[:200], *mongo_tier(stdin))]
    if program == "dc" and dc_reads_stdin(stripped):
        return [finding for command in dc_commands(stdin) for finding in shell_findings(command, depth + 1, env)]
    if _is_interpreter(program) and (not operands or operands == ["-"]):
        if program.startswith("python"):
            return python_findings(stdin, depth)
        return [Finding(program, 2, "script on stdin")]
    return []


def _crontab_findings(text: str, env: Env, depth: int) -> list[Finding]:
    """A crontab read from stdin: each line's command (after the five time fields) will run."""
    findings = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and not line.lstrip().startswith("#"):
            findings += shell_findings(fields[5], depth + 1, env)
    return findings


# -- shell text -----------------------------------------------------------------------------------------------------

_RESERVED = frozenset(["if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time"])
_HEADERS = frozenset(["for", "select", "case", "function", "done", "fi", "esac"])


def _strip_reserved(words: list[str]) -> list[str]:
    if not words or words[0] not in _RESERVED:
        return words
    index = 0
    while index < len(words) and words[index] in _RESERVED:
        index += 1
    return words[index:]


def shell_findings(text: str, depth: int, env: Env = _NO_ENV) -> list[Finding]:
    if depth > MAX_DEPTH:
        return [Finding(text[:200], 3, _TOO_DEEP)]
    findings: list[Finding] = []
    if _has_fork_bomb(text):
        findings.append(Finding("fork bomb", 3, "fork bomb"))
    nested: list[str] = []
    loop_depth = 0
    every_entry = False  # the innermost `for` loop runs over every entry of a directory
    upstream = Context()  # what the commands before this one in its pipeline select
    previous: list[str] = []
    for command in tokenize(text, nested):
        first = command.words[0] if command.words else ""
        if first == "done":
            loop_depth = max(0, loop_depth - 1)
        elif first in ("for", "select"):
            every_entry = any(word == "*" or word.endswith("/*") for word in command.words[2:])
        elif "do" in command.words[:2]:
            loop_depth += 1
        # Updated only for piped commands, one command at a time: linear, and free for the common case.
        upstream = _upstream(upstream, previous) if command.piped_into else Context()
        context = upstream
        if loop_depth:
            context = Context(context.via_xargs, True, context.selection, context.all_but, every_entry)
        findings += command_findings(command, depth, env, context)
        if command.piped_into and any(word == "dc" or word.endswith("/dc") for word in command.words):
            findings += _dc_pipe_findings(command.words, previous, depth, env)
        previous = command.words
    for inner in nested:
        findings += shell_findings(inner, depth + 1, env)
    return findings


def _dc_pipe_findings(words: list[str], previous: list[str], depth: int, env: Env) -> list[Finding]:
    """dc reading its program from a pipe: the `!` commands of an upstream echo/printf text are classified; input
    that cannot be seen is a program of unknown effect (1)."""
    unwrapped = unwrap(words, [False] * len(words)).words
    if not unwrapped or basename(unwrapped[0]) != "dc" or not dc_reads_stdin(unwrapped):
        return []
    if previous and basename(previous[0]) in ("echo", "printf"):
        text = " ".join(previous[1:])
        return [finding for command in dc_commands(text) for finding in shell_findings(command, depth + 1, env)]
    return [Finding(" ".join(words[:3]), 1, "dc runs a program from its input, which cannot be seen")]


def _upstream(upstream: Context, raw: list[str]) -> Context:
    """What a command tells the deletions downstream in its pipeline (`| xargs rm`): a find's selection,
    `tail -n +N` (all but the newest N), a bare `ls` (every entry). Updated one command at a time: linear."""
    words = unwrap(raw, [False] * len(raw)).words
    program = basename(words[0]) if words else ""
    if program == "find":
        return Context(selection=find_selection(words)[0], all_but=upstream.all_but, every=upstream.every)
    if program == "tail" and any(word.startswith(("+", "-n+")) for word in words[1:]):
        return Context(selection=upstream.selection, all_but=True, every=upstream.every)
    listed = [word for word in words[1:] if not word.startswith("-")]
    if program == "ls" and not any("*" in word or "." in word.lstrip("./") for word in listed):
        return Context(selection=upstream.selection, all_but=upstream.all_but, every=True)
    return upstream


def command_findings(command: Command, depth: int, env: Env = _NO_ENV, context: Context | None = None) -> list[Finding]:
    if depth > MAX_DEPTH:  # argv a program runs (kubectl exec … kubectl exec …) nests like shell text
        return [Finding(" ".join(command.words)[:200], 3, _TOO_DEEP)]
    findings: list[Finding] = redirect_findings(command.redirects)
    raw_words = _strip_reserved(command.words)
    offset = len(command.words) - len(raw_words)
    if raw_words and raw_words[0] in _HEADERS:
        return findings  # a loop or case header, a function keyword: its substitutions are classified as nested text
    words = substitute(raw_words, env)
    substituted = substituted_values(raw_words, env) if words is not raw_words else {}
    flags = command.dynamic[offset:]
    if words is not raw_words:  # a substituted word is no longer dynamic: its value is known
        flags = [flag and word == original for flag, word, original in zip(flags, words, raw_words, strict=True)]
    dynamic = flags
    unwrapped = unwrap(words, dynamic)
    for text in unwrapped.inline:
        findings += shell_findings(text, depth + 1, env)
    possible = unwrapped.possible_command
    if possible and known_program(basename(possible[0])) and not _names_a_program(unwrapped.words):
        # A word a wrapper's option took as its value names a program, and what is left names none (the option
        # may take no value after all): the word is classified as the command too.
        findings += command_findings(_command(possible), depth + 1, env, context)
    words, dynamic = unwrapped.words, unwrapped.dynamic
    if unwrapped.too_deep:
        findings.append(Finding(" ".join(command.words)[:200], 3, _TOO_DEEP))
    if not words:
        if unwrapped.escalated:
            findings.append(Finding(" ".join(command.words[:3]), 2, "privilege escalation"))
        if unwrapped.shell_session and not unwrapped.escalated:
            findings.append(Finding(" ".join(command.words[:3]), 1, _SHELL_SESSION))
        if not command.words and any(op in (">", ">|") for op, _ in command.redirects):
            findings.append(Finding(command.redirects[0][1], 2, "empties a file"))
        return findings or ([Finding("", 1, "redirection only")] if command.redirects else [])
    program = basename(words[0])
    canonical = " ".join([program, *words[1:]])
    if substituted:
        # Classified with the overlay's values, shown (to deny patterns, the client, the audit log's reason) as
        # written: a value may be a secret whose name only the overlay's key reveals.
        canonical = unsubstituted(canonical, substituted)
    if dynamic and dynamic[0]:
        findings.append(Finding(canonical, 2, "dynamic command word: cannot classify"))
        return findings
    context = context or Context()
    if unwrapped.via_xargs:
        context = Context(True, True, context.selection, context.all_but, context.every)
    found = program_verdict(program, words, context)
    tier, reason = found.tier, found.reason
    if program in SHELLS or program in ("eval", "exec"):
        inner = _inline_script(program, words)
        if inner is not None:
            findings += shell_findings(inner, depth + 1, env)
            tier, reason = max(tier, 1), f"{program} running inline shell text"
    elif _is_interpreter(program):
        tier, reason, extra = _interpreter(program, words, depth, env)
        findings += extra
    findings += _heredoc_findings(program, command, depth, env)
    if command.piped_into and (program in SHELLS or _is_interpreter(program) or program in STDIN_SHELLS):
        operands = [word for word in words[1:] if not word.startswith("-")]
        if not operands or (program in SHELLS and "-s" in words) or program in STDIN_SHELLS:
            tier, reason = max(tier, 2), f"pipes into {program}: runs code that cannot be classified"
    truncates = program in (":", "true") or (program == "cat" and words[1:] == ["/dev/null"])
    if truncates and any(op in (">", ">|") for op, _ in command.redirects):
        tier, reason = max(tier, 2), "empties a file"
    if unwrapped.escalated:
        tier, reason = max(tier, 2), reason if tier >= 2 else "privilege escalation"
    findings.append(Finding(canonical, tier, unsubstituted(reason, substituted) if substituted else reason))
    for text in found.shell:
        findings += shell_findings(text, depth + 1, env)
    for argv in found.commands:
        findings += command_findings(_command(list(argv)), depth + 1, env)
    if program == "find":
        selection, _delete, execs, _writes = find_selection(words)
    elif program in ("fd", "fdfind"):
        selection, execs = fd_selection(words)
    else:
        execs = []
    for exec_words in execs:
        if exec_words:
            findings += command_findings(_command(exec_words), depth + 1, env, Context(False, True, selection))
    return findings


def _names_a_program(words: list[str]) -> bool:
    return bool(words) and known_program(basename(words[0]))


def _inline_script(program: str, words: list[str]) -> str | None:
    if program == "eval":
        return " ".join(words[1:])
    if program == "exec":
        return None
    for position, word in enumerate(words[1:], start=1):
        if word == "-c" or (word.startswith("-") and not word.startswith("--") and "c" in word[1:]):
            return words[position + 1] if position + 1 < len(words) else None
    return None


def _is_interpreter(program: str) -> bool:
    return program in INTERPRETERS or program.startswith(("python", "perl", "ruby", "node", "php"))


_MODULE_TIERS = {"http.server": 2, "SimpleHTTPServer": 2, "json.tool": 0, "venv": 1, "pydoc": 0, "this": 0}


def _interpreter(program: str, words: list[str], depth: int, env: Env) -> tuple[int, str, list[Finding]]:
    """`python -c CODE` is read as Python; `python -m http.server` serves the directory to other hosts;
    `python -m pip install` is pip. Other scripts are code we cannot see (1)."""
    if program.startswith("python"):
        for index, word in enumerate(words[1:-1], start=1):
            if word == "-c":
                return 1, "python code", python_findings(words[index + 1], depth)
            if word == "-m":
                module = words[index + 1]
                if module in ("pip", "pip3"):
                    found = program_verdict("pip", ["pip", *words[index + 2 :]], Context())
                    return found.tier, found.reason, []
                return _MODULE_TIERS.get(module, 1), f"python -m {module}", []
    if program.startswith("perl") and any(marker in " ".join(words) for marker in _PERL_STATEFUL):
        return 2, "perl code changes files or runs commands", []
    found = program_verdict(program, words, Context())
    if found.tier == 0 and program.startswith("perl"):
        return 0, "perl prints", []
    if program.startswith("php") and "-S" in words:
        return found.tier, found.reason, []
    return max(found.tier, 1), f"{program} runs code", []


_PERL_STATEFUL = ("unlink", "rmtree", "system", "exec", "qx", "`", "rename", "chmod", "chown", "kill", "open(")


def _heredoc_findings(program: str, command: Command, depth: int, env: Env) -> list[Finding]:
    """A here-document or here-string is the program's stdin: code for shells, SQL for database clients."""
    bodies = [command.heredoc] if command.heredoc is not None else []
    bodies += [target for operator, target in command.redirects if operator == "<<<"]
    findings: list[Finding] = []
    for body in bodies:
        if program in SHELLS or program in STDIN_SHELLS or program == "ssh":
            findings += shell_findings(body, depth + 1, env)
        else:
            findings += stdin_findings(command.words, body, env, depth)
    if program in DB_CLIENTS and any(operator == "<" for operator, _ in command.redirects):
        findings.append(Finding(" ".join(command.words[:3]), 2, f"{program} runs SQL from a file"))
    return findings


def _has_fork_bomb(text: str) -> bool:
    """`name(){ name|name& };name` in any spacing. Each `(){` is inspected within a bounded window."""
    if "fork while fork" in text or "fork;fork" in text.replace(" ", ""):
        return True
    compact_needed = "(" in text and "|" in text and "&" in text
    if not compact_needed:
        return False
    compact = "".join(text.split())
    position = compact.find("(){")
    while position >= 0:
        body = compact[position + 3 : position + 3 + 256].split("}", 1)[0]
        # Only a body that pipes and backgrounds can be a bomb; then find the function's name (≤ 64 chars).
        if "|" in body and "&" in body:
            start = position
            while (
                start > 0 and position - start < 64 and (compact[start - 1].isalnum() or compact[start - 1] in "_:.-")
            ):
                start -= 1
            name = compact[start:position]
            if name and f"{name}|{name}&" in body:
                return True
        position = compact.find("(){", position + 3)
    return False


def python_findings(script: str, depth: int = 0) -> list[Finding]:
    findings = [Finding("python script", 1, "python script")]
    if any(marker in script for marker in PYTHON_STATEFUL):
        findings.append(Finding("python script", 2, "python script changes files, processes or runs commands"))
    if PYTHON_ROOT_RMTREE.search(script):
        findings.append(Finding("python rmtree", 3, "python deletes / or a system directory"))
    for match in PYTHON_SHELL_CALL.finditer(script):
        findings += shell_findings(match.group("body"), depth + 1)
    return findings
