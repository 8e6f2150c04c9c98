"""Building an MCP tool from a thin function: schema from the signature, a clean description, annotations."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp_types import ToolAnnotations


def make_tool(
    function: Callable[..., Any], title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> Tool:
    tool = Tool.from_function(
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
        structured_output=False,
    )
    # The outputSchema comes from the result model in the return annotation. Several tools share a model
    # (six return SessionResult): generating its schema once, not per tool, keeps startup fast.
    tool.fn_metadata.output_schema = output_schema(inspect.signature(function, eval_str=True).return_annotation)
    return tool


@functools.cache
def output_schema(return_annotation: Any) -> dict[str, Any] | None:
    """The schema the SDK derives for a function with this return annotation (structured output)."""

    def probe() -> None: ...

    probe.__annotations__["return"] = return_annotation
    return func_metadata(probe, structured_output=True).output_schema
