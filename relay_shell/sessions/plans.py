"""shell_spawn and session_*: validate the arguments, then plan what the session registry does.

Policy sees what is typed: every line submitted into a session (with the part typed earlier without
Enter) is classified like a one-shot command (see `typed_lines`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from relay_shell.arguments import MIN_OUTPUT, check_cwd, check_no_nul, child_env, clamp
from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Execution, Outcome, Plan, ProgressFn, Subject
from relay_shell.sessions.ansi import strip_ansi
from relay_shell.sessions.expect import Patterns, compile_until, expected_echo
from relay_shell.sessions.keys import KEYS, key_name
from relay_shell.sessions.registry import Session, SessionRegistry, Terminal, WaitResult
from relay_shell.sessions.transcript import Transcript
from relay_shell.sessions.typed import typed_lines
from relay_shell.settings.model import Settings
from relay_shell.trace.record import ExecTrace
from relay_shell.trace.tracer import denied_first, refusal_notes

DEFAULT_SHELL = ["bash", "--noprofile", "--norc"]  # predictable prompt, no user aliases in the way
TERM = "xterm-256color"
PASSWORD_MODE_WAIT = 0.5  # seconds a secret waits for the terminal to turn echo off
SETTLE = 0.3  # seconds of quiet that end a wait without `until`
RESIZE_SETTLE = 0.2  # a resize waits this long for the program's redraw to go quiet
RESIZE_WAIT = 1.0
MAX_SEND = 64 * 1024  # characters per session_send; a terminal line holds 4095
MAX_KEYS = 256
COLS = (10, 1000)
ROWS = (2, 500)
SIGNALS = ("TERM", "INT", "HUP", "KILL", "QUIT", "USR1", "USR2", "STOP", "CONT", "TSTP", "WINCH", "ALRM")
# A word made only of these needs no shell: run it directly so the program is the session leader.
_PLAIN_WORD = re.compile(r"[\w@%+=:,./-]+")


def prepare_spawn(
    settings: Settings,
    registry: SessionRegistry,
    owner: str,
    client_id: str,
    *,
    command: str | list[str] | None,
    cols: int,
    rows: int,
    cwd: str | None,
    env: dict[str, str | None] | None,
    until: str | list[str] | None,
    timeout: float,
) -> Plan:
    notes: list[str] = []
    if command is None:
        argv = list(DEFAULT_SHELL)
        shown = "bash"
    elif isinstance(command, list):
        argv = list(command)
        shown = shlex.join(argv)
    else:
        shown = command
        try:
            words = shlex.split(command)
        except ValueError:
            words = []
        argv = words if words and all(_PLAIN_WORD.fullmatch(word) for word in words) else ["/bin/sh", "-c", command]
    if not argv or not argv[0] or (isinstance(command, str) and not command.strip()):
        raise ArgumentError("command: is empty; allowed: a program to run in the terminal, or omit it for bash")
    for item in argv:
        check_no_nul("command", item)
    check_size(cols, rows)
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    work_dir = check_cwd(cwd)
    # COLUMNS/LINES inherited from the server's own environment (a server started from a terminal, a test
    # runner) would override the PTY's size for curses and readline: the terminal's size is the PTY's.
    overlay = {"TERM": TERM, "COLUMNS": None, "LINES": None, **(env or {})}
    terminal_env = child_env(overlay)  # the one-shot pager defaults included, unless the overlay changes them
    assert terminal_env is not None
    subject = Subject(
        command=command if isinstance(command, str) else None,
        argv=tuple(argv) if not isinstance(command, str) else None,
        env=tuple((env or {}).items()),
    )

    async def open_terminal(session_id: str) -> Terminal:
        # Imported on first use: ptyprocess, ctypes and termios cost startup time a server that never
        # spawns a terminal should not pay.
        from relay_shell.sessions.local_pty import LocalPty, spawn_pty

        containment = registry.containment
        unit = containment.open_unit("session", session_id) if containment is not None else None
        tracer = containment.tracer if containment is not None else None
        exec_trace = tracer.new_trace() if tracer is not None else None
        hold = threading.Event()
        try:
            spawned = None
            if tracer is not None and exec_trace is not None:
                spawned = await tracer.spawn(
                    exec_trace, lambda: spawn_pty(argv, work_dir, terminal_env, cols, rows, unit), hold
                )
            return LocalPty(argv, work_dir, terminal_env, cols, rows, unit, spawned, exec_trace, hold)
        except FileNotFoundError:
            hold.set()  # nothing started: the spawner thread may end
            raise ArgumentError(f"command: {argv[0]!r} was not found; allowed: an installed program") from None
        except PermissionError:
            hold.set()
            if exec_trace is not None and exec_trace.denied and exec_trace.count == exec_trace.denied:
                raise ToolError("ExecDenied", denied_first(exec_trace)) from None
            raise
        except BaseException:
            hold.set()
            raise
        finally:
            if unit is not None and unit.leader is None:  # nothing started: no unit to keep
                unit.release()

    return spawn_plan(
        settings, registry, owner, client_id, subject, shown, cols, rows, patterns, wait_timeout, notes, open_terminal
    )


def spawn_plan(
    settings: Settings,
    registry: SessionRegistry,
    owner: str,
    client_id: str,
    subject: Subject,
    shown: str,
    cols: int,
    rows: int,
    patterns: Patterns,
    wait_timeout: float,
    notes: list[str],
    open_terminal: Callable[[str], Terminal | Awaitable[Terminal]],  # gets the new session's id
    target: dict[str, Any] | None = None,
) -> Plan:
    """Start a terminal (local PTY or SSH channel) as a new session and wait for its first output."""
    # Named before it starts, so the call's start record (written before anything runs) already carries it.
    session_id = registry.new_id()

    async def execute(progress: ProgressFn) -> Execution:
        await registry.reserve()
        # The transcript first: if it cannot be written (RECORD_DIR), nothing is started.
        transcript = _transcript(settings, session_id, shown, cols, rows)
        try:
            opened = open_terminal(session_id)
            terminal = await opened if inspect.isawaitable(opened) else opened
        except BaseException:
            if transcript is not None:
                transcript.close()
                transcript.path.unlink(missing_ok=True)
            raise
        session = registry.add(session_id, owner, client_id, shown, terminal, cols, rows, transcript)
        result = await session.wait(0, patterns, wait_timeout, SETTLE, settle_from_start=True)
        exec_trace = getattr(terminal, "exec_trace", None)
        tracer = registry.containment.tracer if registry.containment is not None else None
        if tracer is not None and exec_trace is not None:  # what ran until the first output settled
            exec_trace.call_id = plan.call_id  # execs after session:end are recorded under shell_spawn's call
            plan.record_fields = {**(plan.record_fields or {}), "execs": tracer.snapshot(exec_trace)}
            notes.extend(refusal_notes(exec_trace))
        return _read_result(
            session, None, settings.limits.max_output, False, result, bool(patterns), wait_timeout, spawned=True
        )

    plan = Plan(
        subject=subject, execute=execute, notes=notes, timeout=wait_timeout, target=target, session_id=session_id
    )
    return plan


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
    if len(data) > MAX_SEND:
        raise ArgumentError(
            f"data: is {len(data)} characters; allowed: at most {MAX_SEND} per call (send large input as a file "
            "with shell_exec and read it in the session)"
        )
    key_names = [key_name(key) for key in keys or []]
    if len(key_names) > MAX_KEYS:
        raise ArgumentError(f"keys: {len(key_names)} keys; allowed: at most {MAX_KEYS} per call")
    secret = _secret_value(settings, secret_env, data) if secret_env is not None else None
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    budget = _budget(settings, max_bytes, notes)
    # Enter follows `data` unless only keys were given (keys=["ctrl-c"] must not also press Enter).
    press_enter = enter and (bool(data) or secret is not None or not key_names)
    typed = data + ("\r" if press_enter and secret is None else "")
    payload = typed.encode("utf-8", errors="surrogateescape")
    if secret is not None:
        payload = secret.encode("utf-8", errors="surrogateescape") + (b"\r" if press_enter else b"")
    payload += b"".join(KEYS[name] for name in key_names)

    password_prompt = session.state == "running" and session.terminal.password_mode()
    version = session.input_version
    call_arguments = {"session_id": session_id, "data": data, "enter": enter, "keys": keys, "until": until}
    lines, pending, edited = typed_lines(session.pending_input, data if secret is None else "", press_enter, key_names)
    subject = Subject(typed="\n".join(lines), typed_edited=edited)
    echo = None if password_prompt or secret is not None or key_names else expected_echo(typed)

    async def execute(progress: ProgressFn) -> Execution:
        """The send, with a window on the session's exec trace: the programs started while it is handled."""
        session_trace = getattr(session.terminal, "exec_trace", None)
        tracer = registry.containment.tracer if registry.containment is not None else None
        if session_trace is None or tracer is None:
            return await send(progress)
        window = ExecTrace(session_trace.max_entries)
        session_trace.window = window
        try:
            return await send(progress)
        finally:
            if session_trace.window is window:
                session_trace.window = None
            plan.record_fields = {**(plan.record_fields or {}), "execs": tracer.snapshot(window)}
            notes.extend(refusal_notes(window))

    async def send(progress: ProgressFn) -> Execution:
        async with session.input_lock:
            _check_running(session)
            if session.input_version != version:
                # The line was classified with what had been typed before; another call has typed since.
                raise ToolError(
                    "InputRace", "another call typed into (or signalled) this session meanwhile; send this again"
                )
            if secret is not None:
                await _await_password_prompt(session)
            # Sampled again just before writing: a program may have turned echo off since the call was prepared.
            # The start record is written by now; the end record withholds the input (adr/0014).
            if data and plan.recorded_arguments is None and session.terminal.password_mode():
                plan.recorded_arguments = withheld_input(call_arguments, session)
            session.last_activity = time.monotonic()
            match_from = session.ring.end
            try:
                await session.terminal.write(payload, time.monotonic() + max(wait_timeout, 1.0))
            except TimeoutError as exc:
                raise ToolError("InputBlocked", f"{exc}: the program is not reading its input") from None
            finally:
                # Even a write cut short may have typed part of the line: the policy assumes all of it.
                session.input_version += 1
                session.pending_input = pending
            if session.transcript is not None and plan.recorded_arguments is None and secret is None:
                session.transcript.input(payload)
        result = await session.wait(match_from, patterns, wait_timeout, SETTLE, settle_from_start=False, echo=echo)
        session.last_activity = time.monotonic()
        return _read_result(session, None, budget, strip_ansi_codes, result, bool(patterns), wait_timeout)

    plan = Plan(subject=subject, execute=execute, notes=notes, timeout=wait_timeout, session_id=session_id)
    plan.confirm_state_of = lambda: confirm_state(session, version)
    if password_prompt and data:
        plan.recorded_arguments = withheld_input(call_arguments, session)
    return plan


