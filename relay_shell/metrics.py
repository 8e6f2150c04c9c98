"""Prometheus metrics. Label values are server-authored constants (tool names, tiers, outcomes), never
user text, so a caller cannot blow up cardinality.

Metrics are collected only when something can read them (a listener is configured): prometheus-client costs
startup time (its import alone pulls in an HTTP server and client), which a stdio server without
METRICS_ADDR would pay for numbers nobody can scrape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# 1 ms (a context pull, a refusal) to 10 min (a long build, a fleet upgrade); longer calls land in +Inf
# (adr/0021). 1-2.5-5 per decade up to 10 s, then 30 s and 1, 2, 5, 10 min.
CALL_DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
)  # fmt: skip


class _Discard:
    """Stands in for a counter, gauge or histogram when metrics are off."""

    def labels(self, **labels: str) -> _Discard:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass

    def set_function(self, function: Any) -> None:
        pass


class _CallCounter:
    """`relay_shell_tool_calls_total{tool,tier,outcome}`, and every denied call also in the unlabelled
    `relay_shell_denied_calls_total`: that one exists (at 0) from start-up, so `increase()` sees a burst of
    denials on a tool and tier never denied before (a labelled series appears with its first value, which
    increase() does not count; adr/0021)."""

    def __init__(self, calls: Any, denied: Any) -> None:
        self.calls = calls
        self.denied = denied

    def labels(self, **labels: str) -> Any:
        child = self.calls.labels(**labels)
        return _DeniedChild(child, self.denied) if labels.get("outcome") == "denied" else child


class _DeniedChild:
    def __init__(self, child: Any, denied: Any) -> None:
        self.child = child
        self.denied = denied

    def inc(self, amount: float = 1) -> None:
        self.child.inc(amount)
        self.denied.inc(amount)


@dataclass(frozen=True)
class Definition:
    """One metric: the Metrics attribute that holds it, its kind, its name and help text, its label names."""

    attribute: str
    kind: str  # "counter", "gauge" or "histogram" (CALL_DURATION_BUCKETS)
    name: str
    documentation: str
    labels: tuple[str, ...] = ()


# Every metric, in the order the registry exposes them. `tool_calls` also counts denied calls into `denied_calls`
# (_CallCounter); the shipping targets' series exist from the start.
DEFINITIONS: tuple[Definition, ...] = (
    Definition(
        "denied_calls",
        "counter",
        "relay_shell_denied_calls",
        "Calls denied (outcome denied), whatever tool and tier; 0 from start-up, for the burst alert.",
    ),
    Definition(
        "tool_calls",
        "counter",
        "relay_shell_tool_calls",
        "Tool calls and context pulls by tool, tier and outcome.",
        ("tool", "tier", "outcome"),
    ),
    Definition(
        "call_duration",
        "histogram",
        "relay_shell_tool_call_duration_seconds",
        "Wall time of tool calls and context pulls.",
        ("tool",),
    ),
    Definition(
        "audit_records",
        "counter",
        "relay_shell_audit_records",
        "Audit records written.",
    ),
    Definition(
        "audit_errors",
        "counter",
        "relay_shell_audit_errors",
        "Audit records that could not be written.",
    ),
    Definition(
        "audit_degraded",
        "gauge",
        "relay_shell_audit_degraded",
        "1 while the audit log cannot be written (calls are refused unless AUDIT_ON_FAILURE=continue).",
    ),
    Definition(
        "audit_refused_calls",
        "counter",
        "relay_shell_audit_refused_calls",
        "Calls refused because the audit log could not be written (their start record, or the log itself); "
        "nothing of them ran.",
    ),
    Definition(
        "sessions_open",
        "gauge",
        "relay_shell_sessions_open",
        "Terminal sessions held (running or ended, not yet closed).",
    ),
    Definition(
        "ssh_connections_open",
        "gauge",
        "relay_shell_ssh_connections_open",
        "Pooled SSH connections open.",
    ),
    Definition(
        "gated_calls",
        "counter",
        "relay_shell_gated_calls",
        "Calls the briefing gate answered with runbooks instead of running them, by tool.",
        ("tool",),
    ),
    Definition(
        "execs_traced",
        "counter",
        "relay_shell_execs_traced",
        "execve/execveat calls of traced process trees (calls, local sessions), refused ones included.",
    ),
    Definition(
        "execs_denied",
        "counter",
        "relay_shell_execs_denied",
        "execs refused with EPERM by RELAY_SHELL_EXEC_DENY.",
    ),
    # Readonly enforced by the kernel (adr/0024).
    Definition(
        "readonly_kernel_enforcement",
        "gauge",
        "relay_shell_readonly_kernel_enforcement",
        "The Landlock ABI every process tree of a readonly call is confined with (below 6 partly: signals and "
        "abstract sockets are not scoped); 0: readonly runs classifier-only (no Landlock here), -1: the policy mode "
        "is not readonly.",
    ),
    Definition(
        "confined_trees",
        "counter",
        "relay_shell_confined_trees",
        "Process trees started confined (readonly mode: calls, terminal sessions).",
    ),
    Definition(
        "confinement_failures",
        "counter",
        "relay_shell_confinement_failures",
        "Readonly calls refused because the kernel would not confine their tree; nothing of them ran.",
    ),
    # What the rules and dashboard compare usage with (deploy/prometheus, deploy/grafana; adr/0021).
    Definition(
        "sessions_max",
        "gauge",
        "relay_shell_sessions_max",
        "Terminal sessions allowed at once (RELAY_SHELL_MAX_SESSIONS).",
    ),
    Definition(
        "sessions_running",
        "gauge",
        "relay_shell_sessions_running",
        "Terminal sessions whose program still runs (an ended one is evicted to make room, a running one never).",
    ),
    Definition(
        "calls_in_flight",
        "gauge",
        "relay_shell_calls_in_flight",
        "Tool calls running now.",
    ),
    Definition(
        "calls_in_flight_max",
        "gauge",
        "relay_shell_calls_in_flight_max",
        "Tool calls allowed to run at once (RELAY_SHELL_MAX_CONCURRENT_CALLS); beyond it a call is refused as Busy.",
    ),
    Definition(
        "busy_refused_calls",
        "counter",
        "relay_shell_busy_refused_calls",
        "Calls refused as Busy because RELAY_SHELL_MAX_CONCURRENT_CALLS calls were running; nothing of them ran.",
    ),
    Definition(
        "ssh_forwards_open",
        "gauge",
        "relay_shell_ssh_forwards_open",
        "SSH port forwards open, all clients together.",
    ),
    Definition(
        "ssh_forwards_max",
        "gauge",
        "relay_shell_ssh_forwards_max",
        "SSH port forwards allowed at once (RELAY_SHELL_MAX_FORWARDS).",
    ),
    # Shipping and signed checkpoints (adr/0020). The target series exist from the start (0), shipping on or off,
    # so alert rules and dashboards see the metric rather than no data.
    Definition(
        "audit_shipped_records",
        "counter",
        "relay_shell_audit_shipped_records",
        "Audit records sent to the off-host collector, by target (resends after an outage included).",
        ("target",),
    ),
    Definition(
        "audit_ship_errors",
        "counter",
        "relay_shell_audit_ship_errors",
        "Shipping failures by target: connection refused or lost, TLS verification, a position not found.",
        ("target",),
    ),
    Definition(
        "audit_ship_lag_records",
        "gauge",
        "relay_shell_audit_ship_lag_records",
        "Audit records written and not yet sent to the collector (0 when shipping is off).",
    ),
    Definition(
        "audit_ship_lag_seconds",
        "gauge",
        "relay_shell_audit_ship_lag_seconds",
        "Seconds shipping has been behind the log (0 when caught up or off).",
    ),
    Definition(
        "audit_checkpoints",
        "counter",
        "relay_shell_audit_checkpoints",
        "Signed audit checkpoints written.",
    ),
    Definition(
        "audit_checkpoint_failures",
        "counter",
        "relay_shell_audit_checkpoint_failures",
        "Checkpoints that could not be signed or written (no record was lost).",
    ),
    # Long-running work (adr/0028): jobs, and the memory that keeps cut results readable in full.
    Definition(
        "jobs_running",
        "gauge",
        "relay_shell_jobs_running",
        "Commands running on as jobs after their call yielded.",
    ),
    Definition(
        "jobs_max",
        "gauge",
        "relay_shell_jobs_max",
        "Jobs held at once, running or ended and kept (RELAY_SHELL_MAX_JOBS); beyond it a call waits for its end.",
    ),
    Definition(
        "output_store_bytes",
        "gauge",
        "relay_shell_output_store_bytes",
        "Bytes held to keep cut results readable in full: kept outputs and output of commands still running.",
    ),
    Definition(
        "output_store_max_bytes",
        "gauge",
        "relay_shell_output_store_max_bytes",
        "The bound on those bytes (RELAY_SHELL_OUTPUT_STORE_BYTES): the oldest kept output is dropped first.",
    ),
)
SHIP_TARGETS = ("syslog", "journald")


class Metrics:
    """The server's metrics, one attribute per DEFINITIONS entry (a stand-in that discards when metrics are off)."""

    tool_calls: Any
    call_duration: Any
    audit_records: Any
    audit_errors: Any
    audit_degraded: Any
    audit_refused_calls: Any
    sessions_open: Any
    ssh_connections_open: Any
    gated_calls: Any
    sessions_max: Any
    sessions_running: Any
    calls_in_flight: Any
    calls_in_flight_max: Any
    busy_refused_calls: Any
    ssh_forwards_open: Any
    ssh_forwards_max: Any
    audit_shipped_records: Any
    audit_ship_errors: Any
    audit_ship_lag_records: Any
    audit_ship_lag_seconds: Any
    audit_checkpoints: Any
    audit_checkpoint_failures: Any
    execs_traced: Any
    execs_denied: Any
    readonly_kernel_enforcement: Any
    confined_trees: Any
    confinement_failures: Any
    denied_calls: Any
    jobs_running: Any
    jobs_max: Any
    output_store_bytes: Any
    output_store_max_bytes: Any

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.registry: Any = None
        if not enabled:
            for definition in DEFINITIONS:
                setattr(self, definition.attribute, _Discard())
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        for definition in DEFINITIONS:
            if definition.kind == "histogram":
                metric: Any = Histogram(
                    definition.name,
                    definition.documentation,
                    definition.labels,
                    buckets=CALL_DURATION_BUCKETS,
                    registry=self.registry,
                )
            else:
                kind = Counter if definition.kind == "counter" else Gauge
                metric = kind(definition.name, definition.documentation, definition.labels, registry=self.registry)
            setattr(self, definition.attribute, metric)
        self.tool_calls = _CallCounter(self.tool_calls, self.denied_calls)
        for target in SHIP_TARGETS:
            self.audit_shipped_records.labels(target=target)
            self.audit_ship_errors.labels(target=target)

    def exposition(self) -> bytes:
        import prometheus_client

        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, host: str, port: int) -> int:
        """Start the loopback listener used while serving stdio; returns the bound port (port 0 picks one)."""
        import prometheus_client

        server, _thread = prometheus_client.start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_address[1])
