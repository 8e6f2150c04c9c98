"""Assemble the MCPServer: tools, prompts, resources, and the middleware that routes every tools/call
through argument validation in the audited runner (so a bad call is an audited, readable error)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

if TYPE_CHECKING:
    from mcp.server.auth.provider import TokenVerifier

    from relay_shell.audit.offhost import OffHost
    from relay_shell.auth.oauth import OAuthProvider

from relay_shell import __version__
from relay_shell.audit.log import AuditLog
from relay_shell.auth.setup import server_auth
from relay_shell.confirm.elicitation import InputRequired
from relay_shell.containment.units import Containment, scope_of, start_containment
from relay_shell.identity import connected, declared_client, initialized
from relay_shell.metrics import Metrics
from relay_shell.policy.admission import Policy
from relay_shell.results import schema_defaults
from relay_shell.runbooks.gate import BriefingGate
from relay_shell.runbooks.index import instructions_index, library_state
from relay_shell.runbooks.library import RunbookLibrary
from relay_shell.runbooks.retrieval import Retrieval
from relay_shell.runner import Runner
from relay_shell.sessions.registry import SHUTDOWN_GRACE, Session, SessionRegistry
from relay_shell.settings.model import Settings
from relay_shell.ssh.access import SshAccess
from relay_shell.ssh.forwards.registry import ForwardRegistry, end_fields
from relay_shell.surface.build import SCHEMA_CACHE
from relay_shell.surface.diag_tools import diag_tools
from relay_shell.surface.guide import INSTRUCTIONS
from relay_shell.surface.list_changed import ListChangedNotifier, declare_list_changed
from relay_shell.surface.local_tools import local_tools
from relay_shell.surface.prompts import WorkflowPrompts
from relay_shell.surface.resources import current_request, register_context
from relay_shell.surface.runbook_context import RunbookContext
from relay_shell.surface.runbook_tools import runbook_tools
from relay_shell.surface.session_tools import session_tools
from relay_shell.surface.ssh_tools import ssh_tools
from relay_shell.surface.workflows import PROMPTS
from relay_shell.trace.tracer import ExecTracer, session_execs
from relay_shell.wire import LONE_SURROGATES


@dataclass
class Assembly:
    mcp: MCPServer
    runner: Runner
    metrics: Metrics
    sessions: SessionRegistry
    ssh: SshAccess
    containment: Containment
    metrics_port: int | None = None
    offhost: OffHost | None = None  # shipping and signed checkpoints (adr/0020)

    async def shutdown(self) -> None:
        """Close every session (local and remote), then every SSH connection, then end what the calls left
        running (background jobs, whatever escaped): nothing the server started outlives it."""
        with anyio.CancelScope(shield=True):
            await self.sessions.close_all("server stopped")
            if self.containment.tracer is not None:  # late execs not yet written, before their trees are ended
                self.containment.tracer.flush_late()
            with anyio.move_on_after(2.0):
                await self.ssh.close()
            await self.containment.shutdown(min(SHUTDOWN_GRACE, self.runner.settings.limits.kill_grace))
            if self.containment.tracer is not None:  # late execs not yet written (their trees are gone now)
                await anyio.sleep(0)  # those the trace's thread handed to the loop first
                self.containment.tracer.flush_late()
            if self.offhost is not None:  # last: the shutdown checkpoint follows every other record, then it ships
                await anyio.to_thread.run_sync(self.offhost.stop)


def build_server(
    settings: Settings,
    audit_log: AuditLog,
    token_verifier: TokenVerifier | None = None,
    oauth: OAuthProvider | None = None,
    containment: Containment | None = None,
    offhost: OffHost | None = None,
) -> Assembly:
    if containment is None:
        # Containment changes the whole process (child subreaper, its cgroup, an environment variable): the
        # command line opts in (cli.serve, from RELAY_SHELL_CONTAINMENT); a process that embeds the server
        # (tests with an in-memory client) passes one when it wants it.
        containment = start_containment("off", scope_of(settings.audit.audit_path))
    # Metrics are collected when something can read them: the stdio listener or the HTTP transport's /metrics.
    metrics = Metrics(enabled=bool(settings.metrics.metrics_addr) or settings.http.transport == "http")
    if offhost is not None:
        offhost.attach(metrics)
    policy = Policy(settings.policy.policy_mode, settings.policy.policy_deny, settings.policy.policy_allow)
    runner = Runner(settings, audit_log, policy, metrics)
    # The exec trace rides on the containment object: both go wherever a call or session starts processes.
    containment.tracer = ExecTracer(
        settings.trace.exec_trace, settings.trace.exec_deny, settings.trace.exec_trace_entries, metrics
    )
    tracer = containment.tracer
    # A call's execs after its end record (background jobs) go into `exec:late` records under its call_id.
    tracer.on_late = lambda call_id, execs: runner.event("exec:late", "server", {"call_id": call_id, "execs": execs})

    def session_ended(session: Session) -> None:
        runner.event(
            "session:end",
            session.client_id,
            {
                "session_id": session.session_id,
                "exit_code": session.exit_code,
                "signal": session.signal_name,
                "reason": session.end_reason or "exited",
                "raw_len": session.ring.end,
                "transcript_sha256": session.transcript_sha256,
                "transcript_truncated": session.transcript.truncated if session.transcript else None,
                "transcript_error": session.transcript.error if session.transcript else None,
                "duration_ms": int(((session.ended_at or 0) - session.created) * 1000),
                **session_execs(tracer, session),
            },
        )

    sessions = SessionRegistry(
        max_sessions=settings.sessions.max_sessions,
        buffer_bytes=settings.sessions.session_buffer_bytes,
        idle_timeout=settings.sessions.session_idle_timeout,
        max_lifetime=settings.sessions.session_max_lifetime,
        kill_grace=settings.limits.kill_grace,
        on_end=session_ended,
        connected=connected,
        containment=containment,
    )
    metrics.sessions_open.set_function(lambda: len(sessions.sessions))  # read at scrape time
    forwards = ForwardRegistry(
        settings.ssh.max_forwards,
        on_end=lambda forward, reason: runner.event("forward:end", forward.client_id, end_fields(forward, reason)),
        connected=connected,
        idle_timeout=settings.ssh.forward_idle_timeout,
    )
    ssh = SshAccess(settings, forwards, on_helper=containment.helper_started)
    metrics.ssh_connections_open.set_function(ssh.connections)
    metrics.ssh_forwards_open.set_function(lambda: len(forwards.forwards))
    metrics.ssh_forwards_max.set(settings.ssh.max_forwards)
    metrics.sessions_max.set(settings.sessions.max_sessions)
    metrics.sessions_running.set_function(
        lambda: sum(1 for session in sessions.sessions.values() if session.state == "running")
    )
    metrics.calls_in_flight_max.set(settings.limits.max_concurrent_calls)
    retrieval = runbook_retrieval(settings, runner, ssh)
    assembly: Assembly
    tools = [
        *local_tools(runner, containment),
        *session_tools(runner, sessions),
        *ssh_tools(runner, sessions, ssh),
        *diag_tools(
            runner,
            lambda: assembly.metrics_port,
            lambda: len(sessions.sessions),
            ssh.connections,
            containment.status,
            lambda owner: {**runbook_state(settings, retrieval, runner, owner), "exec_trace": tracer.status()},
            offhost.describe if offhost is not None else None,
        ),
        *runbook_tools(runner, retrieval),
    ]
    SCHEMA_CACHE.save()
    runner.known_tools = {tool.name for tool in tools}
    runner.result_defaults = {tool.name: schema_defaults(tool.output_schema) for tool in tools}
    # A call naming no tool of ours still gets every field all results share (those of ToolResult).
    shared = set.intersection(*(set(defaults) for defaults in runner.result_defaults.values()))
    runner.result_defaults["unknown"] = {name: runner.result_defaults[tools[0].name][name] for name in shared}
    runner.argument_validators = {tool.name: tool.fn_metadata.validate_arguments for tool in tools}
    # One audit record for the tools whose annotations say they only read and touch nothing outside the server;
    # every other call gets a start record before it runs (adr/0014).
    runner.pure_reads = {
        tool.name
        for tool in tools
        if tool.annotations is not None and tool.annotations.read_only_hint and not tool.annotations.open_world_hint
    }
    gate = ToolCallGate(runner, {tool.name: tool for tool in tools})
    metrics.calls_in_flight.set_function(lambda: gate.in_flight)
    prompts = WorkflowPrompts(runner, ssh, runner.known_tools)  # validates the prompt definitions
    runbooks = RunbookContext(runner, retrieval)
    bus = InMemorySubscriptionBus()  # 2026-07-28 clients hear of changed lists on their subscriptions/listen stream
    notifier = ListChangedNotifier(retrieval, bus, lambda: refresh_runbooks(mcp, runbooks, settings, retrieval))
    mcp = MCPServer(
        name="relay-shell",
        title="relay-shell",
        version=__version__,
        instructions=instructions(settings, retrieval),
        tools=tools,
        log_level="WARNING",
        middleware=[notifier, gate, runbooks, prompts],
        lifespan=lambda app: connection_lifespan(sessions, forwards, notifier.watch_forever),
        subscriptions=bus,
        **server_auth(settings, token_verifier, oauth),
    )
    declare_list_changed(mcp._lowlevel_server)
    if oauth is not None:  # registrations, approvals and revocations are audited like everything else
        oauth.on_event = lambda label, client_id, fields: runner.event(label, client_id, fields)
        oauth.revoke_orphaned_grants()
    gate.mcp = mcp
    register_context(mcp, runner, ssh)
    prompts.register(mcp)
    runbooks.register(mcp)
    prompts.other_sources = runbooks.completion_source  # runbook arguments `host`/`hosts` complete too
    assembly = Assembly(
        mcp=mcp, runner=runner, metrics=metrics, sessions=sessions, ssh=ssh, containment=containment, offhost=offhost
    )
    return assembly


def runbook_retrieval(settings: Settings, runner: Runner, ssh: SshAccess) -> Retrieval:
    """The runbooks (adr/0017): loaded now (from the parse cache when unchanged) for the instructions' index, and
    the briefing gate, which the runner consults before a call of tier 1 or more runs."""
    library = None
    if settings.runbooks.runbook_dir is not None:
        reserved = frozenset(spec.name for spec in PROMPTS)
        library = RunbookLibrary(
            settings.runbooks.runbook_dir,
            settings.runbooks.runbook_max_files,
            settings.runbooks.runbook_max_bytes,
            reserved,
        )
        library.refresh()
    retrieval = Retrieval(library, settings.policy.policy_mode, lambda host: inventory_groups(ssh, host))
    budget = min(8192, settings.limits.max_output)
    runner.gate = BriefingGate(
        settings.runbooks.gate == "briefing",
        connected,
        lambda words, hosts: retrieval.call_briefing(words, hosts, budget),
    )
    return retrieval


def inventory_groups(ssh: SshAccess, host: str) -> tuple[str, ...]:
    """A host's inventory groups, for the hosts a call names (an SSH call: the inventory is loaded already)."""
    found = ssh.get().inventory.lookup(host)
    return found.groups if found is not None else ()


