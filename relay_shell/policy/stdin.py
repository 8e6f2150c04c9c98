"""stdin, here-documents and here-strings as the text that reaches the program: shell text for programs that run
it (shells and `at` without a script, `ssh HOST` without a command, `source /dev/stdin`, wrappers given no command
that start a shell: `su`, `sudo -i`, `script FILE`, `chroot DIR`, …), each line's command for `crontab -`, SQL for
database clients, Redis commands, mongosh's JavaScript, dc's program, Python for python without a script; for any
other program stdin is data. The readers of shell text and Python come from classify.py (they recurse into it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay_shell.policy.calls import Verdict
from relay_shell.policy.clients import curl_config_words
from relay_shell.policy.command_languages import client_commands
from relay_shell.policy.findings import Finding
from relay_shell.policy.interpreters import is_interpreter
from relay_shell.policy.scripts import dc_commands, dc_reads_stdin
from relay_shell.policy.shell_invocation import parse_shell
from relay_shell.policy.shell_tokens import tokenize
from relay_shell.policy.sql import mongo_tier, redis_tier, sql_tier
from relay_shell.policy.stdin_code import literal_output, stdin_code_verdict, stdin_language
from relay_shell.policy.vocabulary import DB_CLIENTS, SHELLS, STDIN_SHELLS
from relay_shell.policy.wrappers import basename, unwrap

Reader = Callable[[str, int], list[Finding]]
_PIPED = ("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/", "/dev/stdin")
RESERVED = frozenset(["if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time", "coproc"])
HEADERS = frozenset(["for", "select", "case", "function", "done", "fi", "esac"])


@dataclass(frozen=True)
class Readers:
    shell: Reader
    python: Reader
    command: Callable[[list[str], int], list[Finding]]


def _config_from_stdin(words: list[str]) -> bool:
    """curl -K - / --config - / -K/dev/stdin: its options come from stdin."""
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else ""
        if (word in ("-K", "--config") and following in ("-", "/dev/stdin")) or word in ("-K-", "--config=-"):
            return True
    return False


def strip_reserved(words: list[str]) -> list[str]:
    """The words of a simple command after its reserved words (`if`, `while`, `!`, `{`, …)."""
    if not words or words[0] not in RESERVED:
        return words
    index = 0
    while index < len(words) and words[index] in RESERVED:
        if words[index] == "time" and words[index + 1 : index + 2] and words[index + 1].startswith("-"):
            break  # `time -f FMT cmd`: dash runs /usr/bin/time (a wrapper); bash's keyword would run `-f`
        index += 1
    return words[index:]


def stdin_of_text(text: str, stdin: str, readers: Readers) -> list[Finding]:
    """stdin reaches every top-level command whose input is not a pipe, a file or a here-document."""
    findings: list[Finding] = []
    seen: set[tuple[str, ...]] = set()
    for command in tokenize(text, []).commands:
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
        findings += stdin_findings(strip_reserved(command.words), stdin, readers)
    return findings


def _shell_reads_stdin(arguments: list[str]) -> bool:
    """Whether a shell given these arguments reads commands from stdin: no script operand (an option's value,
    `-o errexit`, is none), or `-s`; with `-c TEXT`, when TEXT starts a shell or an interpreter, which inherits
    stdin (`sh -c 'exec bash'`, `bash -c python3`)."""
    invocation = parse_shell(arguments)
    if invocation.inline:
        started = [basename(word.strip("'\"();&|")) for word in (invocation.operand or "").split()]
        return any(program in SHELLS or is_interpreter(program) for program in started)
    return invocation.operand is None or invocation.stdin_script


def stdin_findings(words: list[str], stdin: str, readers: Readers, depth: int = 0) -> list[Finding]:
    """stdin is code for programs that read their commands from it: shells and `at` without a script, `ssh HOST`
    without a command, wrappers given no command that start a shell (`su`, `runuser -u USER`, `sudo -i`,
    `script FILE`, `chroot DIR`, `nsenter …`, `unshare`), `source /dev/stdin`, interpreters without a script,
    database clients (SQL), redis-cli, mongosh."""
    if words and basename(words[0]) == "xargs" and "-c" in words and any(basename(word) in SHELLS for word in words):
        return readers.shell(stdin, depth + 1)  # `xargs -I{} sh -c {}`: each input line becomes a command line
    unwrapped = unwrap(words, [False] * len(words))
    stripped = unwrapped.words
    if not stripped:
        return readers.shell(stdin, depth + 1) if unwrapped.shell_session else []
    program = basename(stripped[0])
    operands = [word for word in stripped[1:] if not word.startswith("-")]
    if (program in SHELLS and _shell_reads_stdin(stripped[1:])) or program in STDIN_SHELLS:
        return readers.shell(stdin, depth + 1)
    if program in (".", "source") and operands[:1] and operands[0].startswith(_PIPED):
        return readers.shell(stdin, depth + 1)
    if program == "curl" and _config_from_stdin(stripped):
        return readers.command(["curl", *curl_config_words(stdin)], depth + 1)
    if program == "ssh" and len(operands) <= 1:
        return readers.shell(stdin, depth + 1)
    if program == "crontab" and (not operands or operands == ["-"]) and len(stripped) <= 2:
        return _crontab_findings(stdin, readers, depth)
    if program in DB_CLIENTS:
        commands = client_commands(stdin)
        client = [finding for text in commands for finding in readers.shell(text, depth + 1)]
        return [Finding(stdin[:200], *sql_tier(stdin)), *client]
    language = stdin_language(program, stripped)
    if language is not None:
        return code_findings(stdin_code_verdict(language, stdin), stdin, readers, depth)
    if program in ("redis-cli", "valkey-cli") and not operands:
        return [Finding(stdin[:200], *redis_tier(stdin))]
    if program in ("mongo", "mongosh"):
        return [Finding(stdin[:200], *mongo_tier(stdin))]
    if program == "dc" and dc_reads_stdin(stripped):
        return [finding for command in dc_commands(stdin) for finding in readers.shell(command, depth + 1)]
    if is_interpreter(program) and (not operands or operands == ["-"]):
        if program.startswith("python"):
            return readers.python(stdin, depth)
        return [Finding(program, 2, "script on stdin")]
    return []


def _crontab_findings(text: str, readers: Readers, depth: int) -> list[Finding]:
    """A crontab read from stdin: each line's command (after the five time fields) will run."""
    findings = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and not line.lstrip().startswith("#"):
            findings += readers.shell(fields[5], depth + 1)
    return findings


def piped_code_findings(raw: list[str], previous: list[str], readers: Readers, depth: int) -> list[Finding]:
    """A program reading its program or commands from a pipe (`echo … | awk -f /dev/stdin`, `| vim -es`, `| ed`):
    the literal text an upstream echo/printf writes is read as that language; a pipe it cannot see is 2."""
    words = unwrap(strip_reserved(raw), [False] * len(raw)).words
    if not words:
        return []
    program = basename(words[0])
    language = stdin_language(program, words)
    if language is None:
        return []
    text = literal_output(previous) if previous and "$" not in " ".join(previous) else None
    if text is None:
        return [Finding(" ".join(words)[:200], 2, f"{program} reads its program from a pipe: cannot classify")]
    return code_findings(stdin_code_verdict(language, text), text, readers, depth)


def code_findings(found: Verdict, text: str, readers: Readers, depth: int) -> list[Finding]:
    """A verdict on code read from stdin, with the shell text and argvs it runs classified."""
    findings = [Finding(text[:200], found.tier, found.reason)]
    for inner in found.shell:
        findings += readers.shell(inner, depth + 1)
    for argv in found.commands:
        findings += readers.command(list(argv), depth + 1)
    return findings
