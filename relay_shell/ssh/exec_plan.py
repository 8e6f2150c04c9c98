"""ssh_exec and ssh_spawn: validate the arguments, resolve the target into a full identity, and plan one remote
command (which runs on as a job when it outlives the call's yield_after, adr/0028) or one remote PTY session.
Policy sees the target in all its spellings (`Route`).
"""

from __future__ import annotations

import time
from typing import Any

import asyncssh

from relay_shell.arguments import call_limits, check_no_nul, command_text
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.outputs import StreamSink, keep_if_cut
from relay_shell.plan import Execution, Plan, ProgressFn, command_execution
from relay_shell.sessions.expect import compile_until
from relay_shell.sessions.jobs import JobStart, run_or_yield
from relay_shell.sessions.plans import TERM, check_size, spawn_plan, wait_timeout_for
from relay_shell.sessions.registry import SessionRegistry
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.remote_exec import RemoteCommand, RemoteOutcome, open_channel
from relay_shell.ssh.state import Ssh
from relay_shell.ssh.target import Route, host_subject, target_record
from relay_shell.ssh.terminal import SshTerminal


def prepare_exec(
    ssh: Ssh,
    *,
    host: str,
    command: str,
    timeout: float,
    max_output: int | None,
    stdin: str | None,
    merge_stderr: bool,
    connection: ConnectionArgs,
    jobs: JobStart,
) -> Plan:
    notes: list[str] = []
    command = command_text(command)
    route = ssh.route(host, connection)
    timeout_value, budget = call_limits(ssh.settings, timeout, max_output, notes)
    stdin_bytes = None
    if stdin is not None:
        check_no_nul("stdin", stdin)
        stdin_bytes = stdin.encode("utf-8", errors="surrogateescape")
    target = target_record(route)

    async def execute(progress: ProgressFn) -> Execution:
        remote = RemoteCommand(ssh.pool, route, jobs.outputs, budget, merge_stderr, progress)
        remote.start(command, stdin_bytes, jobs.stdin_open, timeout_value)

        async def final() -> Execution:
            try:
                outcome = await remote.outcome()
            finally:
                release(remote.stderr)
            _note_trust(outcome, route, target, notes)
            fields = {"host": route.target.name, "host_key": outcome.host_key}
            fields.update(keep_if_cut(jobs.outputs, jobs.owner, remote.stdout, plan))
            return command_execution(outcome, fields)

        def running_fields() -> dict[str, Any]:
            return {"host": route.target.name, "host_key": remote.host_key}

        shown = f"{route.target.describe()}: {command}"
        try:
            return await run_or_yield(jobs, remote, plan, "ssh job", shown, final, running_fields)
        except BaseException:  # connection failed, cancelled: nothing of its output is kept
            release(remote.stdout)
            release(remote.stderr)
            raise

    plan = Plan(
        subject=host_subject(route, connection, command=command, stdin=stdin),
        execute=execute,
        notes=notes,
        timeout=timeout_value,
        target=target,
    )
    return plan


def release(sink: StreamSink | None) -> None:
    if sink is not None:
        sink.keeper.release()


def _note_trust(outcome: RemoteOutcome, route: Route, target: dict[str, Any], notes: list[str]) -> None:
    target["host_key"] = outcome.host_key
    if outcome.accepted_new_key:
        notes.append(
            f"host key {outcome.host_key} of {route.target.address}:{route.target.port} was not known and is now "
            "trusted (accept-new); it was added to known_hosts"
        )


def prepare_spawn(
    ssh: Ssh,
    registry: SessionRegistry,
    owner: str,
    client_id: str,
    *,
    host: str,
    command: str | None,
    cols: int,
    rows: int,
    env: dict[str, str] | None,
    until: str | list[str] | None,
    timeout: float,
    connection: ConnectionArgs,
) -> Plan:
    notes: list[str] = []
    if command is not None:
        command = command_text(command)
    route = ssh.route(host, connection)
    check_size(cols, rows)
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(ssh.settings, timeout, notes)
    for name, value in (env or {}).items():
        if not name or "=" in name or "\x00" in name:
            raise ArgumentError(f"env: {name!r} is not a valid variable name; allowed: a non-empty name without '='")
        check_no_nul(f"env.{name}", value)
    target = target_record(route)
    shown = f"{route.target.describe()}: {command or 'login shell'}"

    async def open_terminal(session_id: str) -> SshTerminal:
        connect_timeout = ssh.settings.ssh.ssh_connect_timeout * (1 + len(route.jumps))
        try:
            pooled = await ssh.pool.acquire(route, connect_timeout)
        except TimeoutError:
            raise ToolError("ConnectTimeout", f"{route.target.describe()}: no connection in time") from None
        terminal = SshTerminal(ssh.pool, pooled, route.target.describe())
        try:
            # sshd passes only the variables its AcceptEnv allows; TERM travels with the terminal request.
            deadline = time.monotonic() + ssh.settings.ssh.ssh_connect_timeout
            await open_channel(ssh.pool, pooled, deadline, lambda: terminal.open(command, TERM, cols, rows, env or {}))
        except BaseException as exc:
            ssh.pool.release(pooled)
            if isinstance(exc, asyncssh.ChannelOpenError):
                raise ToolError("ChannelRefused", f"{route.target.describe()}: {exc.reason}") from None
            raise
        target["host_key"] = pooled.host_key
        if pooled.decision.announce_new_key():
            notes.append(f"host key {pooled.host_key} was not known and is now trusted (accept-new)")
        return terminal

    plan = spawn_plan(
        ssh.settings,
        registry,
        owner,
        client_id,
        host_subject(route, connection, command=command, env=tuple((env or {}).items())),
        shown,
        cols,
        rows,
        patterns,
        wait_timeout,
        notes,
        open_terminal,
        target,
    )
    return plan
