"""MCP tools for diagnostics: schema + one call into the audited runner."""

from __future__ import annotations

from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.plan import Plan
from relay_shell.runner.request import CallRequest
from relay_shell.surface.registry import ToolKind, ToolRegistry
from relay_shell.surface.services import Services


async def server_info(call: CallRequest, services: Services) -> Annotated[CallToolResult, results.ServerInfoResult]:
    """Describe this server: version, transport, policy mode, effective limits (default and maximum
    output, maximum timeout), audit log path and health, terminal sessions (open, limits), metrics
    listener, process containment (cgroup or subreaper and why, background jobs still running), how readonly
    is enforced (`enforcement`: by the kernel with Landlock, or classifier-only and why), the team's
    runbooks (loaded, failed to load), this session's briefing gate, your jobs (running, ended, the bound,
    yield_after) and the store of cut outputs (bytes held, bound). Call it once before work to learn what
    the policy will admit."""
    return await services.runner.run(call, lambda: server_info_plan(call, services))


async def audit_tail(
    call: CallRequest,
    services: Services,
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
    from relay_shell.diagnostics import prepare_audit_tail  # at the first call (with audit/tail.py), not at startup

    audit_log = services.runner.recorder.audit_log
    return await services.runner.run(
        call, lambda: prepare_audit_tail(services.settings, audit_log, tool, tier, denied, lines, call_id)
    )


def server_info_plan(call: CallRequest, services: Services) -> Plan:
    """server_info's plan, from what the server's parts say of themselves."""
    from relay_shell.diagnostics import prepare_server_info

    recorder = services.runner.recorder
    described = {
        **services.runbooks.state(services.runner.gate, call.owner),  # the runbooks, this session's briefing gate
        "exec_trace": services.launcher.trace_status(),
        "enforcement": services.launcher.confinement.status(),  # readonly: landlock ABI N, classifier-only, off
        "jobs": jobs_state(services, call.job_owner),
    }
    return prepare_server_info(
        services.settings,
        recorder.audit_log,
        services.metrics_port,
        len(services.sessions.sessions),
        services.ssh.connections(),
        recorder.audit_counts(),
        services.launcher.containment.status(),
        described,
        services.offhost.describe() if services.offhost is not None else None,
    )


def jobs_state(services: Services, owner: str) -> dict[str, Any]:
    """This client's jobs (adr/0028), the server's bound on them, and the store of cut results' full outputs."""
    mine = services.jobs.owned_by(owner)
    running = sum(1 for job in mine if job.state == "running")
    settings = services.settings.jobs
    outputs = services.outputs.status()
    return {
        "running": running,
        "ended": len(mine) - running,  # ended, their results still readable
        "max": services.jobs.max_jobs,  # for the whole server, running or ended
        "yield_after_seconds": services.jobs.default_yield,
        "retention_seconds": settings.job_retention,
        "outputs": {
            "kept": outputs["outputs"],
            "bytes": outputs["stored_bytes"] + outputs["pending_bytes"],  # kept, and held by running commands
            "max_bytes": services.outputs.limit,
            "retention_seconds": services.outputs.retention,
        },
    }


INSPECTS = ToolKind(read_only=True, destructive=False, idempotent=True, open_world=False)


def register(tools: ToolRegistry) -> None:
    tools.add(server_info, "Server info", INSPECTS)
    tools.add(audit_tail, "Recent audit records", INSPECTS)
