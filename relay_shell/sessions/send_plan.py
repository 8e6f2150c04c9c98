"""session_send: what a send types (every line submitted, with the part typed earlier without Enter, classified as
the program reading it will take it: sessions/reading.py), a secret typed from the server's environment at a
password prompt, what a tier-3 confirmation of input is bound to, and input withheld from the audit record at a
password prompt (sessions/passwords.py; adr/0005, adr/0026).
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import time
from typing import Any

from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Execution, Plan, ProgressFn
from relay_shell.sessions.expect import compile_until, expected_echo
from relay_shell.sessions.keys import KEYS, key_name
from relay_shell.sessions.line_settings import LineSettings, echo_off, interrupts, line_settings_of, settings_from
from relay_shell.sessions.passwords import last_output_line, password_prompt, withheld_input
from relay_shell.sessions.plans import SETTLE, budget_for, check_running, read_result, wait_timeout_for
from relay_shell.sessions.registry import Session, SessionRegistry
from relay_shell.settings.model import Settings

PASSWORD_MODE_WAIT = 0.5  # seconds a secret waits for the terminal to turn echo off
MAX_SEND = 64 * 1024  # characters per session_send; a terminal line holds 4095
MAX_KEYS = 256


async def await_terminal_reader(registry: SessionRegistry, owner: str, session_id: str) -> None:
    """Before a send is prepared: give the program in the foreground (the shell just after its prompt, on a loaded
    machine) its moment to reach its read of the terminal, so that whether it keeps a line whole is known when the
    line is classified (adr/0026 Round 6); waited for with asyncio, never on the event loop's thread. Returns
    quietly for a session that is not there, not the caller's or not running: prepare_send says so, audited."""
    try:
        session = registry.get(owner, session_id)
    except ToolError:
        return
    if session.state != "running" or session.terminal.keeps_lines(1) is not None:
        return
    deadline = time.monotonic() + session.terminal.reader_wait()  # only when nothing reads yet: it looks further
    while session.terminal.keeps_lines(1) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.002)


def prepare_send(
    settings: Settings,
    registry: SessionRegistry,
    owner: str,
    *,
    session_id: str,
    data: str,
    enter: bool,
    keys: list[str] | None,
    secret_env: str | None,
    until: str | list[str] | None,
    timeout: float,
    max_bytes: int | None,
    strip_ansi_codes: bool,
) -> Plan:
    notes: list[str] = []
    session = registry.get(owner, session_id)
    key_names = _checked_keys(data, keys)
    secret = _secret_value(settings, secret_env, data) if secret_env is not None else None
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    budget = budget_for(settings, max_bytes, notes)
    # Enter follows `data` unless only keys were given (keys=["ctrl-c"] must not also press Enter).
    press_enter = enter and (bool(data) or secret is not None or not key_names)
    typed, payload = _keystrokes(data, secret, press_enter, key_names)

    # Loaded on first use: the readings of typed input use the policy's tokenizer (policy/admission.py says why).
    from relay_shell.sessions.reading import remember, typed_subject

    settings_seen, echo_is_off, interrupt_clears = _terminal_settings(session)
    no_echo = session.state == "running" and echo_is_off
    prompt = password_prompt(session, reader=False, whole=len(payload)) if no_echo else None
    version = session.input_version
    call_arguments = {"session_id": session_id, "data": data, "enter": enter, "keys": keys, "until": until}
    # Whether the line goes whole to what reads it now (a shell, a REPL, a reader of the whole line), or a program
    # may take a part of it and leave the rest to the shell (review W2): then every rest is classified too.
    # Nothing waiting on the terminal right now (None) counts as a reader of parts: this check cannot wait here.
    kept_whole = session.state != "running" or session.terminal.keeps_lines(len(payload)) is True
    typed_data = data if secret is None else ""
    read = (settings_seen, interrupt_clears)
    subject, typed_input = typed_subject(session, typed_data, press_enter, key_names, kept_whole, read)
    echo = None if no_echo or secret is not None or key_names else expected_echo(typed)

    async def execute(progress: ProgressFn) -> Execution:
        """The send, with a window on the session's exec trace: the programs started while it is handled."""
        with session.terminal.exec_trace.window_into(plan):
            return await send(progress)

    async def send(progress: ProgressFn) -> Execution:
        async with session.input_lock:
            check_running(session)
            if session.input_version != version:
                # The line was classified with what had been typed before; another call has typed since.
                raise ToolError(
                    "InputRace", "another call typed into (or signalled) this session meanwhile; send this again"
                )
            if secret is not None:
                await _await_password_prompt(session, len(payload))
            await _check_before_typing(session, plan, call_arguments, settings_seen, len(payload), kept_whole)
            session.last_activity = time.monotonic()
            match_from = session.ring.end
            try:
                await session.terminal.write(payload, time.monotonic() + max(wait_timeout, 1.0))
            except TimeoutError as exc:
                raise ToolError("InputBlocked", f"{exc}: the program is not reading its input") from None
            finally:
                # Even a write cut short may have typed part of the line: the policy assumes all of it.
                session.input_version += 1
                remember(session, typed_input)
            if session.transcript is not None and plan.recorded_arguments is None and secret is None:
                session.transcript.input(payload)
        result = await session.wait(match_from, patterns, wait_timeout, SETTLE, settle_from_start=False, echo=echo)
        session.last_activity = time.monotonic()
        return read_result(session, None, budget, strip_ansi_codes, result, bool(patterns), wait_timeout)

    plan = Plan(subject=subject, execute=execute, notes=notes, timeout=wait_timeout, session_id=session_id)
    plan.confirm_state_of = lambda: confirm_state(session, version)
    if prompt is not None and data:
        plan.recorded_arguments = withheld_input(call_arguments, session, prompt)
    return plan


