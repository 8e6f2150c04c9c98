"""What writing to a path risks: a redirection's target (a block device, a critical file, a system or login file, any
other file) and the root of a tree a transfer merges into (the worst file it could replace)."""

from __future__ import annotations

import re

from relay_shell.policy import own_files
from relay_shell.policy.calls import cgroup_control, is_device, is_protected
from relay_shell.policy.env_substitution import Env, substitute
from relay_shell.policy.field_splitting import positional_words
from relay_shell.policy.findings import Finding
from relay_shell.policy.simple_commands import Command
from relay_shell.policy.vocabulary import CRITICAL_FILES, REDIRECT_WRITE, USER_CONFIG

_POSITIONAL = re.compile(r"\$(?:[1-9]|\{[1-9]\})")
# Terminal devices other than the call's own: pseudo-terminals, virtual consoles, serial lines, the console, and
# another process's descriptors (`/proc/PID/fd/0` of a session's shell is its terminal).
_TERMINAL = re.compile(
    r"/dev/(?:pts/|tty[0-9S]|ttyUSB|ttyACM|console$|vcsa?[0-9]*$)|/proc/(?!self/|thread-self/)[^/]*/(?:task/[^/]*/)?fd/"
)


def opens_terminal(word: str) -> bool:
    """Whether a word names a terminal other than the call's own."""
    return ("/dev/" in word or "/proc/" in word) and _TERMINAL.search(word) is not None


# Programs that look at a terminal's name or metadata, not its input or settings (stty reads its own -F).
_TERMINAL_LOOKERS = frozenset(
    {"stty", "ls", "stat", "readlink", "realpath", "test", "[", "dirname", "basename", "lsof", "fuser", "ps", "who"}
)


def given_terminal(program: str, words: list[str], canonical: str) -> bool:
    """Whether a program that reads or changes what it is given is given another terminal as a word: `cat
    /dev/pts/N` takes the keys typed there (a password), `python3 -c '…tcsetattr…' /dev/pts/N` its settings."""
    if "/dev/" not in canonical and "/proc/" not in canonical:
        return False
    return program not in _TERMINAL_LOOKERS and any(map(opens_terminal, words[1:]))


def redirect_findings(
    redirects: list[tuple[str, str]], env: Env | None = None, positional: list[str] | None = None
) -> list[Finding]:
    """A finding per redirection that writes. A target's `$NAME`, `${NAME}` and `$N` are read with the values the
    text or the overlay gives them (`env`, `positional`), as the shell expands them: `x=/etc/passwd; … > $x` writes
    /etc/passwd. What is shown is the target as written (an overlay value may be a secret)."""
    findings = []
    for operator, written in redirects:
        if opens_terminal(written) and (operator not in REDIRECT_WRITE or own_files.own_file(written) is None):
            # Another terminal opened, to read or to write (`stty -echo < /dev/pts/N`, `exec 0</dev/pts/N`, `exec
            # 3<>/dev/pts/N; stty <&3`): its settings changed or its typed keys read, under a session, another
            # client's or an operator's shell (attack 4, K2; adr/0025 Round 8). The call's own is /dev/tty.
            findings.append(Finding(f"{operator} {written}", 2, f"opens another terminal {written}"))
            continue
        if operator not in REDIRECT_WRITE:
            if operator in ("<", "<>") and own_files.secret_file(written) is not None:
                findings.append(Finding(f"{operator} {written}", 3, f"reads the server's secret {written}"))
            continue
        target = written
        if "$" in written and (env or positional):
            if positional is not None and _POSITIONAL.fullmatch(written):
                target = positional_words([written], [True], [False], positional)[0][0] or written
            target = substitute([target], env or {})[0]
        shown = written if target != written else target
        if target in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty") or target.startswith("/dev/fd/"):
            continue
        if target.startswith(("/dev/tcp/", "/dev/udp/")):
            tier = 1 if operator == "<>" else 2  # bash's network redirections: `>` sends data to a service
            findings.append(Finding(f"{operator} {shown}", tier, f"bash connects to {shown[5:]}"))
        elif own_files.own_file(target) is not None:
            findings.append(Finding(f"{operator} {shown}", 3, f"writes the server's own file {shown}"))
        elif cgroup_control(target):
            reason = f"writes {shown}: moves, kills or freezes a control group's processes"
            findings.append(Finding(f"{operator} {shown}", 3, reason))
        elif is_device(target):
            findings.append(Finding(f"{operator} {shown}", 3, f"writes onto block device {shown}"))
        elif target in CRITICAL_FILES or target.startswith("/boot/"):
            tier = 3 if operator != ">>" and operator != "&>>" else 2
            findings.append(Finding(f"{operator} {shown}", tier, f"writes {shown}"))
        elif is_protected(target) or USER_CONFIG.match(target) or USER_CONFIG.match(written):
            findings.append(Finding(f"{operator} {shown}", 2, f"writes system or login file {shown}"))
        else:
            findings.append(Finding(f"{operator} {shown}", 1, f"writes {shown}"))
    return findings


def tree_findings(root: str) -> list[Finding]:
    """A tree merged into `root` may replace any file below it: the worst file it could reach counts."""
    below = root.rstrip("/") + "/"
    if root.startswith("/boot") or any(path.startswith(below) for path in CRITICAL_FILES):
        return [Finding(f"tree into {root}", 3, f"a tree merged into {root} can replace critical files there")]
    return redirect_findings([(">", root)])


def no_command_findings(command: Command, escalated: bool, shell_session: bool) -> list[Finding]:
    """A command with no program left: a redirection alone (`> f` empties f), or wrappers given no command."""
    findings: list[Finding] = []
    if escalated:
        findings.append(Finding(" ".join(command.words[:3]), 2, "privilege escalation"))
    if shell_session and not escalated:
        findings.append(Finding(" ".join(command.words[:3]), 1, "starts a shell that reads its commands from stdin"))
    emptied = [target for op, target in command.redirects if op in (">", ">|") and target != "/dev/null"]
    if not command.words and emptied:  # `> /dev/null` alone empties nothing
        findings.append(Finding(emptied[0], 2, "empties a file"))
    if findings or not command.redirects:
        return findings
    # Opening a file to read, or /dev/null, changes nothing; `>> f` or `<> f` creates f.
    harmless = all(op == "<" or target == "/dev/null" for op, target in command.redirects)
    return [Finding("", 0 if harmless else 1, "redirection only")]
