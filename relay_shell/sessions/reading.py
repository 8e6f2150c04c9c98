"""What the policy classifies for input typed into a session (adr/0026): the keystrokes (typed.py) as the lines
the reading program will get, and each line as the shell would run it after history expansion (history.py), as
a program's escape would run it (escapes.py), and with what an interactive shell keeps from it (interactive.py).

A line may also be read in two parts (review W2, adr/0026 Round 5): a program in the foreground that takes a part
of it and stops (less quitting on `q`, `dd bs=1 count=1`, `read -n1`) leaves the rest to the shell, which runs
it. Unless the terminal's reader is known to keep the line whole (reader.keeps_lines), every rest of each line
is classified as shell text too, and what it would do at tier 2 or above counts (`qrm -rf D` to less is
`rm -rf D`); tier 1 counts too where no kernel confines what the terminal runs (a remote terminal, whose reader
cannot be seen, so every rest of its every line is read; readonly classifier-only): `mv A B` left by `dd bs=6
count=1` to a remote shell is a write readonly must refuse (review W3, adr/0026 Round 7).
"""

from __future__ import annotations

from relay_shell.plan import Subject
from relay_shell.policy.shared_rests import counted_rest_findings
from relay_shell.policy.shell_tokens import tokenize
from relay_shell.sessions.escapes import commands_start_findings, escape_readings, line_findings
from relay_shell.sessions.history import HISTORY, expansion_points, expansions
from relay_shell.sessions.interactive import interactive_findings
from relay_shell.sessions.keys import KEYS
from relay_shell.sessions.line_settings import LineSettings, edited_lines, line_settings_of, settings_findings
from relay_shell.sessions.open_input import MAX_OPEN, shell_left_open, still_open
from relay_shell.sessions.registry import Session
from relay_shell.sessions.typed import Finding, Typed, read_keystrokes

HISTORY_KEPT = 256  # lines of a session's input kept to expand `!…` against
OPEN_TOO_LONG = "continues input left open (an unclosed quote or string) for too long to follow: cannot classify"
REMOTE_SPLIT = (
    "what reads a remote terminal cannot be seen, so every rest of a line is read as what the shell may run (a "
    "one-shot command is classified whole: ssh_exec)"
)
SPLIT_TOO_LONG = (
    "a long line (or input) typed while a program that may read only a part of it reads the terminal: the rest "
    "would run in the shell, and input this long is not classified at every point it may be cut"
)


def typed_subject(
    session: Session,
    data: str,
    enter: bool,
    keys: list[str],
    kept_whole: bool = True,
    read: tuple[LineSettings | None, bool] | None = None,
) -> tuple[Subject, Typed]:
    """The policy's subject for `data` (then Enter, then `keys`) typed into `session`, and what was typed.
    `kept_whole` False: the program reading the terminal may take a part of a line and leave the rest to the
    shell (reader.keeps_lines). `read`: the terminal's line settings and whether Ctrl-C clears its line, as the
    caller read them for this send (otherwise read here)."""
    split = not kept_whole or bool(session.typing.pieces)
    if read is None:
        read = (line_settings_of(session.terminal), session.terminal.interrupt_clears_line())
    settings, interrupt_clears = read
    typed = read_keystrokes(session.typing, data, enter, keys, interrupt_clears)
    findings: list[Finding] = list(typed.findings)
    payload = (data + ("\r" if enter else "")).encode("utf-8", errors="surrogateescape")
    payload += b"".join(KEYS.get(key, b"") for key in keys)
    findings += settings_findings(settings, payload)
    pending = "".join(session.typing.pieces).encode("utf-8", errors="surrogateescape")
    texts = list(dict.fromkeys([*typed.texts, *edited_lines(settings, pending + payload)]))
    if session.open_input:  # the program is still inside a construct an earlier line opened (open_input.py)
        if len(session.open_input) > MAX_OPEN:
            findings.append((session.open_input[-200:], 2, OPEN_TOO_LONG))
        texts = [f"{session.open_input}\n{text}" for text in texts] + texts
    for line in list(texts):
        points = expansion_points(line)
        if points:
            findings.append((line[:200], 2, HISTORY))
            texts += expansions(line, points, session.history)
        texts += escape_readings(line)
    texts = list(dict.fromkeys(texts))
    if split or len(typed.submitted) > 1:  # a line's program may stop early; a later line's may read part of it
        findings += split_findings(texts, 2 if session.terminal.kernel_confined else 1, session.terminal.kind)
    for text in texts:
        nested: list[str] = []
        tokens = tokenize(text, nested)
        typed.shell_open[text] = shell_left_open(tokens)
        commands = list(tokens.commands)
        findings += line_findings(text)
        findings += commands_start_findings(commands, nested)
        findings += interactive_findings(text, session.passprompt, commands)
    directories = session.terminal.directories()  # where the line's relative words land (attack 5, C1)
    return Subject(typed="\n".join(texts), session_findings=tuple(findings), directories=directories), typed


def split_findings(texts: list[str], least_tier: int, kind: str) -> list[Finding]:
    """What the shell would run from each rest of each line, at `least_tier` or above, where a rest does more than
    an unknown program: a program that read the part before it stopped there (policy/rests.py). Tier 1 counts
    where no kernel refuses the terminal's writes (a remote host, readonly classifier-only): readonly's own
    promise then rests on reading (review W3)."""
    counted = counted_rest_findings("\n".join(texts), least_tier, elsewhere=kind == "ssh")
    if counted is None:
        return [(texts[0][:200], 2, SPLIT_TOO_LONG)]
    found: list[Finding] = []
    for start, rest, finding in counted:
        why = f"if the program reading the line stops after {start} characters, the shell runs the rest"
        if kind == "ssh":
            why = f"{REMOTE_SPLIT}; {why}"
        found.append((rest[:200], finding.tier, f"{why}: {finding.reason}"))
    return found


def remember(session: Session, typed: Typed) -> None:
    """After the input was written: the line now being typed, and the lines submitted (the session's history)."""
    session.typing = typed.typing
    if typed.submitted:
        session.history = [*session.history, *typed.submitted][-HISTORY_KEPT:]
        joined = "\n".join([session.open_input, *typed.submitted] if session.open_input else typed.submitted)
        # Past MAX_OPEN only the end is kept (its length still over the bound, so later lines stay tier 2): an open
        # quote fed for ever must not grow the session's memory, nor each line's classification, without bound.
        open_now = still_open(joined, typed.shell_open.get(joined))
        session.open_input = joined[-(MAX_OPEN + 1) :] if open_now else ""
