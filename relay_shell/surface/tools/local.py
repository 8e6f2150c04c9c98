"""MCP tools for one-shot local execution: schema + one call into the audited runner."""

from __future__ import annotations

from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.local.plans import prepare_exec, prepare_script
from relay_shell.runner.request import CallRequest
from relay_shell.surface.registry import ToolKind, ToolRegistry
from relay_shell.surface.services import Services

Timeout = Annotated[
    float,
    Field(description="seconds before the process group is killed; clamped to the server's range", allow_inf_nan=False),
]
MaxOutput = Annotated[
    int | None,
    Field(description="bytes of output to return (head + tail kept); default and upper bound set by the server"),
]
Cwd = Annotated[str | None, Field(description="working directory (must exist); default: the server's")]
Env = Annotated[
    dict[str, str | None] | None,
    Field(description="environment overlay: {NAME: value}; a null value unsets NAME"),
]
YieldAfter = Annotated[
    float | None,
    Field(
        description="seconds after which the call returns `[RUNNING: job ID …]` with the output so far while the "
        "command runs on (its timeout still bounds it); default from the server (45); 0 = never, wait for the end",
        allow_inf_nan=False,
    ),
]


async def shell_exec(
    command: Annotated[
        str | list[str],
        Field(description="the command: shell text for /bin/sh -c, or with use_shell=false an argv (list or string)"),
    ],
    call: CallRequest,
    services: Services,
    timeout: Timeout = 60,
    max_output: MaxOutput = None,
    cwd: Cwd = None,
    stdin: Annotated[str | None, Field(description="text written to stdin, then EOF; default: /dev/null")] = None,
    env: Env = None,
    merge_stderr: Annotated[bool, Field(description="interleave stderr into output (false: separate)")] = True,
    use_shell: Annotated[bool, Field(description="run via /bin/sh -c (false: exec argv directly)")] = True,
    yield_after: YieldAfter = None,
    stdin_open: Annotated[
        bool, Field(description="keep stdin open (after `stdin`) for input sent to the job with session_send")
    ] = False,
) -> Annotated[CallToolResult, results.ExecResult]:
    """Run one command on this host and return its exit status and output.

    Use for single commands and pipelines; use shell_script for multi-step logic. The command gets no
    terminal and an empty stdin unless `stdin` is given; pagers and prompts are disabled. On timeout
    the whole process group is killed and the partial output is returned after `[TIMEOUT after Ns]`.
    The first line of the result is `[exit N]`, `[signal NAME]`, `[TIMEOUT …]`, `[DENIED …]` or
    `[ERROR: …]`; long output is cut to head + tail with a `[TRUNCATED: …]` line, and a note names the
    output id that pages all of it (session_recv(session_id=OUTPUT_ID, since=0, max_bytes=…)).

    Long work (a build, an upgrade): set `timeout` for its whole life; if it still runs after
    `yield_after` seconds the call returns `[RUNNING: job ID after Ns | cursor C]` with the output so far.
    Then wait with session_recv(session_id=ID, until=…, timeout=≤45) — it returns new output, and once
    the job ended the same `[exit N]` line and full result this call would have had; session_kill ends it.
    """
    return await services.runner.run(
        call,
        lambda: prepare_exec(
            services.settings,
            command=command,
            timeout=timeout,
            max_output=max_output,
            cwd=cwd,
            stdin=stdin,
            env=env,
            merge_stderr=merge_stderr,
            use_shell=use_shell,
            launcher=services.launcher,
            jobs=services.jobs.start(call.job_owner, call.identity.client_id, yield_after, stdin_open),
        ),
        call.report_progress,
    )


async def shell_script(
    script: Annotated[str, Field(description="the script text, fed to the interpreter on stdin")],
    call: CallRequest,
    services: Services,
    interpreter: Annotated[str, Field(description="bash, sh or python")] = "bash",
    strict: Annotated[bool, Field(description="for bash/sh: prepend `set -euo pipefail` (sh: `set -eu`)")] = True,
    timeout: Timeout = 120,
    max_output: MaxOutput = None,
    cwd: Cwd = None,
    env: Env = None,
    yield_after: YieldAfter = None,
) -> Annotated[CallToolResult, results.ExecResult]:
    """Run a multi-line script with bash (default), sh or python and return its exit status and output.

    Prefer this over long `&&` chains: loops, conditionals, heredocs and functions work as written, and
    strict mode stops at the first failing step. stderr is merged into the output. Same result grammar
    as shell_exec, `[RUNNING: job …]` included: a script still running after `yield_after` runs on as a
    job, read with session_recv(session_id=ID, until=…).
    """
    return await services.runner.run(
        call,
        lambda: prepare_script(
            services.settings,
            script=script,
            interpreter=interpreter,
            strict=strict,
            timeout=timeout,
            max_output=max_output,
            cwd=cwd,
            env=env,
            launcher=services.launcher,
            jobs=services.jobs.start(call.job_owner, call.identity.client_id, yield_after),
        ),
        call.report_progress,
    )


# Arbitrary commands can destroy data and reach the network; running one twice is not idempotent.
RUNS_COMMANDS = ToolKind(read_only=False, destructive=True, idempotent=False, open_world=True)


def register(tools: ToolRegistry) -> None:
    tools.add(shell_exec, "Run a shell command", RUNS_COMMANDS)
    tools.add(shell_script, "Run a script", RUNS_COMMANDS)
