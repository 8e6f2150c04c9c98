"""Prometheus metrics. Label values are server-authored constants (tool names, tiers, outcomes), never
user text, so a caller cannot blow up cardinality.

Metrics are collected only when something can read them (a listener is configured): prometheus-client costs
startup time (its import alone pulls in an HTTP server and client), which a stdio server without
METRICS_ADDR would pay for numbers nobody can scrape.
"""

from __future__ import annotations

from typing import Any


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
            self.execs_traced: Any = discard
            self.execs_denied: Any = discard
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.tool_calls = Counter(
            "relay_shell_tool_calls",
            "Tool calls and context pulls by tool, tier and outcome.",
            ["tool", "tier", "outcome"],
            registry=self.registry,
        )
        self.call_duration = Histogram(
            "relay_shell_tool_call_duration_seconds",
            "Wall time of tool calls and context pulls.",
            ["tool"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
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

    def exposition(self) -> bytes:
        import prometheus_client

        return bytes(prometheus_client.generate_latest(self.registry))

    def serve(self, host: str, port: int) -> int:
        """Start the loopback listener used while serving stdio; returns the bound port (port 0 picks one)."""
        import prometheus_client

        server, _thread = prometheus_client.start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_address[1])
