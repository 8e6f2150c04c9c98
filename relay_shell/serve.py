"""Starting the server (`relay-shell`, `relay-shell --check-config`), step by step: the settings, the audit log,
what takes it off the host, HTTP authentication, containment and what a killed predecessor left, the assembly, the
metrics listener, the banner, then the transport until it ends.

A step that meets a setting it cannot use raises ConfigError naming it (cli.py prints it as one line and exits with
code 2), before anything is served.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import TYPE_CHECKING

from relay_shell import __version__
from relay_shell.errors import ConfigError
from relay_shell.launch_trace_default import refuse_terminal_input
from relay_shell.launch_trace_probe import start_probe
from relay_shell.settings.load import load_settings, startup_warnings

if TYPE_CHECKING:
    from relay_shell.audit.interrupted import PreviousRun
    from relay_shell.audit.log import AuditLog
    from relay_shell.auth.setup import HttpAuth
    from relay_shell.containment.leftovers import Leftover
    from relay_shell.containment.units import Containment
    from relay_shell.offhost.setup import OffHost
    from relay_shell.server import Assembly
    from relay_shell.settings.model import Settings

# Imported while containment's cgroup setup waits in the kernel (~10 ms, start_containment).
_IMPORTED_WHILE_CONTAINMENT_STARTS = (
    "relay_shell.audit.interrupted",
    "relay_shell.containment.leftovers",
    "relay_shell.server",
)


def serve(check_only: bool) -> int:
    settings = load_configuration()
    if check_only:
        return check_configuration(settings)
    return run(settings)


def load_configuration() -> Settings:
    settings = load_settings()
    for warning in startup_warnings():
        print(f"relay-shell: warning: {warning}", file=sys.stderr)
    return settings


def check_configuration(settings: Settings) -> int:
    """--check-config: what serving would check first, without serving (the audit log is not opened)."""
    from relay_shell.audit.log import check_writable

    problem = check_writable(settings.audit.audit_path)
    if problem is not None:
        raise ConfigError(f"RELAY_SHELL_AUDIT_PATH: {problem}")
    if settings.http.transport == "http":  # the token file, the OAuth state and the bind address
        from relay_shell.auth.setup import check_http_settings

        check_http_settings(settings)
    if settings.offhost.audit_signing_key is not None:
        from relay_shell.offhost.signing_keys import KeyFileError, load_signing_key

        try:
            load_signing_key(settings.offhost.audit_signing_key)
        except KeyFileError as exc:
            raise ConfigError(f"RELAY_SHELL_AUDIT_SIGNING_KEY: {exc}") from None
    if settings.offhost.audit_syslog is not None:  # the CA and client certificate files hold usable PEM
        from relay_shell.offhost.setup import syslog_tls

        syslog_tls(settings)
    enforcement = ""
    if settings.policy.policy_mode == "readonly":  # a kernel that cannot enforce it: said, or (required) refused
        from relay_shell.launch_readonly import enforced_by, readonly_warnings, start_confinement
        from relay_shell.metrics import Metrics

        confinement = start_confinement(settings, Metrics(enabled=False))
        enforcement = f"; readonly enforced by {enforced_by(confinement)}"
        for warning in readonly_warnings(confinement):  # below Landlock ABI 6: what the kernel leaves undone
            print(f"relay-shell: {warning}", file=sys.stderr)
    print(
        f"relay-shell {__version__}: configuration OK (audit log {settings.audit.audit_path} is writable{enforcement})"
    )
    return 0


def run(settings: Settings) -> int:
    start_probe(settings)  # whether the exec trace works here, found by a copy of the server meanwhile
    terminal_note = refuse_terminal_input(settings.trace.exec_trace, settings.policy.policy_mode)  # one thread yet
    audit_log = open_audit_log(settings)
    offhost = start_offhost(settings, audit_log)
    http_auth = http_authentication(settings)
    containment = start_containment(settings)
    previous, leftovers = end_leftovers(settings, containment)
    assembly = assemble(settings, audit_log, http_auth, containment, offhost, previous, leftovers)
    metrics_note = start_metrics_listener(settings, assembly)
    print_banner(settings, assembly, offhost, metrics_note, terminal_note)
    collect_garbage_from_now_on()
    return serve_transport(settings, assembly, http_auth, audit_log)


def open_audit_log(settings: Settings) -> AuditLog:
    from relay_shell.audit.log import AuditLog, AuditWriteError

    audit = settings.audit
    audit_log = AuditLog(audit.audit_path, chain=audit.audit_chain, fsync=audit.audit_fsync == "always")
    try:
        audit_log.open()
    except AuditWriteError as exc:
        if audit.audit_on_failure == "refuse":
            raise ConfigError(f"RELAY_SHELL_AUDIT_PATH: {exc}") from None
        print(f"relay-shell: warning: {exc}; serving degraded (AUDIT_ON_FAILURE=continue)", file=sys.stderr)
    return audit_log


def start_offhost(settings: Settings, audit_log: AuditLog) -> OffHost | None:
    """The shipper and the checkpointer, when any is on (ConfigError for a key or certificate it cannot use)."""
    if not settings.offhost.ships():
        return None
    from relay_shell.offhost.setup import OffHost

    return OffHost(settings, audit_log)


def http_authentication(settings: Settings) -> HttpAuth | None:
    """The HTTP transport's authentication; None over stdio, which loads none of it."""
    if settings.http.transport != "http":
        return None
    from relay_shell.auth.setup import check_http_settings

    return check_http_settings(settings)


