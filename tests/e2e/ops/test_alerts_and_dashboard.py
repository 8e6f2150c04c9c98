"""The alerting rules and the dashboard against the real thing: a relay-shell HTTP server (a real process) scraped
by a real Prometheus (1 s scrape and evaluation intervals) that loads deploy/prometheus/relay-shell-rules.yml.
The audit log made immutable (`chattr +i`) fires the audit alerts; every metric the dashboard and the rules name
is exported by the server's /metrics; every dashboard query is valid PromQL. One server and one Prometheus for
the module (tests/e2e/ops/conftest.py); the tests poll Prometheus's HTTP API instead of sleeping. The rules' own
unit tests (promtool): tests/integration/test_prometheus_rules.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import text_of
from tests.e2e.http.server import HttpServer, call, client
from tests.e2e.ops.helpers import (
    DASHBOARD,
    DASHBOARD_MUST_SHOW,
    METRIC_NAME,
    RULES,
    alert_names,
    api,
    dashboard_queries,
    exported_names,
    samples,
    target_of,
    until,
)

pytestmark = pytest.mark.anyio


async def test_prometheus_loads_every_rule_and_nothing_fires_while_healthy(relay: HttpServer, prometheus: str) -> None:
    async def evaluated() -> list[dict[str, Any]] | None:
        rules = [rule for group in (await api(prometheus, "rules"))["groups"] for rule in group["rules"]]
        return rules if rules and all(rule["health"] == "ok" for rule in rules) else None

    async def scraped() -> bool:
        targets = (await api(prometheus, "targets"))["activeTargets"]
        return any(target["health"] == "up" and target["labels"]["instance"] == target_of(relay) for target in targets)

    await until(scraped, "Prometheus scraped relay-shell")
    rules = await until(evaluated, "every rule evaluated without error")
    assert {rule["name"] for rule in rules if rule["type"] == "alerting"} == alert_names()
    # A few evaluations on the healthy server's samples: no alert is pending or firing.
    await until(
        lambda: samples(prometheus, 'count_over_time(relay_shell_audit_errors_total{job="relay-shell"}[1m]) >= 3'),
        "three samples of the audit error counter",
    )
    assert (await api(prometheus, "alerts"))["alerts"] == []


async def test_every_metric_the_dashboard_and_the_rules_name_is_exported(relay: HttpServer) -> None:
    async with httpx2.AsyncClient() as http:
        exposition = (await http.get(relay.url.replace("/mcp", "/metrics"), timeout=10)).text
    exported = exported_names(exposition)
    on_dashboard = set(METRIC_NAME.findall(DASHBOARD.read_text()))  # queries, variables, descriptions
    in_rules = set(METRIC_NAME.findall(RULES.read_text()))
    assert on_dashboard >= DASHBOARD_MUST_SHOW, DASHBOARD_MUST_SHOW - on_dashboard
    assert in_rules, "the rules name no metric"
    missing = sorted((on_dashboard | in_rules) - exported)
    assert not missing, f"queried but not exported by /metrics: {missing}"


async def test_every_dashboard_query_is_valid_promql(prometheus: str) -> None:
    """Each query with Grafana's variables filled in as Grafana would (All is `.*`), run by the real Prometheus:
    a syntax error, a wrong function or mismatched operands fail here."""
    substitutions = {"$__rate_interval": "1m", "$job": ".*", "$instance": ".*"}
    queries = dashboard_queries()
    assert len(queries) >= 20
    for query in queries:
        resolved = query
        for variable, value in substitutions.items():
            resolved = resolved.replace(variable, value)
        assert "$" not in resolved, query  # a variable the dashboard does not define
        async with httpx2.AsyncClient() as http:
            answer = (await http.get(f"{prometheus}/api/v1/query", params={"query": resolved}, timeout=10)).json()
        assert answer["status"] == "success", (query, answer)


async def test_an_alert_fires_when_the_audit_log_is_made_unwritable(
    relay: HttpServer, prometheus: str, chattr: Any, tmp_path: Path
) -> None:
    instance = target_of(relay)
    errors = f'relay_shell_audit_errors_total{{instance="{instance}"}}'

    await until(lambda: samples(prometheus, f"{errors} == 0"), "a sample of the audit error counter at 0 first")
    marker = tmp_path / "ran"
    chattr("i", relay.audit_path)
    async with client(relay, None) as connected:
        refused = await call(connected, "shell_exec", command=f"touch {marker}")
    assert refused.is_error and text_of(refused).startswith("[ERROR: AuditUnavailable: "), text_of(refused)
    assert not marker.exists()

    async def firing() -> dict[str, dict[str, Any]] | None:
        alerts = {
            alert["labels"]["alertname"]: alert
            for alert in (await api(prometheus, "alerts"))["alerts"]
            if alert["state"] == "firing" and alert["labels"]["instance"] == instance
        }
        wanted = {"RelayShellAuditWriteFailing", "RelayShellCallsRefusedAuditUnavailable"}
        return alerts if wanted <= set(alerts) else None

    alerts = await until(firing, "the audit alerts firing")
    write_failing = alerts["RelayShellAuditWriteFailing"]
    assert write_failing["labels"]["severity"] == "critical"
    assert write_failing["annotations"]["summary"] == f"relay-shell on {instance} cannot write its audit log"
    refused_alert = alerts["RelayShellCallsRefusedAuditUnavailable"]
    # increase() extrapolates (1.27 for one call in a few seconds of samples): the text shows a whole number
    assert refused_alert["annotations"]["description"].startswith(
        f"Calls refused on {instance} in the last 5 minutes: 1. "
    ), refused_alert["annotations"]["description"]
