"""Input withheld from the audit record: only a line typed at a password prompt (adr/0026).

The rule is sudo's (`log_passwords=false` with `passprompt_regex`): input is withheld only when a password prompt is
on the screen and the terminal does not echo. Here that is: the last line of output matches one of
RELAY_SHELL_PASSPROMPT's patterns, the terminal reads a line with echo off (locally: canonical mode without ECHO,
read by a program that is not a shell reading its commands; a remote terminal's modes cannot be seen, so its last
line must also end like a prompt, ADR 0007), a process of the foreground group is blocked reading the terminal right
then (locally; review A1: a prompt printed before `sleep` is no reader) and takes the whole line (review W1: `dd
bs=1 count=1` reads one byte and leaves the rest to the shell; sessions/reader.py), and the input reads like one
answer (one line, nothing typed before it without Enter, no control keys). A session that turns echo off by
itself (`stty -echo`, whatever its prompt says) gets its lines recorded in full. A withheld line is still
classified and admitted like any other, and its record names the prompt that caused it: `[withheld: N characters
typed at the password prompt '…']`.
"""

from __future__ import annotations

from typing import Any

from relay_shell.sessions.ansi import strip_ansi
from relay_shell.sessions.registry import Session, SessionRegistry
from relay_shell.settings.patterns import matches

PROMPT_SHOWN = 80  # characters of the prompt a record names
RECENT_OUTPUT = 2048  # bytes of output the last line is looked for in


def last_output_line(session: Session) -> str:
    """The last line of output with something on it, as the screen shows it (escape codes removed; a carriage
    return starts the line over)."""
    ring = session.ring
    recent = strip_ansi(ring.read(max(ring.start, ring.end - RECENT_OUTPUT)).data).decode("utf-8", errors="replace")
    # Found from the end (this runs on every send; splitting all of the recent output into lines costs more).
    content_end = len(recent.rstrip())
    if not content_end:
        return ""
    line_end = recent.find("\n", content_end)
    line = recent[recent.rfind("\n", 0, content_end) + 1 : line_end if line_end >= 0 else len(recent)]
    redrawn = line.rsplit("\r", 1)[-1]
    return redrawn if redrawn.strip() else line


def password_prompt(session: Session, reader: bool = True, whole: int = 1) -> str | None:
    """The password prompt a line of `whole` bytes typed now would answer, or None. `reader` False: the prompt as
    the screen and the terminal's mode show it, before a process is seen blocked reading it (the input is then
    held back from the record, and typed only once a reader that takes all of it is seen: send_plan.py); but a
    process reading now that would take only a part of the line is no password prompt (the rest goes to the
    shell): such input is recorded in full."""
    terminal = session.terminal
    if session.state != "running" or not terminal.password_mode() or terminal.shell_reads_line():
        return None
    prompt = last_output_line(session).strip()
    if not any(matches(pattern, prompt) for pattern in session.passprompt):
        return None
    if reader and not terminal.reader_waiting(whole):  # nothing reads it (the shell reads it later), or in part
        return None
    if not reader and terminal.reader_waiting() and not terminal.reader_waiting(whole):
        return None
    return prompt[-PROMPT_SHOWN:]


def typed_length(data: str) -> int:
    """The bytes a send of `data` types at most (Enter included): what a password reader must take in whole."""
    return len(data.encode("utf-8", errors="surrogateescape")) + 1


def withheld_input(arguments: dict[str, Any], session: Session, prompt: str) -> dict[str, Any] | None:
    """The arguments of a send typed at `prompt`, as the audit log keeps them: no `data`. None when the input
    does not read like one answer: more than one line, control keys, or the rest of a line typed before."""
    data = arguments.get("data")
    if not isinstance(data, str) or data == "" or session.typing.pieces or session.typing.edited:
        return None
    line = data.removesuffix("\n").removesuffix("\r")
    if any(ord(char) < 32 or ord(char) == 127 for char in line):
        return None
    return {**arguments, "data": f"[withheld: {len(data)} characters typed at the password prompt {prompt!r}]"}


def withhold_at_password_prompt(
    registry: SessionRegistry, arguments: dict[str, Any], owner: str | None
) -> dict[str, Any]:
    """For every session_send record, valid or not: withhold `data` while the caller's session shows a password
    prompt. Another client's session is not looked at (its prompt must neither hide nor name what this caller
    typed). `owner` None: a message the transport refused before its client could be told apart; withheld as
    the session's owner would be, since a password must not reach the log and that call ran nothing."""
    session_id = arguments.get("session_id")
    session = registry.sessions.get(session_id) if isinstance(session_id, str) else None
    if session is not None and owner is not None and session.owner != owner:
        return arguments
    data = arguments.get("data")
    length = typed_length(data) if isinstance(data, str) else 1
    prompt = password_prompt(session, reader=False, whole=length) if session is not None else None
    if session is None or prompt is None:
        return arguments
    return withheld_input(arguments, session, prompt) or arguments
