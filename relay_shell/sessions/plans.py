"""shell_spawn and session_*: validate the arguments, then plan what the session registry does (session_send
has its own module, sessions/send_plan.py). Local terminals start through the launch point (launch.py).
"""

from __future__ import annotations

import inspect
import re
import shlex
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from relay_shell.arguments import MIN_OUTPUT, check_cwd, check_no_nul, child_env, clamp
from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Execution, Outcome, Plan, ProgressFn, Subject
from relay_shell.sessions.ansi import strip_ansi
from relay_shell.sessions.expect import Patterns, compile_until
from relay_shell.sessions.registry import Session, SessionRegistry, Terminal, WaitResult
from relay_shell.sessions.transcript import Transcript
from relay_shell.settings.model import Settings

# A predictable prompt, no user aliases in the way, and history expansion off: `!!` is what it says (adr/0026).
DEFAULT_SHELL = ["bash", "--noprofile", "--norc", "+H"]
TERM = "xterm-256color"
SETTLE = 0.3  # seconds of quiet that end a wait without `until`
RESIZE_SETTLE = 0.2  # a resize waits this long for the program's redraw to go quiet
RESIZE_WAIT = 1.0
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
        # A leading NAME=value is an assignment for the shell, not a program to run.
        plain = words and "=" not in words[0] and all(_PLAIN_WORD.fullmatch(word) for word in words)
        argv = words if plain else ["/bin/sh", "-c", command]
    if not argv or not argv[0] or (isinstance(command, str) and not command.strip()):
        raise ArgumentError("command: is empty; allowed: a program to run in the terminal, or omit it for bash")
    for item in argv:
        check_no_nul("command", item)
    check_size(cols, rows)
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    work_dir = check_cwd(cwd)
    # Loaded on first use: what a terminal starts with reads the policy's tables (policy/admission.py says why).
    from relay_shell.sessions.pins import overlay_findings, pinned_environment

    # COLUMNS/LINES inherited from the server's own environment (a server started from a terminal, a test
    # runner) would override the PTY's size for curses and readline: the terminal's size is the PTY's.
    pins = pinned_environment(settings.policy.policy_mode)
    overlay = {"TERM": TERM, "COLUMNS": None, "LINES": None, **pins, **(env or {})}
    terminal_env = child_env(overlay)  # the one-shot pager defaults included, unless the overlay changes them
    assert terminal_env is not None
    subject = Subject(
        command=command if isinstance(command, str) else None,
        argv=tuple(argv) if not isinstance(command, str) else None,
        env=tuple((env or {}).items()),
        session_findings=tuple(overlay_findings(list((env or {}).items()), settings.sessions.passprompt)),
        directories=(work_dir,) if work_dir else (),
    )

    async def open_terminal(session_id: str) -> Terminal:
        # Imported on first use: ptyprocess, ctypes and termios cost startup time a server that never
        # spawns a terminal should not pay.
        from relay_shell.sessions.local_pty import start_local_pty

        tree = registry.launcher.session_tree(session_id)
        try:
            return await start_local_pty(tree, argv, work_dir, terminal_env, cols, rows)
        except FileNotFoundError:
            raise ArgumentError(f"command: {argv[0]!r} was not found; allowed: an installed program") from None

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
    from relay_shell.sessions.escapes import spawn_findings  # loaded on first use, as the pins are

    # A program that reads the keyboard in a language the policy cannot read is tier 2 to start (adr/0026).
    subject = replace(subject, session_findings=(*subject.session_findings, *spawn_findings(subject)))
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
        session.passprompt = settings.sessions.passprompt
        result = await session.wait(0, patterns, wait_timeout, SETTLE, settle_from_start=True)
        terminal.exec_trace.snapshot_into(plan)  # what ran until the first output settled
        return read_result(
            session, None, settings.limits.max_output, False, result, bool(patterns), wait_timeout, spawned=True
        )

    plan = Plan(
        subject=subject, execute=execute, notes=notes, timeout=wait_timeout, target=target, session_id=session_id
    )
    return plan


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
    budget = budget_for(settings, max_bytes, notes)

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
        return read_result(session, since, budget, strip_ansi_codes, result, bool(patterns), wait_timeout)

    return Plan(
        subject=Subject(fixed_tier=0), execute=execute, notes=notes, timeout=wait_timeout, session_id=session_id
    )


def prepare_resize(
    settings: Settings, registry: SessionRegistry, owner: str, *, session_id: str, cols: int, rows: int
) -> Plan:
    session = registry.get(owner, session_id)
    check_size(cols, rows)

    async def execute(progress: ProgressFn) -> Execution:
        check_running(session)
        session.last_activity = time.monotonic()
        match_from = session.ring.end
        session.terminal.resize(cols, rows)
        session.cols, session.rows = cols, rows
        if session.transcript is not None:
            session.transcript.resize(cols, rows)
        # The program redraws (a prompt, a screen) a moment later, over SSH a round trip later: return that
        # redraw here, so that it is not taken for the answer to the next session_send.
        result = await session.wait(match_from, [], RESIZE_WAIT, RESIZE_SETTLE, settle_from_start=True)
        return read_result(
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


def signal_argument(signal_name: str) -> tuple[str, int]:
    """session_kill's `signal` (TERM, SIGTERM, term): its name without SIG and its number; ArgumentError if it is
    not one a session may be sent."""
    name = signal_name.strip().upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise ArgumentError(f"signal: {signal_name[:20]!r} is not supported; allowed: {', '.join(SIGNALS)}")
    return name, int(getattr(signal, "SIG" + name))


def prepare_kill(
    settings: Settings, registry: SessionRegistry, owner: str, *, session_id: str, signal_name: str, close: bool
) -> Plan:
    session = registry.get(owner, session_id)
    name, signal_number = signal_argument(signal_name)

    async def execute(progress: ProgressFn) -> Execution:
        session.last_activity = time.monotonic()
        if close:
            await registry.close(session, f"closed by session_kill (SIG{name})", first_signal=signal_number)
            headline = f"[closed {session_id}: {_ending(session)}]"
        else:
            check_running(session)
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


def prepare_list(settings: Settings, registry: SessionRegistry, owner: str, jobs: Sequence[Session] = ()) -> Plan:
    """The caller's sessions, then its jobs (sessions/jobs.py: owned by the principal over HTTP, so `jobs` is
    looked up by the caller's job owner)."""

    async def execute(progress: ProgressFn) -> Execution:
        sessions = [session.describe() for session in [*registry.owned_by(owner), *jobs]]
        lines = [
            f"{item['session_id']}  {item['state']:<7} "
            + (f"{item['cols']}x{item['rows']}" if item["cols"] is not None else str(item["kind"]))
            + f"  age {item['age_s']}s  "
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


def read_result(
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


def check_running(session: Session) -> None:
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


def budget_for(settings: Settings, max_bytes: int | None, notes: list[str]) -> int:
    requested = settings.limits.max_output if max_bytes is None else max_bytes
    value, note = clamp("max_bytes", requested, MIN_OUTPUT, settings.limits.max_output_hard)
    if note:
        notes.append(note)
    return int(value)


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
