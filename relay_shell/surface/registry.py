"""The tool registry: every tool declared once, with everything the call router and the runner need — its
function (schema, description), input validation, record filter, result defaults (from its outputSchema), its
annotations and the pure-read flag they give. The tool modules (surface/tools/) each add theirs in `register`;
the registry's entries are handed to the runner and the router when they are made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.tools import Tool

from relay_shell.results import schema_defaults
from relay_shell.runner.tools import RecordFilter, ToolEntry
from relay_shell.surface.build import SCHEMA_CACHE, make_tool


@dataclass(frozen=True)
class ToolKind:
    """A tool's MCP annotations: what a client may assume about calling it."""

    read_only: bool  # changes nothing (a pure read when it is not open-world too: one audit record)
    destructive: bool  # may destroy data, or end what is running
    idempotent: bool  # the same call again changes nothing more
    open_world: bool  # reaches beyond the server (processes, hosts, the network)


class ToolRegistry:
    def __init__(self) -> None:
        self.entries: dict[str, ToolEntry] = {}  # by name, in the order tools/list shows them

    def add(
        self, function: Callable[..., Any], title: str, kind: ToolKind, record_filter: RecordFilter | None = None
    ) -> None:
        """Declare a tool: its name is the function's, its description the function's docstring."""
        tool = make_tool(
            function,
            title,
            read_only=kind.read_only,
            destructive=kind.destructive,
            idempotent=kind.idempotent,
            open_world=kind.open_world,
        )
        if tool.name in self.entries:
            raise ValueError(f"tool {tool.name} is declared twice")
        self.entries[tool.name] = ToolEntry(
            tool=tool,
            result_defaults=schema_defaults(tool.output_schema),
            # One audit record for the tools whose annotations say they only read and touch nothing outside the
            # server; every other call gets a start record before it runs (adr/0014).
            pure_read=kind.read_only and not kind.open_world,
            record_filter=record_filter,
        )

    def sdk_tools(self) -> list[Tool]:
        """The tools for the MCP server (tools/list)."""
        return [entry.tool for entry in self.entries.values()]

    def save_schemas(self) -> None:
        """Once every module has added its tools: keep the schemas built this start, if any (surface/build.py)."""
        SCHEMA_CACHE.save()
