"""Assemble the MCPServer: tools, prompts, resources, and the middleware that routes every tools/call
through argument validation in the audited runner (so a bad call is an audited, readable error)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from pydantic import ValidationError

from relay_shell import __version__
from relay_shell.audit.log import AuditLog
from relay_shell.config import Settings
from relay_shell.metrics import Metrics
from relay_shell.policy.policy import Policy
from relay_shell.runner import Runner
from relay_shell.surface.context import current_request, register_context
from relay_shell.surface.diag_tools import diag_tools
from relay_shell.surface.guide import INSTRUCTIONS
from relay_shell.surface.local_tools import local_tools


@dataclass
class Assembly:
    mcp: MCPServer
    runner: Runner
    metrics: Metrics
    metrics_port: int | None = None


def build_server(settings: Settings, audit_log: AuditLog) -> Assembly:
    metrics = Metrics()
    policy = Policy(settings.policy_mode, settings.deny_patterns, settings.allow_patterns)
    runner = Runner(settings, audit_log, policy, metrics)
    assembly: Assembly
    tools = local_tools(runner) + diag_tools(runner, lambda: assembly.metrics_port)
    runner.known_tools = {tool.name for tool in tools}
    mcp = MCPServer(
        name="relay-shell",
        title="relay-shell",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=tools,
        log_level="WARNING",
        middleware=[ToolCallGate(runner, {tool.name: tool for tool in tools})],
    )
    register_context(mcp, runner)
    assembly = Assembly(mcp=mcp, runner=runner, metrics=metrics)
    return assembly


class ToolCallGate:
    """Checks tools/call before the SDK does: unknown tools, unknown argument names and wrong types get an
    error naming the argument, the problem and what is allowed, and an audit record."""

    def __init__(self, runner: Runner, tools: dict[str, Tool]) -> None:
        self.runner = runner
        self.tools = tools

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        token = current_request.set(ctx)
        try:
            if ctx.method == "tools/call" and ctx.request_id is not None:
                problem = self.check(ctx.params or {})
                if problem is not None:
                    name = (ctx.params or {}).get("name")
                    arguments = (ctx.params or {}).get("arguments")
                    return await self.runner.reject(ctx, str(name), arguments, problem)
            return await call_next(ctx)
        finally:
            current_request.reset(token)

    def check(self, params: Any) -> str | None:
        name = params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return f"UnknownTool: {str(name)[:128]!r} is not a tool; allowed: {', '.join(sorted(self.tools))}"
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return "InvalidArgument: arguments must be an object of named arguments"
        properties: dict[str, Any] = tool.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            names = ", ".join(repr(item[:64]) for item in unknown[:10])
            return f"InvalidArgument: unknown argument {names}; allowed: {', '.join(properties)}"
        try:
            tool.fn_metadata.arg_model.model_validate(tool.fn_metadata.pre_parse_json(arguments))
        except ValidationError as exc:
            return "InvalidArgument: " + "; ".join(_describe_errors(exc.errors(), properties))
        return None


def _describe_errors(errors: list[Any], properties: dict[str, Any]) -> list[str]:
    """One message per argument: a union type fails once per branch, which is noise to the caller."""
    by_argument: dict[str, list[Any]] = {}
    for error in errors:
        argument = str(error["loc"][0]) if error["loc"] else "arguments"
        by_argument.setdefault(argument, []).append(error)
    messages = []
    for argument, argument_errors in list(by_argument.items())[:5]:
        schema = properties.get(argument, {})
        allowed = f"{schema.get('description') or 'see the input schema'} ({_schema_type(schema)})"
        first = argument_errors[0]
        if first["type"] == "missing":
            messages.append(f"{argument}: is required; allowed: {allowed}")
            continue
        value = repr(first.get("input"))
        if len(value) > 80:
            value = value[:77] + "..."
        nested = [error for error in argument_errors if len(error["loc"]) > 1 and isinstance(error["loc"][1], str)]
        if len(argument_errors) == 1 or not nested:
            location = ".".join(str(part) for part in first["loc"])
            messages.append(f"{location}: {first['msg']} (got {value}); allowed: {allowed}")
        else:
            messages.append(f"{argument}: wrong type (got {value}); allowed: {allowed}")
    return messages


def _schema_type(schema: dict[str, Any]) -> str:
    if "type" in schema:
        return str(schema["type"])
    options = [str(option.get("type")) for option in schema.get("anyOf", []) if option.get("type")]
    return " or ".join(options) or "see the tool's input schema"