def confirm_state(session: Session, input_version: int) -> dict[str, Any]:
    """What a tier-3 confirmation of input to this session is bound to: the inputs written (and signals sent)
    and the output produced so far, since either can mean that another directory, user or program now reads
    the line (`cd ../prod` typed after the confirmation; a job typed earlier that ends and gives the shell
    back). Also what the human is shown about where the input goes: the program, what is already on the line,
    and the last line of output (the prompt, as the program printed it)."""
    ring = session.ring
    recent = strip_ansi(ring.read(max(ring.start, ring.end - 2048)).data).decode("utf-8", errors="replace")
    last = ""
    # The last line with something on it, found from the end (this runs on every send; splitting all of the
    # recent output into lines cost more than the rest of the send's preparation).
    content_end = len(recent.rstrip())
    if content_end:
        line_end = recent.find("\n", content_end)
        line = recent[recent.rfind("\n", 0, content_end) + 1 : line_end if line_end >= 0 else len(recent)]
        redrawn = line.rsplit("\r", 1)[-1]  # a carriage return starts the line over
        last = redrawn if redrawn.strip() else line
    return {
        "inputs": input_version,
        "output": ring.end,
        "program": f"{session.command[:200]}{'…' if len(session.command) > 200 else ''} ({session.terminal.where})",
        "pending": list(session.pending_input),
        "last_output": last[-200:],
    }


