"""MCP tools for diagnostics: schema + one call into the audited runner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.confirm.tool import prepare_confirm, recorded_confirm_arguments
from relay_shell.diagnostics import prepare_audit_tail, prepare_server_info
from relay_shell.identity import owner_of
from relay_shell.runner import Runner
from relay_shell.surface.build import make_tool


def diag_tools(
    runner: Runner,
    metrics_port: Callable[[], int | None],
    open_sessions: Callable[[], int],
    ssh_connections: Callable[[], int],
    containment: Callable[[], dict[str, Any]] | None = None,
    described: Callable[[str], dict[str, Any]] | None = None,
    audit_offhost: Callable[[], dict[str, Any]] | None = None,
) -> list[Tool]:
    """`described(owner)`: further server_info sections for the calling client (runbooks and its gate)."""
    settings = runner.settings
    audit_log = runner.audit_log

    async def server_info(ctx: Context) -> Annotated[CallToolResult, results.ServerInfoResult]:
        """Describe this server: version, transport, policy mode, effective limits (default and maximum
        output, maximum timeout), audit log path and health, terminal sessions (open, limits), metrics
        listener, process containment (cgroup or subreaper and why, background jobs still running), the team's
        runbooks (loaded, failed to load) and this session's briefing gate. Call it once before work to learn what
        the policy will admit."""
        return await runner.run(
            ctx.request_context,
            "server_info",
            lambda: prepare_server_info(
                settings,
                audit_log,
                metrics_port(),
                open_sessions(),
                ssh_connections(),
                runner.audit_counts(),
                containment() if containment is not None else None,
                described(owner_of(ctx.request_context)) if described is not None else None,
                audit_offhost() if audit_offhost is not None else None,
            ),
        )

    async def audit_tail(
        ctx: Context,
        tool: Annotated[str | None, Field(description="only records of this tool, e.g. shell_exec")] = None,
        tier: Annotated[int | None, Field(description="only records of this tier, 0 to 3")] = None,
        denied: Annotated[bool | None, Field(description="true: only denied calls; false: only admitted")] = None,
        lines: Annotated[int, Field(description="how many records, 1 to 1000")] = 50,
        call_id: Annotated[
            str | None, Field(description="only the records of this call (its start and end), e.g. 3f9a1b2c4d5e-17")
        ] = None,
    ) -> Annotated[CallToolResult, results.AuditTailResult]:
        """Return the most recent audit records (oldest first), optionally filtered. Records hold redacted
        arguments, outcome, tier and digests of output, never the output itself. A call that runs anything has
        two records with the same `call_id`: `phase: "start"` (written before it ran: tier, decision, arguments,
        target) and `phase: "end"` (outcome, exit status, digests, duration); a start without an end is a call
        still running, or one the server did not finish."""
        return await runner.run(
            ctx.request_context,
            "audit_tail",
            lambda: prepare_audit_tail(settings, audit_log, tool, tier, denied, lines, call_id),
        )

    async def operation_confirm(
        token: Annotated[str, Field(description="the token of a [CONFIRM REQUIRED …] result, copied exactly")],
        ctx: Context,
    ) -> Annotated[CallToolResult, results.ConfirmResult]:
        """Confirm one irreversible (tier 3) call that returned `[CONFIRM REQUIRED tier 3: …]`, after the human
        explicitly agreed to it. Never call this on your own judgement: ask the human first, showing what the
        call does and where. Then repeat the identical call (same tool, arguments, directory, host) before the
        token expires; it runs exactly once. The token works only for that call, from this client, once. The
        result says what the token now allows and how many seconds are left."""
        return await runner.run(
            ctx.request_context,
            "operation_confirm",
            lambda: prepare_confirm(
                runner.confirmations, settings.policy.confirm_tier3, owner_of(ctx.request_context), token
            ),
        )

    # The token is a bearer credential for one irreversible call: the record keeps its digest only.
    runner.argument_filters["operation_confirm"] = recorded_confirm_arguments

    inspects = {"read_only": True, "destructive": False, "idempotent": True, "open_world": False}
    arms_a_token = {"read_only": False, "destructive": False, "idempotent": False, "open_world": False}
    return [
        make_tool(server_info, "Server info", **inspects),
        make_tool(audit_tail, "Recent audit records", **inspects),
        make_tool(operation_confirm, "Confirm a tier-3 call", **arms_a_token),
    ]
