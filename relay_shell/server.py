"""Assemble the MCPServer: the audit recorder and the runner, the sessions and the SSH side, the tool registry
and the call router that takes every tools/call (surface/router.py), the prompts and the resources."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus

if TYPE_CHECKING:
    from mcp.server.auth.provider import TokenVerifier

    from relay_shell.auth.oauth import OAuthProvider
    from relay_shell.offhost.setup import OffHost

from relay_shell import __version__
from relay_shell.audit.log import AuditLog
from relay_shell.containment.start import start_containment
from relay_shell.containment.units import Containment, scope_of
from relay_shell.identity import connected
from relay_shell.launch import Launcher, start_launcher
from relay_shell.metrics import Metrics
from relay_shell.outputs import OutputStore
from relay_shell.policy import own_files
from relay_shell.policy.admission import Policy
from relay_shell.runner.context import ContextPulls
from relay_shell.runner.pipeline import Runner
from relay_shell.runner.recorder import Recorder
from relay_shell.sessions.jobs import JobTable
from relay_shell.sessions.registry import SHUTDOWN_GRACE, Session, SessionRegistry
from relay_shell.settings.model import Settings
from relay_shell.ssh.access import SshAccess
from relay_shell.ssh.forwards.registry import ForwardRegistry, end_fields
from relay_shell.surface.list_changed import ListChangedNotifier, declare_list_changed
from relay_shell.surface.prompts import WorkflowPrompts
from relay_shell.surface.registry import ToolRegistry
from relay_shell.surface.resources import register_context
from relay_shell.surface.router import ToolCallRouter
from relay_shell.surface.runbook_access import RunbookAccess
from relay_shell.surface.runbook_context import RunbookContext
from relay_shell.surface.services import Services
from relay_shell.surface.tools import confirmation, diagnostics, local, runbooks, sessions, ssh


@dataclass
class Assembly:
    mcp: MCPServer
    services: Services  # what the tool functions use: the runner, the sessions, the SSH side, …
    recorder: Recorder  # every audit record (the cli writes `server:start` through it)
    metrics: Metrics

    @property
    def runner(self) -> Runner:
        return self.services.runner

    @property
    def sessions(self) -> SessionRegistry:
        return self.services.sessions

    @property
    def ssh(self) -> SshAccess:
        return self.services.ssh

    @property
    def launcher(self) -> Launcher:
        return self.services.launcher

    @property
    def metrics_port(self) -> int | None:
        """The metrics listener's port, once the command line started it (server_info shows it)."""
        return self.services.metrics_port

    @metrics_port.setter
    def metrics_port(self, port: int | None) -> None:
        self.services.metrics_port = port

    async def shutdown(self) -> None:
        """Close every session (local and remote), end every job (its end record written), then every SSH
        connection, then end what the calls left running (background jobs, whatever escaped): nothing the server
        started outlives it."""
        with anyio.CancelScope(shield=True):
            await self.sessions.close_all("server stopped")
            await self.services.jobs.close_all("server stopped: the job was ended")
            self.launcher.flush_late()  # late execs not yet written, before their trees are ended
            with anyio.move_on_after(2.0):
                await self.ssh.close()
            await self.launcher.shutdown(min(SHUTDOWN_GRACE, self.services.settings.limits.kill_grace))
            offhost = self.services.offhost
            if offhost is not None:  # last: the shutdown checkpoint follows every other record, then it ships
                await anyio.to_thread.run_sync(offhost.stop)


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
    recorder = Recorder(settings, audit_log, metrics)
    # A call's execs after its end record (background jobs) go into `exec:late` records under its call_id.
    launcher = start_launcher(
        settings,
        containment,
        metrics,
        on_late=lambda call_id, execs: recorder.event("exec:late", "server", {"call_id": call_id, "execs": execs}),
    )
    session_registry = open_sessions(settings, launcher, recorder)
    outputs = OutputStore(settings.jobs.output_store_bytes, settings.jobs.output_retention)
    jobs = JobTable(
        settings.jobs.max_jobs,
        settings.sessions.session_buffer_bytes,
        settings.jobs.job_retention,
        settings.jobs.yield_after,
        outputs,
        connected,
    )
    ssh_access = open_ssh(settings, launcher, recorder)
    publish_gauges(settings, metrics, session_registry, ssh_access)
    publish_job_gauges(settings, metrics, jobs, outputs)
    runbook_access = RunbookAccess(settings, ssh_access)
    tools = tool_registry(session_registry)
    policy = Policy(settings.policy.policy_mode, settings.policy.policy_deny, settings.policy.policy_allow)
    protect_own_files(settings)
    runner = Runner(settings, recorder, policy, tools.entries, runbook_access.briefing_gate())
    services = Services(
        settings, runner, session_registry, jobs, outputs, ssh_access, launcher, runbook_access, offhost
    )
    mcp = mcp_server(settings, tools, services, token_verifier, oauth)
    if oauth is not None:  # registrations, approvals and revocations are audited like everything else
        oauth.on_event = recorder.event
        oauth.revoke_orphaned_grants()
    return Assembly(mcp=mcp, services=services, recorder=recorder, metrics=metrics)


