"""MCP tools for one-shot local execution: schema + one call into the audited runner."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.launch import Launcher
from relay_shell.local.plans import prepare_exec, prepare_script
from relay_shell.runner import Runner
from relay_shell.surface.build import make_tool

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


def local_tools(runner: Runner, launcher: Launcher) -> list[Tool]:
    settings = runner.settings

    async def shell_exec(
        command: Annotated[
            str | list[str],
            Field(
                description="the command: shell text for /bin/sh -c, or with use_shell=false an argv (list or string)"
            ),
        ],
        ctx: Context,
        timeout: Timeout = 60,
        max_output: MaxOutput = None,
        cwd: Cwd = None,
        stdin: Annotated[str | None, Field(description="text written to stdin, then EOF; default: /dev/null")] = None,
        env: Env = None,
        merge_stderr: Annotated[bool, Field(description="interleave stderr into output (false: separate)")] = True,
        use_shell: Annotated[bool, Field(description="run via /bin/sh -c (false: exec argv directly)")] = True,
    ) -> Annotated[CallToolResult, results.ExecResult]:
        """Run one command on this host and return its exit status and output.

        Use for single commands and pipelines; use shell_script for multi-step logic. The command gets no
        terminal and an empty stdin unless `stdin` is given; pagers and prompts are disabled. On timeout
        the whole process group is killed and the partial output is returned after `[TIMEOUT after Ns]`.
        The first line of the result is `[exit N]`, `[signal NAME]`, `[TIMEOUT …]`, `[DENIED …]` or
        `[ERROR: …]`; long output is cut to head + tail with a `[TRUNCATED: …]` line.
        """
        return await runner.run(
            ctx.request_context,
            "shell_exec",
            lambda: prepare_exec(
                settings,
                command=command,
                timeout=timeout,
                max_output=max_output,
                cwd=cwd,
                stdin=stdin,
                env=env,
                merge_stderr=merge_stderr,
                use_shell=use_shell,
                launcher=launcher,
            ),
            ctx.report_progress,
        )

    async def shell_script(
        script: Annotated[str, Field(description="the script text, fed to the interpreter on stdin")],
        ctx: Context,
        interpreter: Annotated[str, Field(description="bash, sh or python")] = "bash",
        strict: Annotated[bool, Field(description="for bash/sh: prepend `set -euo pipefail` (sh: `set -eu`)")] = True,
        timeout: Timeout = 120,
        max_output: MaxOutput = None,
        cwd: Cwd = None,
        env: Env = None,
    ) -> Annotated[CallToolResult, results.ExecResult]:
        """Run a multi-line script with bash (default), sh or python and return its exit status and output.

        Prefer this over long `&&` chains: loops, conditionals, heredocs and functions work as written, and
        strict mode stops at the first failing step. stderr is merged into the output. Same result grammar
        as shell_exec.
        """
        return await runner.run(
            ctx.request_context,
            "shell_script",
            lambda: prepare_script(
                settings,
                script=script,
                interpreter=interpreter,
                strict=strict,
                timeout=timeout,
                max_output=max_output,
                cwd=cwd,
                env=env,
                launcher=launcher,
            ),
            ctx.report_progress,
        )

    # Arbitrary commands can destroy data and reach the network; running one twice is not idempotent.
    runs_commands = {"read_only": False, "destructive": True, "idempotent": False, "open_world": True}
    return [
        make_tool(shell_exec, "Run a shell command", **runs_commands),
        make_tool(shell_script, "Run a script", **runs_commands),
    ]
