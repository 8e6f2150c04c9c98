"""Audit records joined into the timeline's calls, as the log streams past.

A call's records share its `call_id`: a `start` record (write-ahead, adr/0014), `confirm` records while a human is
asked (tier 3), a `job` note when its command ran on as a job (adr/0028; its end record comes when the job ended),
and an `end` record. A call becomes a row when its end record arrives; a start record that no end
record follows is, at the end of the log, a call that was interrupted (a later `server:start` shows its server
was replaced) or is unended (still running, or its server died and never restarted). Records of no call (a
session's end, a forward's end or refusals, late execs, server starts, OAuth grants) are rows of their own, grouped
with the calls they belong to by shared keys (fields.group_keys).

Each row goes to three places at once: the compressed row stream (the timeline's table), the compressed details
(the call's records, for its page) and the summary (counts, charts, exceptions). Nothing but the calls still open
stays in memory.

A row is a JSON array, read by report.js by position:
    [call_id, start_ms, duration_ms, client, tool, hosts, tier, decision, outcome, exit, summary, groups, flags,
     seq, note]
client, tool, decision and outcome are indexes into the name tables, hosts a list of indexes; exit is the exit code
or the signal; note is the reason of a refusal or an error, or the trust problem of a record. start_ms and seq are
written as the difference from the previous row's (null when the record has none): they grow slowly, and small
differences compress to a fraction of the full numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relay_shell.report import fields

# Exception kinds, in the order the report shows them; a row's `flags` has bit 1 << index set for each.
KINDS: list[tuple[str, str]] = [
    ("trust", "Records that failed verification"),
    ("copy", "Records the collector's copy does not back"),
    ("denied", "Denied calls"),
    ("confirm", "Tier-3 confirmations"),
    ("audit_refused", "Refused for want of an audit record"),
    ("gated", "Gated calls (briefing first)"),
    ("exec_denied", "Denied execs"),
    ("late", "Late execs (after the call's end record)"),
    ("timeout", "Timeouts"),
    ("unended", "Calls interrupted or still running"),
    ("cut", "Calls whose output was cut"),
    ("error", "Errors and cancelled calls"),
    ("transcript", "Transcripts that do not match their record"),
]
FLAG = {name: 1 << index for index, (name, _) in enumerate(KINDS)}
HIDDEN_TOOLS = frozenset({"audit:checkpoint", "audit:continue"})  # the banner counts them; they are no calls
MAX_NAMES = 5000  # distinct clients, tools, hosts … named one by one; the rest are "(other)"


class Names:
    """A name table: each distinct name once, rows hold its index."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index_of: dict[str, int] = {}

    def index(self, name: str) -> int:
        found = self.index_of.get(name)
        if found is not None:
            return found
        if len(self.names) >= MAX_NAMES:
            name = "(other)"
            if name in self.index_of:
                return self.index_of[name]
        self.index_of[name] = len(self.names)
        self.names.append(name)
        return self.index_of[name]


@dataclass(frozen=True)
class Window:
    """Which calls the report shows (--since, --until, --client); verification always covers the whole log."""

    since: str | None = None  # a record `ts`, inclusive
    until: str | None = None  # exclusive
    client: str | None = None

    def admits(self, ts: str, client_id: str) -> bool:
        if self.since is not None and ts < self.since:
            return False
        if self.until is not None and ts >= self.until:
            return False
        if self.client is None:
            return True
        # Exactly as recorded: `alice` matched http:alice and stdio:alice, two clients an auditor must tell apart
        # (a name is what a client declares; the transport is not), review N6.
        return client_id == self.client


@dataclass
class Pending:
    """A call whose end record has not arrived yet."""

    start: dict[str, Any] | None = None
    confirms: list[dict[str, Any]] = field(default_factory=list)  # and a job's note, in log order
    server_starts_before: int = 0