def withheld_input(arguments: dict[str, Any], session: Session) -> dict[str, Any] | None:
    """The arguments of a send typed at a no-echo prompt, as the audit log keeps them: no `data`. None when
    the input is kept: a program can turn echo off (`stty -echo`) or print "Password:" on purpose to hide
    what is typed next, so only a whole line that reads like a password is withheld: nothing typed before it
    without Enter, no control characters (line editing), one line, and tier 0 or 1 (ADR 0005)."""
    data = arguments.get("data")
    if not isinstance(data, str) or data == "" or session.pending_input:
        return None
    line = data.removesuffix("\n").removesuffix("\r")
    from relay_shell.policy.classify import classify  # loaded on first use (policy/admission.py says why)

    if any(ord(char) < 32 or ord(char) == 127 for char in line) or classify(Subject(typed=line)).tier >= 2:
        return None
    return {**arguments, "data": f"[withheld: {len(data)} characters typed with terminal echo off]"}


def withhold_at_password_prompt(registry: SessionRegistry, arguments: dict[str, Any]) -> dict[str, Any]:
    """For every session_send record, valid or not: withhold `data` while the session reads a password."""
    session_id = arguments.get("session_id")
    session = registry.sessions.get(session_id) if isinstance(session_id, str) else None
    if session is not None and session.state == "running" and session.terminal.password_mode():
        return withheld_input(arguments, session) or arguments
    return arguments


