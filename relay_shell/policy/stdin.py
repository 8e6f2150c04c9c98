"""stdin, here-documents and here-strings as the text that reaches the program: shell text for programs that run
it (shells and `at` without a script, `ssh HOST` without a command, `source /dev/stdin`, wrappers given no command
that start a shell: `su`, `sudo -i`, `script FILE`, `chroot DIR`, …), each line's command for `crontab -`, SQL for
database clients, Redis commands, mongosh's JavaScript, dc's program, Python for python without a script; for any
other program stdin is data. The readers of shell text and Python come from classify.py (they recurse into it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from relay_shell.policy.calls import Verdict
from relay_shell.policy.clients import curl_config_words
from relay_shell.policy.command_languages import client_commands
from relay_shell.policy.findings import Finding
from relay_shell.policy.interpreters import is_interpreter
from relay_shell.policy.rests import PROBE, TOO_LONG, line_rests, runs_something
from relay_shell.policy.scripts import dc_commands, dc_reads_stdin
from relay_shell.policy.shell_invocation import parse_shell, script_operand
from relay_shell.policy.shell_tokens import tokenize
from relay_shell.policy.simple_commands import Command
from relay_shell.policy.sql import mongo_tier, redis_tier, sql_tier
from relay_shell.policy.stdin_code import STDIN_NAMES, literal_output, stdin_code_verdict, stdin_language
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


def stdin_of_text(text: str, stdin: str, readers: Readers, depth: int = 0) -> list[Finding]:
    """stdin reaches every top-level command whose input is not a pipe, a file or a here-document. Where several
    do, a later one gets what the ones before left: any rest of a line (`dd bs=1 count=1; sh` given `Xrm -rf D`
    runs `rm -rf D`; attack 3, J3), so a later reader of code is also given every rest (policy/rests.py). A shell's
    inline text (`sh -c TEXT`) is read the same way, with the stdin it inherits (`inline_text`)."""
    if depth > _MAX_DEPTH:
        return [Finding(text[:200], 3, "shell text nested too deep to classify")]
    findings: list[Finding] = []
    seen: set[tuple[str, ...]] = set()
    receivers = 0
    commands = tokenize(text, []).commands
    for index, command in enumerate(commands):
        if (
            command.piped_into
            or command.heredoc is not None
            or any(op in ("<", "<<<", "<>") for op, _ in command.redirects)
        ):
            continue
        receivers += 1
        words = strip_reserved(command.words)
        findings += _relayed_findings(commands, index, stdin, readers, depth, receivers > 1)
        if receivers > 1:
            findings += _rest_findings(words, stdin, readers, depth)
        key = tuple(command.words[:4])
        if key in seen:
            continue
        seen.add(key)
        findings += stdin_findings(words, stdin, readers, depth)
    return findings


_MAX_DEPTH = 8


def _relayed_findings(
    commands: list[Command], index: int, stdin: str, readers: Readers, depth: int, after_others: bool
) -> list[Finding]:
    """stdin passed on unchanged down a pipeline (`cat | sh`, `cat - | tee F | bash`): the stage after the relays
    reads the stdin itself, as literal as a here-string (attack 4, I2: `cat | sh` given `rm -rf D` was the 2 of a
    pipe the classifier cannot see, which open mode runs without asking)."""
    findings: list[Finding] = []
    while index + 1 < len(commands) and commands[index + 1].piped_into:
        if relayed_text(commands[index], stdin) is not stdin:
            break
        index += 1
        words = strip_reserved(commands[index].words)
        findings += stdin_findings(words, stdin, readers, depth)
        if after_others:
            findings += _rest_findings(words, stdin, readers, depth)
    return findings


def inline_text(words: list[str]) -> str | None:
    """The text a shell runs with `-c TEXT` (through wrappers: `env`, `timeout`, `sudo`), when its commands, not
    the shell, read the stdin it inherits: `sh -c 'source /dev/stdin'`, `sh -c 'head -c1 >/dev/null; sh'`,
    `sh -c 'sed -f /dev/stdin F'` (attack 4, I1). None for `-s` (the shell reads stdin itself) and for xargs
    (the input's first word is the script)."""
    unwrapped = unwrap(words, [False] * len(words))
    stripped = unwrapped.words
    if unwrapped.via_xargs or not stripped or basename(stripped[0]) not in SHELLS:
        return None
    invocation = parse_shell(stripped[1:])
    if not invocation.inline or invocation.operand is None or invocation.stdin_script:
        return None
    return invocation.operand


def _rest_findings(words: list[str], stdin: str, readers: Readers, depth: int) -> list[Finding]:
    """What a command that reads stdin after another did would do with each rest of each line, at tier 2 or above,
    when it reads its stdin as code (the probe tells); too long to classify at every rest: tier 2."""
    if not any(finding.tier >= 2 for finding in stdin_findings(words, PROBE, readers, depth)):
        return []
    rests = line_rests(stdin)
    if rests is None:
        return [Finding(stdin[:200], 2, TOO_LONG)]
    found: list[Finding] = []
    for start, rest in rests:
        for finding in stdin_findings(words, rest + "\n", readers, depth):
            if finding.tier >= 2 and runs_something(finding.canonical or rest):
                why = f"if a command before it read {start} characters of the line, the rest runs"
                found.append(Finding(rest[:200], finding.tier, f"{why}: {finding.reason}"))
    return found


def _shell_reads_stdin(arguments: list[str]) -> bool:
    """Whether a shell given these arguments reads commands from stdin: no script operand (an option's value,
    `-o errexit`, is none), or `-s`; with `-c TEXT`, when TEXT starts a shell or an interpreter, which inherits
    stdin (`sh -c 'exec bash'`, `bash -c python3`)."""
    invocation = parse_shell(arguments)
    if invocation.inline:
        started = [basename(word.strip("'\"();&|")) for word in (invocation.operand or "").split()]
        return any(program in SHELLS or is_interpreter(program) for program in started)
    return invocation.operand is None or invocation.stdin_script or invocation.operand in STDIN_NAMES


def reads_shell_text(words: list[str]) -> bool:
    """Whether the command runs its stdin as shell text: a shell or `at` without a script, `xargs … sh -c` with no
    script (the input's first word is the script), `source /dev/stdin`, a wrapper given no command that starts a
    shell, `parallel` given no command."""
    unwrapped = unwrap(words, [False] * len(words))
    stripped = unwrapped.words
    if unwrapped.via_xargs and stripped and basename(stripped[0]) in SHELLS:
        invocation = parse_shell(stripped[1:])  # `xargs sh -c`: the input's first word is the script
        return invocation.inline and invocation.operand is None
    if not stripped:  # parallel given no command and no `:::` arguments runs its input lines
        parallel = bool(words) and basename(words[0]) == "parallel"
        return unwrapped.shell_session or (parallel and not any(":::" in word for word in words))
    program = basename(stripped[0])
    operands = [word for word in stripped[1:] if not word.startswith("-")]
    if (program in SHELLS and _shell_reads_stdin(stripped[1:])) or program in STDIN_SHELLS:
        return True
    return program in (".", "source") and bool(operands[:1]) and operands[0].startswith(_PIPED)


def stdin_findings(words: list[str], stdin: str, readers: Readers, depth: int = 0) -> list[Finding]:
    """stdin is code for programs that read their commands from it: shells and `at` without a script, `ssh HOST`
    without a command, wrappers given no command that start a shell (`su`, `runuser -u USER`, `sudo -i`,
    `script FILE`, `chroot DIR`, `nsenter …`, `unshare`), `source /dev/stdin`, interpreters without a script,
    database clients (SQL), redis-cli, mongosh. A shell's inline text gives the stdin to its own commands."""
    inline = inline_text(words)
    nested = stdin_of_text(inline, stdin, readers, depth + 1) if inline is not None else []
    if reads_shell_text(words):
        return nested + readers.shell(stdin, depth + 1)
    if inline is not None:
        return nested
    unwrapped = unwrap(words, [False] * len(words))
    stripped = unwrapped.words
    if not stripped:
        return []
    program = basename(stripped[0])
    operands = [word for word in stripped[1:] if not word.startswith("-")]
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
    if program in ("make", "gmake") and any(
        stripped[index - 1] == "-f" for index, word in enumerate(stripped) if word in STDIN_NAMES and index
    ):
        return _makefile_findings(stdin, readers, depth)
    if is_interpreter(program) and (not operands or operands == ["-"]):
        if program.startswith("python"):
            return readers.python(stdin, depth)
        return [Finding(program, 2, "script on stdin")]
    return []


_MAKE_SHELL = re.compile(r"\$[({]shell[ \t]+([^)}]*)[)}]")


def _makefile_findings(text: str, readers: Readers, depth: int) -> list[Finding]:
    """A makefile read from stdin: its recipe lines are shell text (make runs them), and so are its `$(shell …)`."""
    findings = [Finding(text[:200], 1, "make runs the recipes of a makefile from stdin")]
    for line in text.splitlines():
        if line.startswith("\t"):
            findings += readers.shell(line.lstrip("\t").lstrip("@+-"), depth + 1)
    for match in _MAKE_SHELL.finditer(text):
        findings += readers.shell(match.group(1), depth + 1)
    return findings


def _crontab_findings(text: str, readers: Readers, depth: int) -> list[Finding]:
    """A crontab read from stdin: each line's command (after the five time fields) will run."""
    findings = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and not line.lstrip().startswith("#"):
            findings += readers.shell(fields[5], depth + 1)
    return findings


DECODED = "\x00decoded"  # relayed_text: a literal went through a decoder (what reaches the pipe is hidden)
_RELAYS = frozenset(["cat", "tee", "dd", "buffer", "pv", "stdbuf"])


def relayed_text(command: Command, upstream: str | None) -> str | None:
    """The literal text a command writes to a pipe, when the classifier can see it: an echo/printf of literal
    words, a here-document or here-string given to `cat`, or what a relay (`cat`, `cat -`, `tee FILE`) passes on."""
    words = strip_reserved(command.words)
    program = basename(words[0]) if words else ""
    if program not in _WRITERS or "$" in " ".join(words):
        return None
    operands = [word for word in words[1:] if not word.startswith("-") or word == "-"]
    bodies = [command.heredoc] if command.heredoc is not None else []
    bodies += [target for operator, target in command.redirects if operator == "<<<"]
    if program in ("echo", "printf"):
        return literal_output(words)
    if program in DECODERS and (upstream is not None or bodies) and not any(op == "<" for op, _ in command.redirects):
        return DECODED
    if program not in _RELAYS or (program == "cat" and any(word != "-" for word in operands)):
        return None
    return (bodies[0] + "\n" if bodies else None) or upstream


def piped_code_findings(
    raw: list[str], previous: list[str], readers: Readers, depth: int, relayed: str | None = None
) -> list[Finding]:
    """A program reading its program or commands from a pipe (`echo … | awk -f /dev/stdin`, `| vim -es`, `| ed`):
    the literal text an upstream echo/printf writes is read as that language; a pipe it cannot see is 2."""
    words = unwrap(strip_reserved(raw), [False] * len(raw)).words
    program = basename(words[0] if words else raw[0] if raw else "")
    if raw and reads_shell_text(strip_reserved(raw)):
        # Shell text on a pipe: the literal an upstream echo/printf writes is read as shell text. A literal a
        # decoder turns into the text (`echo … | base64 -d | sh`, `rev`, `tr`, `xxd -r`) hides what runs on
        # purpose: a command only known at run time, 3 as `eval "$(…)"` is. Any other pipe (`curl … | sh`,
        # `base64 -d FILE | bash`) is the 2 classify.py gives it (tiers.md).
        text = relayed if relayed is not None else literal_output(previous) if "$" not in " ".join(previous) else None
        if text == DECODED:
            why = f"{program} runs shell text decoded from a literal the call hides: only known at run time"
            return [Finding(" ".join(words)[:200], 3, why)]
        if text is not None:
            return stdin_findings(strip_reserved(raw), text, readers, depth)
        return []
    if not words:
        return []
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


# Programs that turn their input into other text: what they feed a shell is hidden on purpose.
DECODERS = frozenset(
    [
        *("base64", "base32", "basenc", "xxd", "od", "uudecode", "rev", "tr", "openssl", "gpg", "iconv", "recode"),
        *("gunzip", "zcat", "bzcat", "xzcat", "zstdcat", "lz4cat", "unxz", "bunzip2", "gzip", "bzip2", "xz", "zstd"),
        *("python", "python3", "perl", "ruby", "node", "awk", "sed"),
    ]
)
_WRITERS = frozenset(["echo", "printf", *_RELAYS, *DECODERS])
_UNSEEN = "reads shell text from a descriptor the classifier cannot see (a process substitution, an inherited fd)"
_FEEDS = ("<<<", "<<", "<<-")


def unseen_script_findings(
    program: str, words: list[str], command: Command, readers: Readers, depth: int
) -> list[Finding]:
    """A shell or `source` whose script is `/dev/fd/N` (a process substitution: `bash <(…)`, `source <(…)`), or
    a shell reading stdin redirected from one (`sh < <(…)`, `sh <&3`): the text it runs is only known at run time
    (3), unless a here-document or here-string on the same command gives it (classified as shell text there).
    Any other program given its program as `/dev/fd/N` (`awk -f /dev/fd/3 3<<EOF`, `perl <(…)`, `make -f
    /dev/fd/3`) reads it as stdin would be read: the here-document's text in its language, or 3 when it comes from
    a process substitution or a descriptor nobody sees."""
    fed = command.heredoc is not None or any(operator in _FEEDS for operator, _ in command.redirects)
    if program not in SHELLS and program not in (".", "source"):
        return _descriptor_program(program, words, command, readers, depth) if words else []
    script = script_operand(words)
    if script.startswith(_PIPED) and script not in STDIN_NAMES and not fed:
        return [Finding(" ".join(words)[:200], 3, f"{program} {_UNSEEN}")]
    reads_stdin = program in SHELLS and _shell_reads_stdin(words[1:])
    redirected = any(
        operator == "<&" or (operator == "<" and target.startswith(_PIPED)) for operator, target in command.redirects
    )
    if reads_stdin and redirected and not fed:
        return [Finding(" ".join(words)[:200], 3, f"{program} {_UNSEEN}")]
    return []


def _descriptor_program(
    program: str, words: list[str], command: Command, readers: Readers, depth: int
) -> list[Finding]:
    paths = [word for word in words[1:] if word.startswith(_PIPED) and word not in STDIN_NAMES]
    if not paths:
        return []
    as_stdin = [("/dev/stdin" if word in paths else word) for word in words]
    makefile = program in ("make", "gmake") and any(
        word == "/dev/stdin" and as_stdin[index - 1] in ("-f", "--file", "--makefile")
        for index, word in enumerate(as_stdin)
    )
    if not makefile and stdin_language(program, as_stdin) is None:
        return []  # the descriptor is data (`diff <(ls a) <(ls b)`), not the program
    bodies = [command.heredoc] if command.heredoc is not None else []
    bodies += [target for operator, target in command.redirects if operator == "<<<"]
    findings = [finding for body in bodies for finding in stdin_findings(as_stdin, body, readers, depth)]
    if not bodies:
        why = f"{program} reads its program from a descriptor the classifier cannot see (a process substitution)"
        findings.append(Finding(" ".join(words)[:200], 3, why))
    return findings


def group_stdin_findings(text: str, commands: list[Command], readers: Readers) -> list[Finding]:
    """A here-string or here-document on a group, a subshell or `exec` (`{ sh; } <<<T`, `exec <<<T; sh`,
    `exec 3<<<T; sh <&3`) is the stdin of the commands in it, or of every later one: classified as the text's
    stdin, the way the call's own stdin is."""
    findings: list[Finding] = []
    for command in commands:
        if command.words[:1] not in ([], ["exec"]) or len(command.words) > 1:
            continue
        bodies = [command.heredoc] if command.heredoc is not None else []
        bodies += [target for operator, target in command.redirects if operator == "<<<"]
        for body in bodies:
            findings += stdin_of_text(text, body, readers)
    return findings