def start_containment(settings: Settings) -> Containment:
    from relay_shell.containment.start import ContainmentStart, ContainmentUnavailable
    from relay_shell.containment.units import scope_of
    from relay_shell.settings.limits import LimitSettings

    # Its cgroup setup waits in the kernel (~10 ms) in a thread while the server's modules are imported; the
    # containment is complete (result()) before anything below runs a process or looks for leftovers.
    containment_start = ContainmentStart(settings.limits.containment, scope_of(settings.audit.audit_path))
    try:
        for module in _IMPORTED_WHILE_CONTAINMENT_STARTS:
            importlib.import_module(module)
        raise_open_files_limit()  # before build_server: the port forwards' connection budget is derived from it
    except BaseException:
        containment_start.cancel()  # the thread may have moved this process into a new instance directory
        raise
    try:
        return containment_start.result()
    except ContainmentUnavailable as exc:
        raise ConfigError(
            f"RELAY_SHELL_CONTAINMENT={settings.limits.containment}: {exc}; allowed: "
            f"{LimitSettings.model_fields['containment'].description}"
        ) from None


def end_leftovers(settings: Settings, containment: Containment) -> tuple[PreviousRun, list[Leftover]]:
    """What a server of this audit log killed with -9 left running: the processes of the calls it left
    interrupted (start records without end records) are ended, background jobs of calls that ended are kept."""
    from relay_shell.audit.interrupted import find_interrupted
    from relay_shell.containment.leftovers import find_leftovers

    previous = find_interrupted(settings.audit.audit_path)  # before this process writes its own server:start record
    interrupted = {call.call_id for call in previous.interrupted} if previous.complete else None
    leftovers = find_leftovers(containment, interrupted_call_ids=interrupted)
    for leftover in leftovers:
        action = "ended" if leftover.ended else "kept"
        print(
            f"relay-shell: left by server {leftover.instance}: {leftover.unit}, {len(leftover.pids)} "
            f"process(es) {action}: {leftover.reason}",
            file=sys.stderr,
        )
    return previous, leftovers


def assemble(
    settings: Settings,
    audit_log: AuditLog,
    http_auth: HttpAuth | None,
    containment: Containment,
    offhost: OffHost | None,
    previous: PreviousRun,
    leftovers: list[Leftover],
) -> Assembly:
    from relay_shell.audit.interrupted import restart_fields
    from relay_shell.server import build_server

    tokens, oauth = (http_auth.tokens, http_auth.oauth) if http_auth is not None else (None, None)
    assembly = build_server(settings, audit_log, tokens, oauth, containment, offhost)
    restart = restart_fields(previous, [leftover.record() for leftover in leftovers])
    # The policy in force, for the auditor's report (adr/0023): a log says which rules each of its servers applied.
    policy: dict[str, str] = {
        "mode": settings.policy.policy_mode,
        "confirm_tier3": settings.policy.confirm_tier3,
        "exec_trace": assembly.launcher.tracer.state,  # what applies (on, off, unavailable), `auto` decided
        "gate": settings.runbooks.gate,
    }
    if assembly.launcher.confinement.state != "off":  # readonly: landlock ABI N, or classifier-only (adr/0024)
        policy["readonly_enforcement"] = assembly.launcher.confinement.label
    assembly.recorder.server_started({**restart, "policy": policy})
    if offhost is not None:  # after server:start: the first record this process ships or signs is its own start
        offhost.start()
    if not audit_log.healthy:
        assembly.metrics.audit_degraded.set(1)
    return assembly


