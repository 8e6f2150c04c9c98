"""One tool as the call router and the runner know it: declared once, in the tool registry (surface/registry.py),
and handed to the runner when it is made."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.tools import Tool

# What the audit record may keep of the arguments of a call, valid or not (a password typed into a session is
# withheld even when the call fails validation; a confirmation token is kept as its digest), given who calls: the
# owner of what the call names (identity.owner_of), None when not known (a message the transport refused).
RecordFilter = Callable[[dict[str, Any], str | None], dict[str, Any]]


@dataclass(frozen=True)
class ToolEntry:
    tool: Tool  # the MCP tool: its function, schemas, description and annotations
    # The defaults its outputSchema declares: what a result carries for a field the call did not set.
    result_defaults: dict[str, Any]
    # Runs nothing and touches nothing outside the server (annotated read-only, not open-world): one audit record,
    # no write-ahead start record (adr/0014).
    pure_read: bool
    record_filter: RecordFilter | None = None

    @property
    def name(self) -> str:
        return self.tool.name

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as the tool receives them (defaults filled in); raises pydantic's ValidationError."""
        return self.tool.fn_metadata.validate_arguments(arguments)

    def recordable(self, arguments: dict[str, Any], owner: str | None) -> dict[str, Any]:
        return self.record_filter(arguments, owner) if self.record_filter is not None else arguments


ToolTable = Mapping[str, ToolEntry]


def shared_result_defaults(entries: Iterable[ToolEntry]) -> dict[str, Any]:
    """The fields every tool's results have (those of ToolResult): what a call naming no tool of ours returns."""
    defaults = [entry.result_defaults for entry in entries]
    if not defaults:
        return {}
    shared = set.intersection(*(set(fields) for fields in defaults))
    return {name: value for name, value in defaults[0].items() if name in shared}