def open_sessions(settings: Settings, launcher: Launcher, recorder: Recorder) -> SessionRegistry:
    """The PTY sessions, local and remote; each one's end is a `session:end` record."""
    return SessionRegistry(
        max_sessions=settings.sessions.max_sessions,
        buffer_bytes=settings.sessions.session_buffer_bytes,
        idle_timeout=settings.sessions.session_idle_timeout,
        max_lifetime=settings.sessions.session_max_lifetime,
        kill_grace=settings.limits.kill_grace,
        on_end=lambda session: recorder.event("session:end", session.client_id, session_end(session)),
        connected=connected,
        launcher=launcher,
    )


def session_end(session: Session) -> dict[str, Any]:
    """The fields of a session's `session:end` record: exit status, why, transcript digest, its execs."""
    return {
        "session_id": session.session_id,
        "exit_code": session.exit_code,
        "signal": session.signal_name,
        "reason": session.end_reason or "exited",
        "raw_len": session.ring.end,
        "transcript_sha256": session.transcript_sha256,
        "transcript_truncated": session.transcript.truncated if session.transcript else None,
        "transcript_error": session.transcript.error if session.transcript else None,
        "duration_ms": int(((session.ended_at or 0) - session.created) * 1000),
        **session.terminal.exec_trace.end_fields(),
    }


def open_ssh(settings: Settings, launcher: Launcher, recorder: Recorder) -> SshAccess:
    """The SSH side (asyncssh loads with the first SSH call) and its port forwards; a forward's end is a
    `forward:end` record."""
    forwards = ForwardRegistry(
        settings.ssh.max_forwards,
        on_end=lambda forward, reason: recorder.event("forward:end", forward.client_id, end_fields(forward, reason)),
        connected=connected,
        idle_timeout=settings.ssh.forward_idle_timeout,
    )
    return SshAccess(settings, forwards, on_helper=launcher.helper_started, helper_argv=launcher.helper_argv)


def publish_gauges(
    settings: Settings, metrics: Metrics, session_registry: SessionRegistry, ssh_access: SshAccess
) -> None:
    """The gauges of what is open now, read at scrape time, and the limits they run up to."""
    metrics.sessions_open.set_function(lambda: len(session_registry.sessions))
    metrics.sessions_running.set_function(
        lambda: sum(1 for session in session_registry.sessions.values() if session.state == "running")
    )
    metrics.sessions_max.set(settings.sessions.max_sessions)
    metrics.ssh_connections_open.set_function(ssh_access.connections)
    metrics.ssh_forwards_open.set_function(lambda: len(ssh_access.forwards.forwards))
    metrics.ssh_forwards_max.set(settings.ssh.max_forwards)
    metrics.calls_in_flight_max.set(settings.limits.max_concurrent_calls)


def publish_job_gauges(settings: Settings, metrics: Metrics, jobs: JobTable, outputs: OutputStore) -> None:
    metrics.jobs_running.set_function(jobs.running)
    metrics.jobs_max.set(settings.jobs.max_jobs)
    metrics.output_store_bytes.set_function(lambda: outputs.stored_bytes + outputs.pending_bytes)
    metrics.output_store_max_bytes.set(settings.jobs.output_store_bytes)


def tool_registry(session_registry: SessionRegistry) -> ToolRegistry:
    """Every tool, declared once, in the order tools/list shows them."""
    tools = ToolRegistry()
    local.register(tools)
    sessions.register(tools, session_registry)
    ssh.register(tools)
    diagnostics.register(tools)
    confirmation.register(tools)
    runbooks.register(tools)
    tools.save_schemas()
    return tools