def instructions(settings: Settings, retrieval: Retrieval) -> str:
    if retrieval.library is None and settings.runbooks.gate == "off":
        return INSTRUCTIONS
    index = instructions_index(retrieval.visible(), settings.runbooks.gate == "briefing")
    return f"{INSTRUCTIONS}\n{index}"


def refresh_runbooks(mcp: MCPServer, runbooks: RunbookContext, settings: Settings, retrieval: Retrieval) -> None:
    """The directory changed: the prompts follow it, and clients that connect from now on get a fresh index."""
    runbooks.sync()
    mcp._lowlevel_server.instructions = instructions(settings, retrieval)


def runbook_state(settings: Settings, retrieval: Retrieval, runner: Runner, owner: str) -> dict[str, Any]:
    """server_info's sections for the runbooks and the calling session's briefing gate."""
    directory = str(settings.runbooks.runbook_dir) if settings.runbooks.runbook_dir is not None else None
    state = library_state(
        retrieval.catalog(),
        settings.policy.policy_mode,
        directory,
        settings.runbooks.runbook_max_files,
        settings.runbooks.runbook_max_bytes,
    )
    return {"runbooks": state, "gate": runner.gate.describe(owner) if runner.gate is not None else {"mode": "off"}}


@asynccontextmanager
async def connection_lifespan(
    sessions: SessionRegistry, forwards: ForwardRegistry, watch_runbooks: Callable[[], Coroutine[Any, Any, None]]
) -> AsyncIterator[dict[str, Any]]:
    """Entered once per served connection (a stdio stream, an in-memory client): the reapers (and the runbook
    watcher, one per server) run meanwhile, and when the connection ends the sessions and port forwards of
    clients that are gone are closed at once."""
    async with anyio.create_task_group() as group:
        group.start_soon(sessions.reap_forever)
        group.start_soon(forwards.reap_forever)
        group.start_soon(watch_runbooks)
        try:
            yield {}
        finally:
            await sessions.close_disconnected()
            await forwards.close_disconnected()
            group.cancel_scope.cancel()


