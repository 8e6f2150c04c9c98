"""What the operations tests call: the deploy files, Prometheus's HTTP API, and the names /metrics exports."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import yaml

from tests.e2e.http.server import HttpServer

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
RULES = DEPLOY / "prometheus" / "relay-shell-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "relay-shell-dashboard.json"
METRIC_NAME = re.compile(r"\brelay_shell_[a-z0-9_]+")

# What issue 20 asks the dashboard to show, by a metric each needs.
DASHBOARD_MUST_SHOW = {
    "relay_shell_tool_calls_total",  # calls by tool, tier, outcome; denied and confirmation rates
    "relay_shell_tool_call_duration_seconds_bucket",  # latency
    "relay_shell_audit_degraded",  # audit health
    "relay_shell_audit_ship_lag_seconds",  # shipping lag
    "relay_shell_sessions_open",  # sessions
    "relay_shell_ssh_connections_open",  # SSH connections
    "relay_shell_ssh_forwards_open",  # forwards
    "relay_shell_execs_traced_total",  # exec trace counts
}


def target_of(server: HttpServer) -> str:
    return server.url.removeprefix("http://").removesuffix("/mcp")


def ready(base: str) -> bool:
    try:
        return httpx2.get(f"{base}/-/ready", timeout=2).status_code == 200
    except httpx2.HTTPError:
        return False


async def api(base: str, path: str, **params: str) -> Any:
    async with httpx2.AsyncClient() as http:
        answer = await http.get(f"{base}/api/v1/{path}", params=params, timeout=10)
    body = answer.json()
    assert body["status"] == "success", body
    return body["data"]


async def samples(base: str, query: str) -> list[Any]:
    """The instant vector `query` gives now."""
    return list((await api(base, "query", query=query))["result"])


async def until(found: Callable[[], Awaitable[Any]], what: str, timeout: float = 45) -> Any:
    """Poll Prometheus (every 0.25 s) until `found` returns something true; its answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await found()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"after {timeout} s: {what}"
        await anyio.sleep(0.25)


def alert_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"]}


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def exported_names(exposition: str) -> set[str]:
    """Every sample name /metrics can carry, from its # TYPE lines: labelled metrics have no sample before their
    first use, but their TYPE line is there from the start. A histogram's samples are _bucket, _sum, _count."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        names.add(name)
        if kind == "histogram":
            names.update({f"{name}_bucket", f"{name}_sum", f"{name}_count"})
    return names
