"""Prometheus metrics. Label values are server-authored constants (tool names, tiers, outcomes), never
user text, so a caller cannot blow up cardinality.

Metrics are collected only when something can read them (a listener is configured): prometheus-client costs
startup time (its import alone pulls in an HTTP server and client), which a stdio server without
METRICS_ADDR would pay for numbers nobody can scrape.
"""

from __future__ import annotations

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


class Metrics:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.registry: Any = None
        if not enabled:
            discard = _Discard()
            self.tool_calls: Any = discard
            self.call_duration: Any = discard
            self.audit_records: Any = discard
            self.audit_errors: Any = discard
            self.audit_degraded: Any = discard
            self.audit_refused_calls: Any = discard
            self.sessions_open: Any = discard
            self.ssh_connections_open: Any = discard
            self.gated_calls: Any = discard
            self.sessions_max: Any = discard
            self.sessions_running: Any = discard
            self.calls_in_flight: Any = discard
            self.calls_in_flight_max: Any = discard
            self.busy_refused_calls: Any = discard
            self.ssh_forwards_open: Any = discard
            self.ssh_forwards_max: Any = discard
            self.audit_shipped_records: Any = discard
            self.audit_ship_errors: Any = discard
            self.audit_ship_lag_records: Any = discard
            self.audit_ship_lag_seconds: Any = discard
            self.audit_checkpoints: Any = discard
            self.audit_checkpoint_failures: Any = discard
            self.execs_traced: Any = discard
            self.execs_denied: Any = discard
            self.denied_calls: Any = discard
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.denied_calls = Counter(
            "relay_shell_denied_calls",
            "Calls denied (outcome denied), whatever tool and tier; 0 from start-up, for the burst alert.",
            registry=self.registry,
        )
        self.tool_calls = _CallCounter(
            Counter(
                "relay_shell_tool_calls",
                "Tool calls and context pulls by tool, tier and outcome.",
                ["tool", "tier", "outcome"],
                registry=self.registry,
            ),
            self.denied_calls,
        )
        self.call_duration = Histogram(
            "relay_shell_tool_call_duration_seconds",
            "Wall time of tool calls and context pulls.",
            ["tool"],
            buckets=CALL_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.audit_records = Counter("relay_shell_audit_records", "Audit records written.", registry=self.registry)
        self.audit_errors = Counter(
            "relay_shell_audit_errors", "Audit records that could not be written.", registry=self.registry
        )
        self.audit_degraded = Gauge(
            "relay_shell_audit_degraded",
            "1 while the audit log cannot be written (calls are refused unless AUDIT_ON_FAILURE=continue).",
            registry=self.registry,
        )
        self.audit_refused_calls = Counter(
            "relay_shell_audit_refused_calls",
            "Calls refused because the audit log could not be written (their start record, or the log itself); "
            "nothing of them ran.",
            registry=self.registry,
        )
        self.sessions_open = Gauge(
            "relay_shell_sessions_open",
            "Terminal sessions held (running or ended, not yet closed).",
            registry=self.registry,
        )
        self.ssh_connections_open = Gauge(
            "relay_shell_ssh_connections_open", "Pooled SSH connections open.", registry=self.registry
        )
        self.gated_calls = Counter(
            "relay_shell_gated_calls",
            "Calls the briefing gate answered with runbooks instead of running them, by tool.",
            ["tool"],
            registry=self.registry,
        )
        self.execs_traced = Counter(
            "relay_shell_execs_traced",
            "execve/execveat calls of traced process trees (calls, local sessions), refused ones included.",
            registry=self.registry,
        )
        self.execs_denied = Counter(
            "relay_shell_execs_denied", "execs refused with EPERM by RELAY_SHELL_EXEC_DENY.", registry=self.registry
        )

        # What the rules and dashboard compare usage with (deploy/prometheus, deploy/grafana; adr/0021).
        self.sessions_max = Gauge(
            "relay_shell_sessions_max",
            "Terminal sessions allowed at once (RELAY_SHELL_MAX_SESSIONS).",
            registry=self.registry,
        )
        self.sessions_running = Gauge(
            "relay_shell_sessions_running",
            "Terminal sessions whose program still runs (an ended one is evicted to make room, a running one never).",
            registry=self.registry,
        )
        self.calls_in_flight = Gauge("relay_shell_calls_in_flight", "Tool calls running now.", registry=self.registry)
        self.calls_in_flight_max = Gauge(
            "relay_shell_calls_in_flight_max",
            "Tool calls allowed to run at once (RELAY_SHELL_MAX_CONCURRENT_CALLS); beyond it a call is refused "
            "as Busy.",
            registry=self.registry,
        )
        self.busy_refused_calls = Counter(
            "relay_shell_busy_refused_calls",
            "Calls refused as Busy because RELAY_SHELL_MAX_CONCURRENT_CALLS calls were running; nothing of them ran.",
            registry=self.registry,
        )
        self.ssh_forwards_open = Gauge(
            "relay_shell_ssh_forwards_open", "SSH port forwards open, all clients together.", registry=self.registry
        )
        self.ssh_forwards_max = Gauge(
            "relay_shell_ssh_forwards_max",
            "SSH port forwards allowed at once (RELAY_SHELL_MAX_FORWARDS).",
            registry=self.registry,
        )

        # Shipping and signed checkpoints (adr/0020). The target series exist from the start (0), shipping on or off,
        # so alert rules and dashboards see the metric rather than no data.
        self.audit_shipped_records = Counter(
            "relay_shell_audit_shipped_records",
            "Audit records sent to the off-host collector, by target (resends after an outage included).",
            ["target"],
            registry=self.registry,
        )
        self.audit_ship_errors = Counter(
            "relay_shell_audit_ship_errors",
            "Shipping failures by target: connection refused or lost, TLS verification, a position not found.",
            ["target"],
            registry=self.registry,
        )
        for target in ("syslog", "journald"):
            self.audit_shipped_records.labels(target=target)
            self.audit_ship_errors.labels(target=target)
        self.audit_ship_lag_records = Gauge(
            "relay_shell_audit_ship_lag_records",
            "Audit records written and not yet sent to the collector (0 when shipping is off).",
            registry=self.registry,
        )
        self.audit_ship_lag_seconds = Gauge(
            "relay_shell_audit_ship_lag_seconds",
            "Seconds shipping has been behind the log (0 when caught up or off).",
            registry=self.registry,
        )
        self.audit_checkpoints = Counter(
            "relay_shell_audit_checkpoints", "Signed audit checkpoints written.", registry=self.registry
        )
        self.audit_checkpoint_failures = Counter(
            "relay_shell_audit_checkpoint_failures",
            "Checkpoints that could not be signed or written (no record was lost).",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        import prometheus_client

        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, host: str, port: int) -> int:
        """Start the loopback listener used while serving stdio; returns the bound port (port 0 picks one)."""
        import prometheus_client

        server, _thread = prometheus_client.start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_address[1])
