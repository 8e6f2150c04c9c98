"""Building an MCP tool from a thin function: schema from the signature, a clean description, annotations."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations


def make_tool(
    function: Callable[..., Any], title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> Tool:
    return Tool.from_function(
        function,
        title=title,
        description=inspect.cleandoc(function.__doc__ or ""),
        annotations=ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            open_world_hint=open_world,
        ),
        structured_output=True,
    )
