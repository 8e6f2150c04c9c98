"""shell_exec and shell_script: validate and clamp the arguments, then plan a bounded local process."""

from __future__ import annotations

import functools
import os
import shlex
from typing import Any, Protocol

from relay_shell.capture import CapturedText
from relay_shell.config import Settings, clamp
from relay_shell.local.process import run_process
from relay_shell.plan import ArgumentError, Execution, Plan, ProgressFn
from relay_shell.policy.classify import Subject
from relay_shell.results import Outcome

# Commands run without a terminal: make the usual interactive prompts and pagers fail fast or stay out
# of the way. The caller's `env` overrides any of these.
NONINTERACTIVE_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "SYSTEMD_PAGER": "",
    "MANPAGER": "cat",
    "DEBIAN_FRONTEND": "noninteractive",
    "GIT_TERMINAL_PROMPT": "0",
}

INTERPRETERS = {
    "bash": ["bash", "-s"],
    "sh": ["sh", "-s"],
    "python": ["python3", "-"],
}
STRICT_PREAMBLE = {"bash": "set -euo pipefail\n", "sh": "set -eu\n"}

MIN_TIMEOUT = 0.1
MIN_OUTPUT = 256


def prepare_exec(
    settings: Settings,
    *,
    command: str | list[str],
    timeout: float,
    max_output: int | None,
    cwd: str | None,
    stdin: str | None,
    env: dict[str, str | None] | None,
    merge_stderr: bool,
    use_shell: bool,
) -> Plan:
    notes: list[str] = []
    if isinstance(command, list):
        if use_shell:
            raise ArgumentError(
                "command: a list is an argv and needs use_shell=false; allowed: a string for the shell, "
                "or a list of strings with use_shell=false"
            )
        argv = list(command)
    elif use_shell:
        argv = ["/bin/sh", "-c", command]
    else:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ArgumentError(f"command: cannot split into argv ({exc}); allowed: shell-style quoting") from None
    if (isinstance(command, str) and not command.strip()) or not argv or not argv[0]:
        raise ArgumentError("command: is empty; allowed: a non-empty command")
    for item in argv:
        check_no_nul("command", item)
    timeout_value, max_output_value = call_limits(settings, timeout, max_output, notes)
    work_dir = check_cwd(cwd)
    environment = child_env(env)
    stdin_bytes = None
    if stdin is not None:
        check_no_nul("stdin", stdin)
        stdin_bytes = stdin.encode("utf-8", errors="surrogateescape")
    subject = Subject(
        command=command if isinstance(command, str) and use_shell else None,
        argv=None if isinstance(command, str) and use_shell else tuple(argv),
        stdin=stdin,
        env=tuple((env or {}).items()),
    )

    return _process_plan(
        settings,
        subject,
        notes,
        argv,
        work_dir,
        environment,
        stdin_bytes,
        merge_stderr,
        timeout_value,
        max_output_value,
    )


def prepare_script(
    settings: Settings,
    *,
    script: str,
    interpreter: str,
    strict: bool,
    timeout: float,
    max_output: int | None,
    cwd: str | None,
    env: dict[str, str | None] | None,
) -> Plan:
    notes: list[str] = []
    if interpreter not in INTERPRETERS:
        raise ArgumentError(f"interpreter: {interpreter!r} is not supported; allowed: {', '.join(INTERPRETERS)}")
    if not script.strip():
        raise ArgumentError("script: is empty; allowed: a non-empty script")
    check_no_nul("script", script)
    timeout_value, max_output_value = call_limits(settings, timeout, max_output, notes)
    work_dir = check_cwd(cwd)
    environment = child_env(env)
    # The script travels on stdin, so it never shows in `ps` and has no argv length limit.
    body = (STRICT_PREAMBLE.get(interpreter, "") if strict else "") + script
    subject = Subject(script=script, interpreter=interpreter, env=tuple((env or {}).items()))

    stdin_bytes = body.encode("utf-8", errors="surrogateescape")
    argv = INTERPRETERS[interpreter]
    return _process_plan(
        settings, subject, notes, argv, work_dir, environment, stdin_bytes, True, timeout_value, max_output_value
    )


