"""MCP tools for the team's runbooks: schema + one call into the audited runner (plans in runbooks/plans.py)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.runbooks.plans import (
    DEFAULT_BYTES,
    MAX_KEYWORDS,
    MAX_QUERY_CHARS,
    prepare_begin_session,
    prepare_runbook_search,
    recorded_keyword_arguments,
)
from relay_shell.runbooks.retrieval import Retrieval
from relay_shell.runner import Runner
from relay_shell.surface.build import make_tool


def runbook_tools(runner: Runner, retrieval: Retrieval) -> list[Tool]:
    settings = runner.settings

    async def runbook_search(
        ctx: Context,
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
            int, Field(description=f"size of the answer in bytes, 1024 to the output limit (default {DEFAULT_BYTES})")
        ] = DEFAULT_BYTES,
    ) -> Annotated[CallToolResult, results.RunbookResult]:
        """Find the team's runbooks (operator rules and procedures) that apply to a task. Each keyword is
        matched against runbook names, titles, summaries, tags and chapter headings; score = matches ×
        priority, and priority-10 runbooks (guardrails) are always included. The answer gives the full text of
        the best matches, then name + summary, then names, within max_bytes (every priority-10 runbook is at
        least named, even past it). Search before acting, and again
        whenever the task moves to another system or step."""
        return await runner.run(
            ctx.request_context,
            "runbook_search",
            lambda: prepare_runbook_search(settings, retrieval, tags, query, max_bytes),
        )

    async def begin_session(
        ctx: Context,
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
        return await runner.run(
            ctx.request_context,
            "begin_session",
            lambda: prepare_begin_session(settings, retrieval, tags, runner.gate is not None and runner.gate.enabled),
        )

    # 10,000 keywords would make one audit record a megabyte: a record keeps 64 and a digest of the rest.
    runner.argument_filters["runbook_search"] = recorded_keyword_arguments
    runner.argument_filters["begin_session"] = recorded_keyword_arguments
    # Tier 0: reads the runbooks only. begin_session changes the session's gate, which is the server's own state.
    reads = {"read_only": True, "destructive": False, "idempotent": True, "open_world": False}
    return [
        make_tool(runbook_search, "Search the team's runbooks", **reads),
        make_tool(begin_session, "Begin a task: briefing and gate", **reads),
    ]
