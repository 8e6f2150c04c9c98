"""The MCP tool that confirms a tier-3 call (adr/0010): schema + one call into the audited runner. The tier-3
dialogue (confirm/, runner/confirmation.py) loads with the first call that needs it."""

from __future__ import annotations

from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.runner.request import CallRequest
from relay_shell.surface.registry import ToolKind, ToolRegistry
from relay_shell.surface.services import Services


async def operation_confirm(
    token: Annotated[str, Field(description="the token of a [CONFIRM REQUIRED …] result, copied exactly")],
    call: CallRequest,
    services: Services,
) -> Annotated[CallToolResult, results.ConfirmResult]:
    """Confirm one irreversible (tier 3) call that returned `[CONFIRM REQUIRED tier 3: …]`, after the human
    explicitly agreed to it. Never call this on your own judgement: ask the human first, showing what the
    call does and where. Then repeat the identical call (same tool, arguments, directory, host) before the
    token expires; it runs exactly once. The token works only for that call, from this client, once. The
    result says what the token now allows and how many seconds are left."""
    runner = services.runner
    return await runner.run(call, lambda: runner.confirmation.arming_plan(call.owner, token))


def recorded_token(arguments: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """The record filter: the token is a bearer credential for one irreversible call, so the audit record keeps
    its digest only, valid call or not (confirm/tool.py)."""
    from relay_shell.confirm.tool import recorded_confirm_arguments

    return recorded_confirm_arguments(arguments)


# Arms a token: it changes only the server's own state.
ARMS_A_TOKEN = ToolKind(read_only=False, destructive=False, idempotent=False, open_world=False)


def register(tools: ToolRegistry) -> None:
    tools.add(operation_confirm, "Confirm a tier-3 call", ARMS_A_TOKEN, record_filter=recorded_token)
