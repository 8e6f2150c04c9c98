"""The MCP tool that confirms a tier-3 call (adr/0010): schema + one call into the audited runner. Its token is a
bearer credential for one irreversible call, so the audit record keeps its digest only."""

from __future__ import annotations

from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.confirm.tool import prepare_confirm, recorded_confirm_arguments
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
    confirmation = services.runner.confirmation
    return await services.runner.run(
        call, lambda: prepare_confirm(confirmation.tokens, confirmation.mode, call.owner, token)
    )


# Arms a token: changes the server's own state only, and the same token twice is refused the second time.
ARMS_A_TOKEN = ToolKind(read_only=False, destructive=False, idempotent=False, open_world=False)


def register(tools: ToolRegistry) -> None:
    tools.add(operation_confirm, "Confirm a tier-3 call", ARMS_A_TOKEN, record_filter=recorded_confirm_arguments)