def mcp_server(
    settings: Settings,
    tools: ToolRegistry,
    services: Services,
    token_verifier: TokenVerifier | None,
    oauth: OAuthProvider | None,
) -> MCPServer:
    """The MCP server: the tools behind the call router, the workflow and runbook prompts, the resources, and the
    notifications of changed lists. Prompt and resource reads are audited as context pulls."""
    router = ToolCallRouter(tools.entries, services)
    services.runner.recorder.metrics.calls_in_flight.set_function(lambda: router.in_flight)
    pulls = ContextPulls(settings, services.runner.recorder)
    runbook_context = RunbookContext(pulls, services.runbooks)
    # Validates the prompt definitions; runbook arguments `host`/`hosts` complete too.
    prompts = WorkflowPrompts(
        pulls,
        services.ssh,
        settings.policy.policy_mode,
        set(tools.entries),
        runbook_context.completion_source,
        guide_note=services.launcher.confinement.guide_note(),
    )
    bus = InMemorySubscriptionBus()  # 2026-07-28 clients hear of changed lists on their subscriptions/listen stream
    notifier = ListChangedNotifier(services.runbooks, bus, runbook_context.changed)
    mcp = MCPServer(
        name="relay-shell",
        title="relay-shell",
        version=__version__,
        instructions=services.runbooks.instructions(),
        tools=tools.sdk_tools(),
        log_level="WARNING",
        middleware=[notifier, router, runbook_context, prompts],
        lifespan=lambda app: connection_lifespan(
            services.sessions, services.jobs, services.ssh.forwards, notifier.watch_forever
        ),
        subscriptions=bus,
        **http_auth(settings, token_verifier, oauth),
    )
    declare_list_changed(mcp._lowlevel_server)
    leave_out_idle_spans(mcp.middleware)
    register_context(mcp, pulls, settings, services.ssh)
    prompts.register(mcp)
    runbook_context.register(mcp)
    return mcp


def leave_out_idle_spans(middleware: list[Any]) -> None:
    """The SDK wraps every request in an OpenTelemetry span: ~4 µs warm, 15–30 µs a call under load (adr/0030
    Round 8). With no tracer provider installed every span is a no-op (opentelemetry-sdk is no dependency of
    relay-shell; `opentelemetry-instrument` or OTEL_PYTHON_TRACER_PROVIDER installs one before the server is built),
    so the middleware is left out; with one, it stays and the spans are made as before."""
    from mcp.server._otel import OpenTelemetryMiddleware
    from opentelemetry import trace

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        middleware[:] = [layer for layer in middleware if not isinstance(layer, OpenTelemetryMiddleware)]


def http_auth(settings: Settings, token_verifier: TokenVerifier | None, oauth: OAuthProvider | None) -> dict[str, Any]:
    """The SDK's auth settings for the HTTP transport; none (and auth/ unloaded) without tokens or OAuth."""
    if token_verifier is None and oauth is None:
        return {}
    from relay_shell.auth.setup import server_auth

    return server_auth(settings, token_verifier, oauth)


@asynccontextmanager
async def connection_lifespan(
    session_registry: SessionRegistry,
    jobs: JobTable,
    forwards: ForwardRegistry,
    watch_runbooks: Callable[[], Coroutine[Any, Any, None]],
) -> AsyncIterator[dict[str, Any]]:
    """Entered once per served connection (a stdio stream, an in-memory client): the reapers (and the runbook
    watcher, one per server) run meanwhile, and when the connection ends the sessions and port forwards of
    clients that are gone are closed at once (and jobs whose stream is gone are ended)."""
    async with anyio.create_task_group() as group:
        group.start_soon(session_registry.reap_forever)
        group.start_soon(forwards.reap_forever)
        group.start_soon(watch_runbooks)
        try:
            yield {}
        finally:
            await session_registry.close_disconnected()
            await jobs.close_disconnected()
            await forwards.close_disconnected()
            group.cancel_scope.cancel()


def protect_own_files(settings: Settings) -> None:
    """The files no command may write, move or delete in any mode (policy/own_files.py): the audit log and its
    rotations, the checkpoint signing key, the token file, the syslog TLS client key, certificate and CAs (a
    replaced CA file sends the log to another collector), the OAuth state directory."""
    offhost = settings.offhost
    own = (
        offhost.audit_signing_key,
        settings.auth.token_file,
        offhost.audit_syslog_key,
        offhost.audit_syslog_cert,
        offhost.audit_syslog_ca,
    )
    files = [str(path) for path in own if path]
    directories = [str(settings.auth.oauth_state_dir)] if settings.auth.oauth_state_dir else []
    own_files.protect(files, rotated=[str(settings.audit.audit_path)], directories=directories)