def start_metrics_listener(settings: Settings, assembly: Assembly) -> str:
    """The loopback /metrics listener (METRICS_ADDR); the banner's note on it."""
    if settings.metrics.metrics_addr is None:
        return "off"
    host, port = settings.metrics.metrics_addr
    try:
        assembly.metrics_port = assembly.metrics.serve(host, port)
    except OSError as exc:
        raise ConfigError(f"RELAY_SHELL_METRICS_ADDR: cannot listen: {exc}") from None
    return f"http://{host}:{assembly.metrics_port}/metrics"


def print_banner(
    settings: Settings, assembly: Assembly, offhost: OffHost | None, metrics_note: str, terminal_note: str | None
) -> None:
    chain = "on" if settings.audit.audit_chain else "off"
    print(
        f"relay-shell {__version__} | transport {settings.http.transport} | policy {settings.policy.policy_mode} | "
        f"audit {settings.audit.audit_path} (chain {chain}) | metrics {metrics_note} | {assembly.launcher.banner()}"
        + (f" | {offhost.startup_note()}" if offhost is not None else ""),
        file=sys.stderr,
        flush=True,
    )
    notes = assembly.launcher.banner_notes() + ([terminal_note] if terminal_note is not None else [])
    for note in notes:
        print(f"relay-shell: {note}", file=sys.stderr, flush=True)


def serve_transport(settings: Settings, assembly: Assembly, http_auth: HttpAuth | None, audit_log: AuditLog) -> int:
    """Serve until the transport ends (stdin closed, a signal); the audit log is closed last."""
    if http_auth is not None:
        from relay_shell.http import serve_http

        try:
            serve_http(assembly, settings, http_auth)
        except OSError as exc:
            raise ConfigError(f"RELAY_SHELL_HTTP_PORT: cannot listen: {exc}") from None
        finally:
            audit_log.close()
        return 0
    print(
        "relay-shell: speaking MCP on stdin/stdout; connect by registering the command `relay-shell` in your "
        "MCP client (e.g. `claude mcp add relay-shell -- relay-shell`)",
        file=sys.stderr,
        flush=True,
    )
    import anyio

    try:
        anyio.run(_serve_stdio, assembly)
    except KeyboardInterrupt:
        pass
    finally:
        audit_log.close()
    return 0


def collect_garbage_from_now_on() -> None:
    """What startup made lives as long as the server: frozen, the garbage collector never walks it again (a full
    collection walked it in ~20 ms, on the event loop, every few hundred calls); then the collector, off during
    startup (cli.py), is on for what the calls make. Startup's own cyclic garbage, a few hundred objects, is
    frozen with it rather than paying a full collection to find it."""
    gc.freeze()
    gc.enable()


def raise_open_files_limit() -> None:
    """Raise the soft limit on open files (RLIMIT_NOFILE) to the hard limit. Every command, session, SSH
    connection and forwarded connection holds descriptors, and the usual soft limit of 1024 is kept low only for
    programs that use select(), which asyncio does not; port forwards may use half of the limit (ssh/forwards/traffic.py
    `connection_budget`), so a low one would starve them or, without that bound, everything else. Children
    inherit the raised limit. An operator's lower hard limit (LimitNOFILE=) still holds."""
    import contextlib
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20  # Linux caps descriptors at fs.nr_open anyway
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _serve_stdio(assembly: Assembly) -> None:
    """Serve until the client closes stdin or a signal (TERM, HUP, INT) arrives; then close every session,
    so no shell or job outlives the server."""
    import signal

    import anyio

    from relay_shell.stdio import stdio_transport

    async with anyio.create_task_group() as group:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as received:
                async for _ in received:
                    await assembly.shutdown()
                    group.cancel_scope.cancel()
                    return

        group.start_soon(stop_on_signal)
        group.start_soon(assembly.launcher.maintain_forever)
        server = assembly.mcp._lowlevel_server  # the SDK's own in-memory client reaches it the same way
        try:
            async with stdio_transport(assembly.runner.refused_by_transport) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            await assembly.shutdown()
            group.cancel_scope.cancel()