def _terminal_settings(session: Session) -> tuple[LineSettings | None, bool, bool]:
    """The terminal's line settings, whether it reads with echo off and whether Ctrl-C clears its line: read once
    for the send's preparation (each was a TCGETS of its own); a remote terminal's cannot be seen, its own methods
    say."""
    attributes = session.terminal.line_settings()
    if attributes is None:
        return None, session.terminal.password_mode(), session.terminal.interrupt_clears_line()
    return settings_from(attributes), echo_off(attributes), interrupts(attributes)


async def _check_before_typing(
    session: Session,
    plan: Plan,
    call_arguments: dict[str, Any],
    settings_seen: LineSettings | None,
    length: int,
    kept_whole: bool,
) -> None:
    """Just before the write, under the session's input lock: what the input was checked against still holds."""
    # Sampled again just before writing: a program may have asked for a password since the call was
    # prepared. The start record is written by now; the end record withholds the input (adr/0014).
    if call_arguments["data"] and plan.recorded_arguments is None:
        shown = password_prompt(session, reader=False, whole=length)
        if shown is not None:
            plan.recorded_arguments = withheld_input(call_arguments, session, shown)
    if plan.recorded_arguments is not None and not await _reader_seen(session, length):
        # Held back from the record for a password prompt that no process reads (review A1: a prompt printed
        # before `sleep`), or that a process reads only in part (review W1: `dd bs=1 count=1`): the line, or its
        # rest, would go to whatever reads next, the shell, unrecorded. Nothing is typed.
        raise ToolError(
            "PromptGone",
            "the password prompt this input was held back for is not being read whole (no program is reading "
            "the terminal, or the one reading asks for fewer bytes than the line and would leave the rest to the "
            "shell); nothing was typed: look at the session (session_recv) and send it again",
        )
    if kept_whole and not await _kept_whole(session, length):
        # Classified as read whole by one program (a shell, a REPL): a program that reads in parts took the
        # terminal since. Nothing is typed.
        raise ToolError(
            "ReaderChanged",
            "the program reading the terminal changed after this input was checked (one that may read only a part "
            "of the line took over); nothing was typed: look at the session (session_recv) and send it again",
        )
    if settings_seen != line_settings_of(session.terminal):
        raise ToolError(
            "TerminalChanged",
            "the terminal's input settings changed after this input was checked (a program set its "
            "special characters); nothing was typed: send it again",
        )


async def _kept_whole(session: Session, length: int) -> bool:
    """Whether what reads the terminal (or within its reader_wait comes to read it) takes `length` bytes whole;
    waited for without holding the event loop."""
    kept = session.terminal.keeps_lines(length)
    if kept is not None:
        return kept
    deadline = time.monotonic() + session.terminal.reader_wait()  # only when nothing reads yet: it looks further
    while (kept := session.terminal.keeps_lines(length)) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.002)
    return kept is True