class ToolCallGate:
    """Runs every tools/call for the server's own tools: unknown tools, unknown argument names and wrong types
    get an error naming the argument, the problem and what is allowed, and an audit record; valid calls go
    straight to the tool function. The SDK would validate the arguments a second time and wrap the call in
    machinery these tools do not use (resolvers, result conversion), which costs more than a fast command."""

    def __init__(self, runner: Runner, tools: dict[str, Tool]) -> None:
        self.runner = runner
        self.tools = tools
        self.mcp: MCPServer | None = None  # set once the server exists; tool functions get it in their Context
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
                params = ctx.params or {}
                if not initialized(ctx):
                    # The SDK refuses every other request before initialize; a tool call is refused the same way,
                    # with an audit record (it reached the server) naming no client, since none was declared.
                    refusal = "NotInitialized: no tool runs before initialize; send initialize, then the call"
                    await self.runner.reject(ctx, str(params.get("name")), params.get("arguments"), refusal)
                    raise MCPError(INVALID_PARAMS, "Invalid request parameters: " + refusal)
                limit = self.runner.settings.limits.max_concurrent_calls
                if self.in_flight >= limit:
                    # A bounded service: a clear refusal now beats an unbounded queue of commands.
                    busy = (
                        f"Busy: {self.in_flight} calls are running (RELAY_SHELL_MAX_CONCURRENT_CALLS={limit}); "
                        "nothing ran, retry shortly"
                    )
                    self.runner.metrics.busy_refused_calls.inc()
                    return await self.runner.reject(ctx, str(params.get("name")), params.get("arguments"), busy)
                checked = self.check(params)
                if isinstance(checked, str):
                    return await self.runner.reject(ctx, str(params.get("name")), params.get("arguments"), checked)
                tool, arguments = checked
                context = Context(request_context=ctx, mcp_server=self.mcp)
                assert tool.context_kwarg is not None  # every tool takes its Context: it carries the request
                self.in_flight += 1
                try:
                    return await tool.fn(**arguments, **{tool.context_kwarg: context})
                except InputRequired as question:  # a tier-3 call asks the client's human (2026-07-28 era)
                    return question.result
                finally:
                    self.in_flight -= 1
            return await call_next(ctx)
        finally:
            current_request.reset(token)

    def check(self, params: Any) -> tuple[Tool, dict[str, Any]] | str:
        """The tool and its validated arguments, or what is wrong with the call."""
        name = params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
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
        properties: dict[str, Any] = tool.parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            names = ", ".join(repr(item[:64]) for item in unknown[:10])
            return f"InvalidArgument: unknown argument {names}; allowed: {', '.join(properties)}"
        try:
            return tool, tool.fn_metadata.validate_arguments(arguments)
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