@dataclass
class Row:
    """A row as the summary sees it (its JSON form is `values`)."""

    values: list[Any]
    index: int
    time_ms: int | None
    ts: str
    client: str
    tool: str
    hosts: list[str]
    outcome: str
    flags: int
    records: list[dict[str, Any]]
    is_call: bool  # a tool call's (or a context pull's) records, not an event such as a session's end


class Timeline:
    def __init__(self, window: Window, emit: Callable[[list[Any], Any], int], summarise: Callable[[Row], None]):
        self.window = window
        self.emit = emit  # writes a row and its detail; returns the row's index
        self.summarise = summarise
        self.clients, self.tools, self.hosts, self.decisions, self.outcomes = (Names() for _ in range(5))
        self.open: dict[str, Pending] = {}
        self.session_hosts: dict[str, list[str]] = {}
        self.server_starts = 0
        self.named_interrupted: set[str] = set()  # call ids a server:start lists as left interrupted
        self.outside_window = 0
        self.previous_time = 0
        self.previous_seq = 0

    def add(self, record: dict[str, Any]) -> None:
        """One record, in log order. `_problem` / `_copy` on it mark what verification or the copy found."""
        tool = str(record.get("tool"))
        phase = record.get("phase")
        call_id = record.get("call_id")
        if tool in HIDDEN_TOOLS and "_problem" not in record and "_copy" not in record:
            return
        if tool == "server:start":
            self.server_starts += 1
            listed = record.get("interrupted")
            if isinstance(listed, list):
                self.named_interrupted.update(str(entry.get("call_id")) for entry in listed if isinstance(entry, dict))
        if not isinstance(call_id, str) or phase not in ("start", "confirm", "job", "end"):
            self._row(None, [], record, fields.summary(record))
            return
        if phase == "end":
            pending = self.open.pop(call_id, None) or Pending()
            self._row(pending.start, pending.confirms, record, fields.summary(pending.start or record))
            return
        pending = self.open.setdefault(call_id, Pending(server_starts_before=self.server_starts))
        if phase == "start":
            pending.start = record
        else:
            pending.confirms.append(record)

    def finish(self) -> None:
        """The calls no end record followed."""
        for call_id, pending in self.open.items():
            first = pending.start or pending.confirms[0]
            replaced = call_id in self.named_interrupted or self.server_starts > pending.server_starts_before
            outcome = "interrupted" if replaced else "unended"
            self._row(pending.start, pending.confirms, None, fields.summary(first), outcome)
        self.open = {}

    def _row(
        self,
        start: dict[str, Any] | None,
        confirms: list[dict[str, Any]],
        end: dict[str, Any] | None,
        summary: str,
        unended_outcome: str = "",
    ) -> None:
        records = [record for record in (start, *confirms, end) if record is not None]
        first = records[0]
        last = records[-1]
        ts = str(first.get("ts", ""))
        client = str(last.get("client_id") or first.get("client_id") or "")
        if not self.window.admits(ts, client):
            self.outside_window += 1
            return
        tool = str(first.get("tool"))
        outcome = str(end.get("outcome", "ok")) if end is not None else unended_outcome
        hosts = self._hosts(tool, start or last)
        flags = self._flags(start, confirms, end, outcome)
        note = _note(records, end)
        groups: list[str] = []
        for record in records:
            groups += [key for key in fields.group_keys(record) if key not in groups]
        exit_value = end.get("exit_code") if end is not None else None
        if exit_value is None and end is not None:
            exit_value = end.get("signal")
        tier = max((record.get("tier", 0) for record in records if isinstance(record.get("tier"), int)), default=0)
        time_ms = fields.epoch_ms(ts)
        seq = first.get("seq") if isinstance(first.get("seq"), int) else None
        values = [
            first.get("call_id") if first.get("phase") else f"{tool}@{seq}",
            None if time_ms is None else time_ms - self.previous_time,
            end.get("duration_ms") if end is not None else None,
            self.clients.index(client),
            self.tools.index(tool),
            [self.hosts.index(host) for host in hosts],
            tier,
            self.decisions.index(_decision(start, end, outcome)),
            self.outcomes.index(outcome),
            exit_value,
            summary,
            groups or None,
            flags,
            None if seq is None else seq - self.previous_seq,
            note,
        ]
        self.previous_time = time_ms if time_ms is not None else self.previous_time
        self.previous_seq = seq if seq is not None else self.previous_seq
        index = self.emit(values, _detail(start, confirms, end))
        is_call = first.get("phase") is not None
        self.summarise(Row(values, index, time_ms, ts, client, tool, hosts, outcome, flags, records, is_call))

    def _hosts(self, tool: str, record: dict[str, Any]) -> list[str]:
        hosts = fields.hosts_of(record)
        session_id = fields.session_of(record)
        if not hosts and tool in fields.LOCAL_TOOLS:
            hosts = ["local"]
        if session_id is not None:
            if tool in ("shell_spawn", "ssh_spawn") and hosts:
                self.session_hosts[session_id] = hosts
            elif not hosts:
                hosts = self.session_hosts.get(session_id, [])
        return hosts

    def _flags(
        self, start: dict[str, Any] | None, confirms: list[dict[str, Any]], end: dict[str, Any] | None, outcome: str
    ) -> int:
        flags = 0
        records = [record for record in (start, *confirms, end) if record is not None]
        if any("_problem" in record for record in records):
            flags |= FLAG["trust"]
        if any("_copy" in record for record in records):
            flags |= FLAG["copy"]
        if outcome == "denied":
            flags |= FLAG["denied"]
        asked = [record for record in confirms if record.get("phase") == "confirm"]
        if asked or outcome == "confirm_required" or (start or {}).get("decision") == "confirmed":
            flags |= FLAG["confirm"]
        reason = str((end or {}).get("reason", ""))
        if reason.startswith(("AuditUnavailable", "AuditWriteFailed")):
            flags |= FLAG["audit_refused"]
        if outcome == "gated" or (end or {}).get("tool") == "gate:brief":
            flags |= FLAG["gated"]
        last = records[-1]
        if fields.execs_denied(last):
            flags |= FLAG["exec_denied"]
        if last.get("tool") == "exec:late":
            flags |= FLAG["late"]
        if outcome == "timeout":
            flags |= FLAG["timeout"]
        if end is None:
            flags |= FLAG["unended"]
        if end is not None and fields.output_cut(end):
            flags |= FLAG["cut"]
        if outcome in ("error", "cancelled") and not flags & FLAG["audit_refused"]:
            flags |= FLAG["error"]
        if last.get("_transcript") in ("altered", "missing"):
            flags |= FLAG["transcript"]
        return flags