async def _reader_seen(session: Session, length: int) -> bool:
    """Whether a process is (or within PASSWORD_MODE_WAIT comes to be) blocked reading the password prompt, and
    would take all `length` bytes: a program prints its prompt a moment before it reads, and on a loaded
    machine the moment is longer."""
    deadline = time.monotonic() + PASSWORD_MODE_WAIT
    while password_prompt(session, whole=length) is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _checked_keys(data: str, keys: list[str] | None) -> list[str]:
    """The names of the keys to press after `data`, once both are within their bounds."""
    if len(data) > MAX_SEND:
        raise ArgumentError(
            f"data: is {len(data)} characters; allowed: at most {MAX_SEND} per call (send large input as a file "
            "with shell_exec and read it in the session)"
        )
    key_names = [key_name(key) for key in keys or []]
    if len(key_names) > MAX_KEYS:
        raise ArgumentError(f"keys: {len(key_names)} keys; allowed: at most {MAX_KEYS} per call")
    return key_names


def _keystrokes(data: str, secret: str | None, press_enter: bool, key_names: list[str]) -> tuple[str, bytes]:
    """What the policy and the echo see as typed, and the bytes written to the terminal (the secret's, when one
    is typed; then the keys)."""
    typed = data + ("\r" if press_enter and secret is None else "")
    payload = typed.encode("utf-8", errors="surrogateescape")
    if secret is not None:
        payload = secret.encode("utf-8", errors="surrogateescape") + (b"\r" if press_enter else b"")
    payload += b"".join(KEYS[name] for name in key_names)
    return typed, payload


def confirm_state(session: Session, input_version: int) -> dict[str, Any]:
    """What a tier-3 confirmation of input to this session is bound to: the inputs written (and signals sent)
    and the output produced so far, since either can mean that another directory, user or program now reads
    the line (`cd ../prod` typed after the confirmation; a job typed earlier that ends and gives the shell
    back). Also what the human is shown about where the input goes: the program, what is already on the line,
    and the last line of output (the prompt, as the program printed it)."""
    last = last_output_line(session)
    return {
        "inputs": input_version,
        "output": session.ring.end,
        "program": f"{session.command[:200]}{'…' if len(session.command) > 200 else ''} ({session.terminal.where})",
        "pending": list(session.typing.pieces),
        "last_output": last[-200:],
    }


def _secret_value(settings: Settings, secret_env: str, data: str) -> str:
    if data:
        raise ArgumentError("data: must be empty with secret_env (the secret is the input); allowed: data=''")
    allowed = list(settings.sessions.secret_env_allow)
    # A program that reads the "password" can print it: only variables the operator set aside for typing.
    if not any(fnmatch.fnmatchcase(secret_env, pattern) for pattern in allowed) or secret_env.startswith(
        "RELAY_SHELL_"
    ):
        listed = ", ".join(allowed) if allowed else "none"
        raise ArgumentError(
            f"secret_env: {secret_env[:64]!r} is not a variable the operator allows to be typed; allowed: "
            f"{listed} (RELAY_SHELL_SECRET_ENV_ALLOW)"
        )
    value = os.environ.get(secret_env)
    if not secret_env or value is None:
        raise ArgumentError(
            f"secret_env: {secret_env[:64]!r} is not set in the server's environment; allowed: the name of a "
            "variable the operator set for relay-shell"
        )
    return value


async def _await_password_prompt(session: Session, length: int) -> None:
    """A program prints its prompt and turns echo off in either order: give it a moment before refusing. A shell
    reading its commands with echo off (`stty -echo`) is no prompt: it would run the secret as a command, and
    its error message would show it; nor is a program that reads fewer bytes than the secret and stops (review
    S1: the shell would run the rest)."""
    deadline = time.monotonic() + PASSWORD_MODE_WAIT
    terminal = session.terminal
    while not terminal.password_mode() or terminal.shell_reads_line() or not terminal.reader_waiting(length):
        if time.monotonic() >= deadline:
            raise ToolError(
                "EchoOn",
                "no program is reading a password with echo off that takes the whole line (the terminal echoes, a "
                "shell reads commands, nothing reads the terminal, or what reads asks for fewer bytes than the "
                "secret and would leave the rest to the shell), so the secret would appear in the output or be run "
                "as a command; wait for the password prompt (session_recv with until) and send it then",
            )
        await asyncio.sleep(0.01)
