"""The call router: server middleware that takes every tools/call for the server's own tools. Unknown tools,
unknown argument names and wrong types get an error naming the argument, the problem and what is allowed, and an
audit record; valid calls go straight to the tool function, with the request (read once) and the server's
services. The SDK would validate the arguments a second time and wrap the call in machinery these tools do not
use (resolvers, result conversion), which costs more than a fast command."""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

from relay_shell.errors import InputRequired
from relay_shell.identity import declared_client, initialized
from relay_shell.runner.request import CallRequest
from relay_shell.runner.tools import ToolEntry, ToolTable
from relay_shell.surface.resources import current_request
from relay_shell.surface.services import Services
from relay_shell.wire import LONE_SURROGATES
from relay_shell.wire_routed import call_routed


class ToolCallRouter:
    def __init__(self, tools: ToolTable, services: Services) -> None:
        self.tools = tools
        self.services = services
        self.runner = services.runner
        self.transport = services.settings.http.transport
        self.limit = services.settings.limits.max_concurrent_calls
        self.in_flight = 0  # tool calls running now (bounded by MAX_CONCURRENT_CALLS)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize" and declared_client(ctx) is not None:
            # The identity in every later record comes from the first initialize: a second one would rename
            # the client mid-session. Refused before the SDK commits anything.
            raise MCPError(
                INVALID_REQUEST,
                f"initialize: this connection is already initialized (client {declared_client(ctx)!r}); a client "
                "initializes once per connection: open a new connection to start over",
            )
        token = current_request.set(ctx)
        try:
            if ctx.method == "tools/call" and ctx.request_id is not None:
                return await self.route(ctx)
            return await call_next(ctx)
        finally:
            current_request.reset(token)

    async def route(self, ctx: ServerRequestContext[Any, Any]) -> HandlerResult:
        call_routed()  # from here the runner records the call, not the transport
        params = ctx.params or {}
        name, arguments = str(params.get("name")), params.get("arguments")
        if not initialized(ctx):
            # The SDK refuses every other request before initialize; a tool call is refused the same way, with an
            # audit record (it reached the server) naming no client, since none was declared.
            refusal = "NotInitialized: no tool runs before initialize; send initialize, then the call"
            await self.runner.reject(CallRequest.read(ctx, self.transport, name), arguments, refusal)
            raise MCPError(INVALID_PARAMS, "Invalid request parameters: " + refusal)
        if self.in_flight >= self.limit:
            # A bounded service: a clear refusal now beats an unbounded queue of commands.
            busy = (
                f"Busy: {self.in_flight} calls are running (RELAY_SHELL_MAX_CONCURRENT_CALLS={self.limit}); "
                "nothing ran, retry shortly"
            )
            self.runner.recorder.metrics.busy_refused_calls.inc()
            return await self.runner.reject(CallRequest.read(ctx, self.transport, name), arguments, busy)
        checked = self.check(params)
        if isinstance(checked, str):
            return await self.runner.reject(CallRequest.read(ctx, self.transport, name), arguments, checked)
        entry, validated = checked
        call = CallRequest.read(ctx, self.transport, entry.name, validated)
        self.in_flight += 1
        try:
            return await entry.tool.fn(**validated, call=call, services=self.services)
        except InputRequired as question:  # a tier-3 call asks the client's human (2026-07-28 era)
            return question.result
        finally:
            self.in_flight -= 1

    def check(self, params: Any) -> tuple[ToolEntry, dict[str, Any]] | str:
        """The tool and its validated arguments, or what is wrong with the call."""
        name = params.get("name")
        entry = self.tools.get(name) if isinstance(name, str) else None
        if entry is None:
            return f"UnknownTool: {str(name)[:128]!r} is not a tool; allowed: {', '.join(sorted(self.tools))}"
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return "InvalidArgument: arguments must be an object of named arguments"
        meta = params.get("_meta")
        lone = meta.get(LONE_SURROGATES) if isinstance(meta, dict) else None
        if lone:
            # The transport wrote each lone surrogate as the text \udXXX (adr/0016): no program, file name or
            # log line can take one, so the call is refused here, audited, naming the arguments.
            names = ", ".join(str(name)[:64] for name in list(lone)[:10])
            return (
                f"InvalidArgument: {names}: holds a lone UTF-16 surrogate (recorded as \\udXXX), which is not "
                "Unicode text and cannot reach a program; allowed: valid Unicode text"
            )
        properties: dict[str, Any] = entry.tool.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            names = ", ".join(repr(item[:64]) for item in unknown[:10])
            return f"InvalidArgument: unknown argument {names}; allowed: {', '.join(properties)}"
        try:
            return entry, entry.validate(arguments)
        except ValidationError as exc:
            return "InvalidArgument: " + "; ".join(_describe_errors(exc.errors(), properties))


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
