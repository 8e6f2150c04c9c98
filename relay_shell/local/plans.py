"""shell_exec and shell_script: validate and clamp the arguments, then plan a bounded local process, which runs to
its end or, still running at the call's yield_after, on as a job (sessions/jobs.py, adr/0028)."""

from __future__ import annotations

import shlex

from relay_shell.arguments import call_limits, check_cwd, check_no_nul, child_env
from relay_shell.errors import ArgumentError
from relay_shell.launch import Launcher
from relay_shell.local.process import LocalCommand
from relay_shell.outputs import keep_if_cut
from relay_shell.plan import Execution, Plan, ProgressFn, Subject, command_execution
from relay_shell.sessions.jobs import JobStart, run_or_yield
from relay_shell.settings.model import Settings

INTERPRETERS = {
    "bash": ["bash", "-s"],
    "sh": ["sh", "-s"],
    "python": ["python3", "-"],
}
STRICT_PREAMBLE = {"bash": "set -euo pipefail\n", "sh": "set -eu\n"}


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
    launcher: Launcher,
    jobs: JobStart,
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
        directories=(work_dir,) if work_dir else (),
    )

    shown = command if isinstance(command, str) else shlex.join(argv)
    return _process_plan(
        settings,
        launcher,
        jobs,
        subject,
        shown,
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
    launcher: Launcher,
    jobs: JobStart,
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
    subject = Subject(
        script=script,
        interpreter=interpreter,
        env=tuple((env or {}).items()),
        directories=(work_dir,) if work_dir else (),
    )

    stdin_bytes = body.encode("utf-8", errors="surrogateescape")
    argv = INTERPRETERS[interpreter]
    return _process_plan(
        settings,
        launcher,
        jobs,
        subject,
        f"{interpreter} script: {script.strip().splitlines()[0][:200]}",
        notes,
        argv,
        work_dir,
        environment,
        stdin_bytes,
        True,
        timeout_value,
        max_output_value,
    )


def _process_plan(
    settings: Settings,
    launcher: Launcher,
    jobs: JobStart,
    subject: Subject,
    shown: str,  # what session_list shows of a job (redacted when it becomes one)
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
        # Named after the call (plan.call_id, set by the runner): its processes lead to the call's audit records.
        tree = launcher.call_tree(plan.call_id)
        command = LocalCommand(tree, jobs.outputs, budget, merge_stderr, timeout, settings.limits.kill_grace, progress)
        try:
            await command.start(argv, cwd, env, stdin, jobs.stdin_open)
        except BaseException:
            tree.trace.finish_into(plan)  # what the tree executed (a refused exec), into the end record
            raise

        async def final() -> Execution:
            outcome = command.finish()
            traced.append(True)
            tree.trace.finish_into(plan)  # what the tree executed, into the end record
            fields = keep_if_cut(jobs.outputs, jobs.owner, command.stdout, plan)
            if command.stderr is not None:
                command.stderr.keeper.release()
            return command_execution(outcome, fields)

        traced: list[bool] = []
        try:
            return await run_or_yield(jobs, command, plan, "job", shown, final)
        except BaseException:
            command.finish()  # cancelled: wait() ended the unit; the leader is reaped, the output's room given back
            command.stdout.keeper.release()
            if command.stderr is not None:
                command.stderr.keeper.release()
            if not traced:
                tree.trace.finish_into(plan)
            raise

    plan = Plan(subject=subject, execute=execute, notes=notes, timeout=timeout)
    return plan
