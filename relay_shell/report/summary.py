"""What the report says before the timeline: counts, the charts' data, the policy in force, and the exceptions.

Everything here grows with the number of distinct names (tools, hosts, clients, hours), never with the number of
calls: each exception kind keeps its first LISTED rows for the page (the timeline's filter shows them all) and
counts the rest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from relay_shell.report.calls import FLAG, KINDS, Row

LISTED = 200  # rows listed per exception kind in the page itself
MAX_SERVERS = 1000  # server:start records listed
MAX_REASONS = 1000  # distinct (tier, reason) pairs of denials
MAX_FLOWS = 5000  # tier-3 confirmations followed step by step
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Listed:
    """One exception as the page lists it."""

    index: int
    call_id: str
    ts: str
    client: str
    tool: str
    hosts: str
    summary: str
    outcome: str
    note: str


@dataclass
class Flow:
    """A tier-3 confirmation: the records that carry its digest, in order (asked, armed or answered, ran)."""

    steps: list[tuple[str, str, str, str, int]] = field(default_factory=list)  # ts, tool, what happened, client, row
    summary: str = ""


@dataclass
class Summary:
    calls: int = 0
    events: int = 0
    first_ts: str | None = None
    last_ts: str | None = None
    outcomes: Counter[str] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    hosts: Counter[str] = field(default_factory=Counter)
    clients: Counter[str] = field(default_factory=Counter)
    tiers: Counter[int] = field(default_factory=Counter)
    per_hour: Counter[tuple[int, str]] = field(default_factory=Counter)  # (hour start in ms, outcome) -> calls
    kind_counts: Counter[str] = field(default_factory=Counter)
    flagged: int = 0  # rows with any exception
    listed: dict[str, list[Listed]] = field(default_factory=lambda: {name: [] for name, _ in KINDS})
    denials: Counter[tuple[int, str]] = field(default_factory=Counter)
    flows: dict[str, Flow] = field(default_factory=dict)
    servers: list[dict[str, Any]] = field(default_factory=list)
    sessions: int = 0

    def add(self, row: Row) -> None:
        values = row.values
        if row.is_call:
            self.calls += 1
            self.outcomes[row.outcome] += 1
            self.tools[row.tool] += 1
            self.clients[row.client] += 1
            self.tiers[values[6]] += 1
            for host in row.hosts:
                self.hosts[host] += 1
            if row.time_ms is not None:
                self.per_hour[(row.time_ms - row.time_ms % HOUR_MS, row.outcome)] += 1
        else:
            self.events += 1
        if row.ts and (self.first_ts is None or row.ts < self.first_ts):
            self.first_ts = row.ts
        if row.ts and (self.last_ts is None or row.ts > self.last_ts):
            self.last_ts = row.ts
        if row.tool == "server:start" and len(self.servers) < MAX_SERVERS:
            self.servers.append(row.records[0])
        if row.tool in ("shell_spawn", "ssh_spawn") and row.outcome in ("ok", "timeout"):
            self.sessions += 1
        if row.outcome == "denied" and (len(self.denials) < MAX_REASONS or (values[6], values[14]) in self.denials):
            self.denials[(values[6], str(values[14] or ""))] += 1
        self._follow_confirmation(row)
        if row.flags:
            self._list(row)

    def _list(self, row: Row) -> None:
        self.flagged += 1
        values = row.values
        entry = Listed(
            row.index,
            str(values[0]),
            row.ts,
            row.client,
            row.tool,
            ", ".join(row.hosts),
            str(values[10]),
            row.outcome,
            str(values[14] or ""),
        )
        for name, _ in KINDS:
            if row.flags & FLAG[name]:
                self.kind_counts[name] += 1
                if len(self.listed[name]) < LISTED:
                    self.listed[name].append(entry)

    def _follow_confirmation(self, row: Row) -> None:
        for record in row.records:
            digest = record.get("confirmation")
            if not isinstance(digest, str):
                continue
            flow = self.flows.get(digest)
            if flow is None:
                if len(self.flows) >= MAX_FLOWS:
                    continue
                flow = self.flows[digest] = Flow(summary=str(row.values[10]))
            if len(flow.steps) < 20:
                flow.steps.append(
                    (str(record.get("ts", "")), str(record.get("tool")), _step(record), row.client, row.index)
                )

    def top(self, counter: Counter[str], count: int = 10) -> list[tuple[str, int]]:
        ranked = counter.most_common()
        if len(ranked) <= count:
            return ranked
        return [*ranked[: count - 1], (f"{len(ranked) - count + 1} others", sum(n for _, n in ranked[count - 1 :]))]


def _step(record: dict[str, Any]) -> str:
    """What one record of a confirmation says happened."""
    phase = record.get("phase")
    if record.get("tool") == "confirm:elicitation":
        return f"the human was asked: answer {record.get('answer')}"
    if record.get("tool") == "operation_confirm":
        return "confirmed with the token (armed)" if phase == "start" else f"token {record.get('outcome')}"
    if phase == "start":
        return f"ran ({record.get('decision')})"
    if record.get("outcome") == "confirm_required":
        return f"asked for confirmation: {record.get('reason', '')}"
    return f"ended: {record.get('outcome')}"