def _decision(start: dict[str, Any] | None, end: dict[str, Any] | None, outcome: str) -> str:
    if start is not None:
        return str(start.get("decision", "admitted"))
    if end is None or "phase" not in end:
        return "event"
    named = {"denied": "denied", "confirm_required": "asked", "gated": "gated", "ok": "read"}
    return named.get(outcome, "not run")


def _note(records: list[dict[str, Any]], end: dict[str, Any] | None) -> str | None:
    problems = [str(record["_problem"]) for record in records if "_problem" in record]
    problems += [str(record["_copy"]) for record in records if "_copy" in record]
    if problems:
        return "; ".join(problems)[:400]
    reason = (end or records[-1]).get("reason")
    return str(reason)[:400] if reason else None


def _detail(start: dict[str, Any] | None, confirms: list[dict[str, Any]], end: dict[str, Any] | None) -> Any:
    """The call's records as recorded, for its page (without `v`, `prev` and `chain`: the banner's verification
    stands for them, and 128 hex digits a record would be most of the report's size). A start record's fields
    that the end record repeats are named in `_same` instead of written twice."""
    records: list[dict[str, Any]] = []
    if start is not None and end is not None:
        same = [name for name, value in start.items() if name in end and end[name] == value and name != "seq"]
        compact = {name: value for name, value in start.items() if name not in same}
        records.append({**compact, "_same": same} if same else compact)
    elif start is not None:
        records.append(start)
    records += confirms
    if end is not None:
        records.append(end)
    return records
