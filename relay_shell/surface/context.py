"""Prompts and resources. Each pull goes through the runner's tier-0 helper (cap, digest record, counter);
listing them does not audit."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer

from relay_shell.audit.tail import recent_records
from relay_shell.runner import Runner
from relay_shell.surface.guide import OPERATING_GUIDE

RECENT_RECORDS = 50

# Static resources and argument-less prompts get no Context from the SDK; the server middleware puts the
# request here so the audit record still names the request and the client.
current_request: ContextVar[ServerRequestContext[Any, Any] | None] = ContextVar("current_request", default=None)


def register_context(mcp: MCPServer, runner: Runner) -> None:
    @mcp.prompt(name="operating_guide", title="Operating guide")
    def operating_guide() -> str:
        """How to use relay-shell well: choosing tools, reading results, tiers and policy, a worked loop."""
        return runner.context_pull(current_request.get(), "prompt:operating_guide", OPERATING_GUIDE)

    @mcp.resource(
        "relay-shell://audit/recent",
        name="audit_recent",
        title="Recent audit records",
        description=f"The last {RECENT_RECORDS} audit records as JSON (redacted arguments and digests only).",
        mime_type="application/json",
    )
    def audit_recent() -> str:
        records = recent_records(runner.audit_log.path, RECENT_RECORDS)
        text = orjson.dumps(records, option=orjson.OPT_INDENT_2).decode()
        return runner.context_pull(current_request.get(), "resource:audit_recent", text)