def prepare_recv(
    settings: Settings,
    registry: SessionRegistry,
    owner: str,
    *,
    session_id: str,
    timeout: float,
    max_bytes: int | None,
    until: str | list[str] | None,
    strip_ansi_codes: bool,
    since: int | None,
) -> Plan:
    notes: list[str] = []
    session = registry.get(owner, session_id)
    if since is not None and since < 0:
        raise ArgumentError(f"since: {since} is negative; allowed: a cursor from an earlier result (0 = the start)")
    if since is not None and since > session.ring.end:
        raise ArgumentError(
            f"since: {since} is beyond the output (cursor {session.ring.end}); allowed: 0 to {session.ring.end}"
        )
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    budget = _budget(settings, max_bytes, notes)

    async def execute(progress: ProgressFn) -> Execution:
        session.last_activity = time.monotonic()
        match_from = session.read_cursor if since is None else since
        unread = session.ring.end > match_from
        if patterns or not unread:
            result = await session.wait(match_from, patterns, wait_timeout, SETTLE, settle_from_start=False)
        else:
            # Output is already waiting: return it now rather than sitting out a settle period.
            result = WaitResult("eof" if session.state != "running" else "quiet")
        session.last_activity = time.monotonic()
        return _read_result(session, since, budget, strip_ansi_codes, result, bool(patterns), wait_timeout)

    return Plan(
        subject=Subject(fixed_tier=0), execute=execute, notes=notes, timeout=wait_timeout, session_id=session_id
    )