def _process_plan(
    settings: Settings,
    subject: Subject,
    notes: list[str],
    argv: list[str],
    cwd: str | None,
    env: dict[str, str] | None,
    stdin: bytes | None,
    merge_stderr: bool,
    timeout: float,
    budget: int,
) -> Plan:
    async def execute(progress: ProgressFn) -> Execution:
        outcome = await run_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            merge_stderr=merge_stderr,
            timeout=timeout,
            budget=budget,
            kill_grace=settings.kill_grace,
            progress=progress,
        )
        return command_execution(outcome)

    return Plan(subject=subject, execute=execute, notes=notes, timeout=timeout)


def call_limits(settings: Settings, timeout: float, max_output: int | None, notes: list[str]) -> tuple[float, int]:
    """The call's timeout and output budget, clamped to the configured ranges (a note says when)."""
    timeout_value, note = clamp("timeout", timeout, MIN_TIMEOUT, settings.max_timeout)
    if note:
        notes.append(note)
    requested_output = settings.max_output if max_output is None else max_output
    output_value, note = clamp("max_output", requested_output, MIN_OUTPUT, settings.max_output_hard)
    if note:
        notes.append(note)
    return timeout_value, int(output_value)


def check_cwd(cwd: str | None) -> str | None:
    if cwd is None:
        return None
    check_no_nul("cwd", cwd)
    path = os.path.expanduser(cwd)
    if not os.path.exists(path):
        raise ArgumentError(f"cwd: {cwd!r} does not exist; allowed: an existing directory")
    if not os.path.isdir(path):
        raise ArgumentError(f"cwd: {cwd!r} is not a directory; allowed: an existing directory")
    if not os.access(path, os.X_OK):
        raise ArgumentError(f"cwd: {cwd!r} is not accessible (permission denied); allowed: a directory you can enter")
    return path


@functools.cache
def _install_noninteractive_defaults() -> None:
    """Put the defaults into the server's own environment once, so a call without an overlay passes env=None
    and the child inherits it: re-encoding ~100 variables per spawn costs more than spawning `true`. The
    server itself never runs a pager or a prompt, so this changes nothing for it."""
    os.environ.update(NONINTERACTIVE_ENV)


def child_env(overlay: dict[str, str | None] | None) -> dict[str, str] | None:
    _install_noninteractive_defaults()
    if not overlay:
        return None
    environment = dict(os.environ)
    for name, value in (overlay or {}).items():
        if not name or "=" in name or "\x00" in name:
            raise ArgumentError(f"env: {name!r} is not a valid variable name; allowed: a non-empty name without '='")
        if value is None:
            environment.pop(name, None)
            continue
        check_no_nul(f"env.{name}", value)
        environment[name] = value
    return environment


def check_no_nul(argument: str, value: str) -> None:
    if "\x00" in value:
        raise ArgumentError(
            f"{argument}: contains a NUL byte; allowed: text without NUL (NUL cannot pass through exec)"
        )


class CommandOutcome(Protocol):
    """How a command ended, locally (ProcessOutcome) or over SSH (RemoteOutcome)."""

    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: CapturedText
    stderr: CapturedText | None


def command_execution(outcome: CommandOutcome, fields: dict[str, Any] | None = None) -> Execution:
    """The result of a one-shot command: timeout, ok or exit_nonzero, with separate stderr when kept apart."""
    fields = dict(fields or {})
    if outcome.stderr is not None:
        fields["stderr"] = outcome.stderr.text
        fields["stderr_bytes"] = outcome.stderr.produced_bytes
    status: Outcome
    if outcome.timed_out:
        status = "timeout"
    elif outcome.exit_code == 0:
        status = "ok"
    else:
        status = "exit_nonzero"
    return Execution(
        status=status,
        output=outcome.stdout,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        stderr=outcome.stderr,
        fields=fields,
    )
