"""MCP tools for PTY sessions — and, by the same handle model, for jobs (`j-…`) and kept outputs (`o-…`,
adr/0028): schema + one call into the audited runner."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.plan import Plan
from relay_shell.runner.request import CallRequest
from relay_shell.surface.registry import ToolKind, ToolRegistry
from relay_shell.surface.services import Services
from relay_shell.surface.tools.local import Cwd, Env

if TYPE_CHECKING:
    from relay_shell.sessions.registry import SessionRegistry

# The session plans (sessions/plans.py, send_plan.py, job_plans.py, passwords.py: ~0.2 MiB of code objects) are
# imported by a tool's first call, not at startup: an idle server never runs them (adr/0030, Round 5).

SessionId = Annotated[
    str,
    Field(
        description="the session id from shell_spawn (s-1a2b3c4d5e6f), a job id from a call that yielded "
        "(j-…), or, for session_recv, the output_id of a cut result (o-…)"
    ),
]
Until = Annotated[
    str | list[str] | None,
    Field(
        description="wait until this regex (or any of these regexes) matches the new output, escape codes "
        "removed; ^ and $ match per line"
    ),
]
WaitTimeout = Annotated[
    float, Field(description="seconds to wait for `until` (or for output to go quiet)", allow_inf_nan=False)
]
MaxBytes = Annotated[
    int | None, Field(description="bytes of output to return (head + tail kept); default and maximum set by the server")
]
StripAnsi = Annotated[bool, Field(description="remove terminal escape codes and turn CRLF into LF")]
Cols = Annotated[int, Field(description="terminal width in columns, 10 to 1000")]
Rows = Annotated[int, Field(description="terminal height in rows, 2 to 500")]


async def shell_spawn(
    call: CallRequest,
    services: Services,
    command: Annotated[
        str | list[str] | None,
        Field(description="program to run in a terminal (shell text or argv list); default: bash without rc files"),
    ] = None,
    cols: Cols = 120,
    rows: Rows = 40,
    cwd: Cwd = None,
    env: Env = None,
    until: Until = None,
    timeout: WaitTimeout = 2.0,
) -> Annotated[CallToolResult, results.SessionResult]:
    """Start an interactive program (shell, REPL, TUI, installer, anything that needs a terminal) in a
    PTY session and return its session_id with its first output.

    Use it for work a one-shot shell_exec cannot do: prompts, passwords, REPLs, pagers, curses programs,
    jobs to watch. Then drive it with session_send(until=…), read with session_recv, stop with
    session_kill. Without `until` the call returns once the first output has been quiet for a moment.
    The session is yours alone and is closed when idle too long or when you disconnect.
    """
    from relay_shell.sessions.plans import prepare_spawn

    return await services.runner.run(
        call,
        lambda: prepare_spawn(
            services.settings,
            services.sessions,
            call.owner,
            call.identity.client_id,
            command=command,
            cols=cols,
            rows=rows,
            cwd=cwd,
            env=env,
            until=until,
            timeout=timeout,
        ),
    )


async def session_send(
    session_id: SessionId,
    call: CallRequest,
    services: Services,
    data: Annotated[str, Field(description="text to type; Enter follows unless enter=false")] = "",
    enter: Annotated[bool, Field(description="press Enter after `data`")] = True,
    keys: Annotated[
        list[str] | None,
        Field(
            description="named keys pressed after `data`: ctrl-c, ctrl-d, enter, tab, esc, up, down, left, "
            "right, home, end, pageup, pagedown, backspace, delete, f1-f12, ctrl-a … ctrl-z"
        ),
    ] = None,
    secret_env: Annotated[
        str | None,
        Field(
            description="type the value of this server environment variable (a password) instead of data; "
            "never shown or logged; only while the terminal is at a no-echo prompt"
        ),
    ] = None,
    until: Until = None,
    timeout: WaitTimeout = 10.0,
    max_bytes: MaxBytes = None,
    strip_ansi: StripAnsi = False,
) -> Annotated[CallToolResult, results.SessionResult]:
    """Type into a session and return what it printed, in one call.

    Give `until` a regex for what marks the end of the answer (usually the next prompt, e.g.
    `until="^>>> "` for Python, `until="\\$ $"` for sh): the call returns as soon as it appears, with the
    whole answer. The echo of what you typed is skipped when matching. Without `until` it returns once
    output has been quiet for a moment. The first line reports how the wait ended: `[match N 'text' |
    cursor C]`, `[TIMEOUT …]` (output so far is kept), or `[eof: exit N …]`. Each typed line is checked
    by policy like a command; keys=["ctrl-c"] interrupts the foreground job.

    To a job (j-…) started with stdin_open: `data` goes to its stdin (classified as input to its
    command); keys=["ctrl-d"] closes stdin, keys=["ctrl-c"] interrupts it.
    """

    def prepare() -> Plan:
        from relay_shell.sessions.job_plans import is_job, prepare_job_send
        from relay_shell.sessions.send_plan import prepare_send

        if is_job(session_id):
            return prepare_job_send(
                services.settings,
                services.jobs,
                call.job_owner,
                session_id=session_id,
                data=data,
                enter=enter,
                keys=keys,
                secret_env=secret_env,
                until=until,
                timeout=timeout,
                max_bytes=max_bytes,
                strip_ansi_codes=strip_ansi,
            )
        return prepare_send(
            services.settings,
            services.sessions,
            call.owner,
            session_id=session_id,
            data=data,
            enter=enter,
            keys=keys,
            secret_env=secret_env,
            until=until,
            timeout=timeout,
            max_bytes=max_bytes,
            strip_ansi_codes=strip_ansi,
        )

    from relay_shell.sessions.job_plans import is_job
    from relay_shell.sessions.send_plan import await_terminal_reader

    if not is_job(session_id):
        await await_terminal_reader(services.sessions, call.owner, session_id)
    return await services.runner.run(call, prepare)


async def session_recv(
    session_id: SessionId,
    call: CallRequest,
    services: Services,
    timeout: WaitTimeout = 2.0,
    max_bytes: MaxBytes = None,
    until: Until = None,
    strip_ansi: StripAnsi = False,
    since: Annotated[
        int | None,
        Field(description="cursor to read from (a `cursor` from an earlier result); default: after the last read"),
    ] = None,
) -> Annotated[CallToolResult, results.SessionResult]:
    """Read a session's new output: everything after your last read (or after `since`).

    With `until`, wait (up to `timeout`) until a regex matches the new output; without it, return
    unread output at once, or wait for some to arrive and go quiet. `cursor` in the result is where
    this read ended; pass it as `since` to read again from there if a result was lost. `dropped` counts
    bytes that were overwritten before anyone read them (the ring buffer is bounded).

    A job (j-…): `[RUNNING: job ID after Ns | cursor C]` while it runs; once it ended, the first line is
    the one its call would have returned (`[exit N]`, `[signal …]`, `[TIMEOUT …]`) and `result` holds that
    call's full result. A cut result's output_id (o-…): pages of every byte, `since`=cursor and `max_bytes`
    at a time, until cursor equals `total_bytes`.
    """

    def prepare() -> Plan:
        from relay_shell.sessions.job_plans import is_job, is_output, prepare_job_recv, prepare_output_recv
        from relay_shell.sessions.plans import prepare_recv

        if is_job(session_id):
            return prepare_job_recv(
                services.settings,
                services.jobs,
                call.job_owner,
                session_id=session_id,
                timeout=timeout,
                max_bytes=max_bytes,
                until=until,
                strip_ansi_codes=strip_ansi,
                since=since,
            )
        if is_output(session_id):
            return prepare_output_recv(
                services.settings,
                services.outputs,
                call.job_owner,
                session_id=session_id,
                max_bytes=max_bytes,
                until=until,
                strip_ansi_codes=strip_ansi,
                since=since,
            )
        return prepare_recv(
            services.settings,
            services.sessions,
            call.owner,
            session_id=session_id,
            timeout=timeout,
            max_bytes=max_bytes,
            until=until,
            strip_ansi_codes=strip_ansi,
            since=since,
        )

    return await services.runner.run(call, prepare)


async def session_resize(
    session_id: SessionId, cols: Cols, rows: Rows, call: CallRequest, services: Services
) -> Annotated[CallToolResult, results.SessionResult]:
    """Change a session's terminal size; the program gets SIGWINCH and redraws. Returns the redraw (output
    until it goes quiet, up to a second), so the next session_send sees only its own answer."""
    from relay_shell.sessions.job_plans import is_job, is_output, prepare_not_a_terminal
    from relay_shell.sessions.plans import prepare_resize

    if is_job(session_id) or is_output(session_id):
        return await services.runner.run(call, lambda: prepare_not_a_terminal(session_id))
    return await services.runner.run(
        call,
        lambda: prepare_resize(
            services.settings, services.sessions, call.owner, session_id=session_id, cols=cols, rows=rows
        ),
    )


async def session_kill(
    session_id: SessionId,
    call: CallRequest,
    services: Services,
    signal: Annotated[
        str, Field(description="TERM, INT, HUP, KILL, QUIT, USR1, USR2, STOP, CONT, TSTP, WINCH or ALRM")
    ] = "TERM",
    close: Annotated[
        bool,
        Field(
            description="true: signal every process of the session, escalate to KILL after a grace period and "
            "remove it; false: only signal the foreground job and keep the session"
        ),
    ] = True,
) -> Annotated[CallToolResult, results.SessionResult]:
    """Signal or close a session. close=true (default) ends every process in it and removes it;
    close=false delivers `signal` to the foreground job only (like a key such as Ctrl-C would).
    A job (j-…): close=true ends its command and everything it started; its result stays readable."""
    from relay_shell.sessions.job_plans import is_job, prepare_job_kill
    from relay_shell.sessions.plans import prepare_kill

    if is_job(session_id):
        return await services.runner.run(
            call,
            lambda: prepare_job_kill(
                services.settings, services.jobs, call.job_owner, session_id=session_id, signal_name=signal, close=close
            ),
        )
    return await services.runner.run(
        call,
        lambda: prepare_kill(
            services.settings,
            services.sessions,
            call.owner,
            session_id=session_id,
            signal_name=signal,
            close=close,
        ),
    )


async def session_list(call: CallRequest, services: Services) -> Annotated[CallToolResult, results.SessionListResult]:
    """List your sessions and jobs: id, kind, command, size, age, idle time, cursor, unread and dropped bytes,
    state and exit status."""
    from relay_shell.sessions.plans import prepare_list

    return await services.runner.run(
        call,
        lambda: prepare_list(
            services.settings, services.sessions, call.owner, jobs=services.jobs.owned_by(call.job_owner)
        ),
    )


DRIVES = ToolKind(read_only=False, destructive=True, idempotent=False, open_world=True)
OBSERVES = ToolKind(read_only=True, destructive=False, idempotent=False, open_world=False)
RESIZES = ToolKind(read_only=False, destructive=False, idempotent=True, open_world=False)
SIGNALS = ToolKind(read_only=False, destructive=True, idempotent=False, open_world=False)
LISTS = ToolKind(read_only=True, destructive=False, idempotent=True, open_world=False)


def withheld_at_password_prompt(
    sessions: SessionRegistry, arguments: dict[str, Any], owner: str | None
) -> dict[str, Any]:
    """session_send's record filter (sessions/passwords.py), imported by its first use."""
    from relay_shell.sessions.passwords import withhold_at_password_prompt

    return withhold_at_password_prompt(sessions, arguments, owner)


def register(tools: ToolRegistry, sessions: SessionRegistry) -> None:
    """`sessions`: what session_send's record filter reads (input typed at a password prompt is withheld from
    the audit record, valid call or not)."""
    tools.add(shell_spawn, "Start a terminal session", DRIVES)
    tools.add(session_send, "Type into a session", DRIVES, record_filter=partial(withheld_at_password_prompt, sessions))
    tools.add(session_recv, "Read session output", OBSERVES)
    tools.add(session_resize, "Resize a session", RESIZES)
    tools.add(session_kill, "Signal or close a session", SIGNALS)
    tools.add(session_list, "List sessions", LISTS)