def prepare_resize(
    settings: Settings, registry: SessionRegistry, owner: str, *, session_id: str, cols: int, rows: int
) -> Plan:
    session = registry.get(owner, session_id)
    check_size(cols, rows)

    async def execute(progress: ProgressFn) -> Execution:
        _check_running(session)
        session.last_activity = time.monotonic()
        match_from = session.ring.end
        session.terminal.resize(cols, rows)
        session.cols, session.rows = cols, rows
        if session.transcript is not None:
            session.transcript.resize(cols, rows)
        # The program redraws (a prompt, a screen) a moment later, over SSH a round trip later: return that
        # redraw here, so that it is not taken for the answer to the next session_send.
        result = await session.wait(match_from, [], RESIZE_WAIT, RESIZE_SETTLE, settle_from_start=True)
        return _read_result(
            session,
            None,
            settings.limits.max_output,
            False,
            result,
            False,
            RESIZE_WAIT,
            prefix=f"resized to {cols}x{rows}",
        )

    return Plan(subject=Subject(fixed_tier=0), execute=execute, session_id=session_id)


def prepare_kill(
    settings: Settings, registry: SessionRegistry, owner: str, *, session_id: str, signal_name: str, close: bool
) -> Plan:
    session = registry.get(owner, session_id)
    name = signal_name.strip().upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise ArgumentError(f"signal: {signal_name[:20]!r} is not supported; allowed: {', '.join(SIGNALS)}")
    signal_number = getattr(signal, "SIG" + name)

    async def execute(progress: ProgressFn) -> Execution:
        session.last_activity = time.monotonic()
        if close:
            await registry.close(session, f"closed by session_kill (SIG{name})", first_signal=signal_number)
            headline = f"[closed {session_id}: {_ending(session)}]"
        else:
            _check_running(session)
            session.terminal.send_signal(signal_number)
            session.input_version += 1  # a signal can change what reads the next line (a tier-3 confirmation)
            headline = f"[sent SIG{name} to the foreground job of {session_id}]"
        return Execution(
            status="ok",
            output=BoundedCapture(1).result(),
            exit_code=session.exit_code,
            signal=session.signal_name,
            headline=headline,
            fields={"session_id": session_id, "state": session.state},
        )

    return Plan(subject=Subject(fixed_tier=1), execute=execute, session_id=session_id)


def prepare_list(settings: Settings, registry: SessionRegistry, owner: str) -> Plan:
    async def execute(progress: ProgressFn) -> Execution:
        sessions = [session.describe() for session in registry.owned_by(owner)]
        lines = [
            f"{item['session_id']}  {item['state']:<7} {item['cols']}x{item['rows']}  age {item['age_s']}s  "
            f"idle {item['idle_s']}s  cursor {item['cursor']}  unread {item['unread_bytes']}  "
            f"dropped {item['dropped_bytes']}"
            + (f"  exit {item['exit_code']}" if item["exit_code"] is not None else "")
            + (f"  signal {item['signal']}" if item["signal"] else "")
            + f"  {item['command']}"
            for item in sessions
        ]
        capture = BoundedCapture(settings.limits.max_output)
        capture.feed("\n".join(lines).encode())
        return Execution(
            status="ok",
            output=capture.result(),
            headline=f"[{len(sessions)} session{'s' if len(sessions) != 1 else ''}]",
            fields={"sessions": sessions},
        )

    return Plan(subject=Subject(fixed_tier=0), execute=execute)


# -- helpers ---------------------------------------------------------------------------------------------


