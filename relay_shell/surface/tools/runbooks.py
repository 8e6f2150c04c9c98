"""MCP tools for the team's runbooks: schema + one call into the audited runner (plans in runbooks/plans.py,
reached through RunbookAccess, which loads runbooks/ on first use)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.arguments import DEFAULT_BRIEFING_BYTES, MAX_KEYWORDS, MAX_QUERY_CHARS
from relay_shell.runner.request import CallRequest
from relay_shell.surface.registry import ToolKind, ToolRegistry
from relay_shell.surface.services import Services


async def runbook_search(
    call: CallRequest,
    services: Services,
    tags: Annotated[
        list[str] | None,
        Field(
            description=f"keywords of the task: systems, services, hosts, actions (1 to {MAX_KEYWORDS}), "
            'e.g. ["postgres", "failover", "db1"]',
            max_length=MAX_KEYWORDS,
        ),
    ] = None,
    query: Annotated[
        str | None,
        Field(description="or the task in words; its words are the keywords", max_length=MAX_QUERY_CHARS),
    ] = None,
    max_bytes: Annotated[
        int,
        Field(description=f"size of the answer in bytes, 1024 to the output limit (default {DEFAULT_BRIEFING_BYTES})"),
    ] = DEFAULT_BRIEFING_BYTES,
) -> Annotated[CallToolResult, results.RunbookResult]:
    """Find the team's runbooks (operator rules and procedures) that apply to a task. Each keyword is
    matched against runbook names, titles, summaries, tags and chapter headings; score = matches ×
    priority, and priority-10 runbooks (guardrails) are always included. The answer gives the full text of
    the best matches, then name + summary, then names, within max_bytes (every priority-10 runbook is at
    least named, even past it). Search before acting, and again
    whenever the task moves to another system or step."""
    return await services.runner.run(call, lambda: services.runbooks.search_plan(tags, query, max_bytes))


async def begin_session(
    call: CallRequest,
    services: Services,
    tags: Annotated[
        list[str],
        Field(
            description=f"about 5 keywords describing the task (1 to {MAX_KEYWORDS}): systems, services, hosts, "
            "actions",
            max_length=MAX_KEYWORDS,
        ),
    ],
) -> Annotated[CallToolResult, results.RunbookResult]:
    """Start a task: returns the team's runbooks that apply to it (as runbook_search does for these keywords,
    priority-10 guardrails included) and, when the server's briefing gate is on, opens it for this MCP
    session, so calls run at once instead of first answering [GATED: …] with runbooks."""
    gate_on = services.runner.gate is not None
    return await services.runner.run(call, lambda: services.runbooks.begin_session_plan(tags, gate_on))


def recorded_keywords(arguments: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """The record filter of both tools: 10,000 keywords would make one audit record a megabyte, so a record keeps
    64 and a digest of the rest (runbooks/plans.py, loaded with the first call)."""
    from relay_shell.runbooks.plans import recorded_keyword_arguments

    return recorded_keyword_arguments(arguments)


# Tier 0: reads the runbooks only. begin_session changes the session's gate, which is the server's own state.
READS = ToolKind(read_only=True, destructive=False, idempotent=True, open_world=False)


def register(tools: ToolRegistry) -> None:
    tools.add(runbook_search, "Search the team's runbooks", READS, record_filter=recorded_keywords)
    tools.add(begin_session, "Begin a task: briefing and gate", READS, record_filter=recorded_keywords)