def _read_result(
    session: Session,
    since: int | None,
    budget: int,
    strip: bool,
    result: WaitResult,
    has_until: bool,
    timeout: float,
    spawned: bool = False,
    prefix: str | None = None,
) -> Execution:
    read = session.read(since)
    data = strip_ansi(read.data) if strip else read.data
    capture = BoundedCapture(budget)
    capture.feed(data)
    status: Outcome = "ok"
    if result.reason == "match" and result.match is not None:
        what = f"match {result.match.index} {result.match.text[:80]!r}"
    elif result.reason == "eof":
        what = "eof: " + (f"signal {session.signal_name}" if session.signal_name else f"exit {session.exit_code}")
    elif result.reason == "timeout" and has_until:
        status = "timeout"
        what = f"TIMEOUT after {timeout:g}s: no match for until"
    elif result.reason == "timeout":
        what = f"waited {timeout:g}s"
    else:
        what = "output quiet"
    context = [prefix] if prefix else []
    if spawned:
        context.append(f"spawned {session.session_id} {session.terminal.where}")
    # A timeout is an error result: its first line starts as every timeout's does ([TIMEOUT after Ns…]).
    what = " | ".join([what, *context] if status == "timeout" else [*context, what])
    headline = f"[{what} | cursor {read.end}" + (f" | dropped {read.dropped} bytes" if read.dropped else "") + "]"
    fields: dict[str, Any] = {
        "session_id": session.session_id,
        "cursor": read.end,
        "since": read.start,
        "dropped": read.dropped,
        "wait": result.reason,
        "match_index": result.match.index if result.match else None,
        "match_text": result.match.text if result.match else None,
        "state": session.state,
    }
    if spawned:
        fields["pid"] = session.terminal.pid
    ended = session.state != "running"
    return Execution(
        status=status,
        output=capture.result(),
        exit_code=session.exit_code if ended else None,
        signal=session.signal_name if ended else None,
        headline=headline,
        fields=fields,
    )


def check_size(cols: int, rows: int) -> None:
    if not COLS[0] <= cols <= COLS[1]:
        raise ArgumentError(f"cols: {cols} is out of range; allowed: {COLS[0]} to {COLS[1]}")
    if not ROWS[0] <= rows <= ROWS[1]:
        raise ArgumentError(f"rows: {rows} is out of range; allowed: {ROWS[0]} to {ROWS[1]}")


def _check_running(session: Session) -> None:
    if session.state != "running":
        raise ToolError(
            "SessionEnded",
            f"session {session.session_id} has ended ({_ending(session)}); its output can still be read "
            "with session_recv",
        )


def _ending(session: Session) -> str:
    if session.signal_name:
        return f"killed by {session.signal_name}"
    if session.exit_code is not None:
        return f"exited with {session.exit_code}"
    return "running" if session.state == "running" else "ended"


def wait_timeout_for(settings: Settings, timeout: float, notes: list[str]) -> float:
    value, note = clamp("timeout", timeout, 0.0, settings.limits.max_timeout)
    if note:
        notes.append(note)
    return abs(value)  # -0.0 is in range, and would read "-0s"


def _budget(settings: Settings, max_bytes: int | None, notes: list[str]) -> int:
    requested = settings.limits.max_output if max_bytes is None else max_bytes
    value, note = clamp("max_bytes", requested, MIN_OUTPUT, settings.limits.max_output_hard)
    if note:
        notes.append(note)
    return int(value)


def _secret_value(settings: Settings, secret_env: str, data: str) -> str:
    if data:
        raise ArgumentError("data: must be empty with secret_env (the secret is the input); allowed: data=''")
    allowed = settings.sessions.secret_env_allow
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


async def _await_password_prompt(session: Session) -> None:
    """A program prints its prompt and turns echo off in either order: give it a moment before refusing."""
    deadline = time.monotonic() + PASSWORD_MODE_WAIT
    while not session.terminal.password_mode():
        if time.monotonic() >= deadline:
            raise ToolError(
                "EchoOn",
                "the terminal is echoing input, so the secret would appear in the output; wait for the password "
                "prompt (session_recv with until) and send it then",
            )
        await asyncio.sleep(0.01)


def _transcript(settings: Settings, session_id: str, command: str, cols: int, rows: int) -> Transcript | None:
    if settings.sessions.record_dir is None:
        return None
    try:
        return Transcript(
            settings.sessions.record_dir, session_id, command, cols, rows, TERM, settings.sessions.record_max_bytes
        )
    except OSError as exc:
        raise ToolError(
            "TranscriptUnavailable",
            f"cannot record the session in RELAY_SHELL_RECORD_DIR={settings.sessions.record_dir} "
            f"({exc.strerror or exc}); nothing was started",
        ) from None
