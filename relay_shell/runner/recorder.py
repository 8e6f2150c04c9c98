"""Writing the audit records and counting them: every record the server writes goes through here (the log is
audit/log.py; this adds the metrics, the fail-closed refusal, the call ids and the records of events that are no
tool call: a session's end, a forward's end, OAuth grants, late execs, this process's `server:start`)."""

from __future__ import annotations

import itertools
import os
import secrets
import sys
import time
from collections.abc import Container
from typing import Any

from relay_shell import __version__
from relay_shell.audit.log import AuditLog, AuditWriteError
from relay_shell.audit.record import redact_text
from relay_shell.identity import Identity
from relay_shell.metrics import Metrics
from relay_shell.runner.records import event_record
from relay_shell.settings.model import Settings

# Records that are the server's own events, not tool calls: their labels may become metric labels.
EVENT_PREFIXES = ("prompt:", "resource:", "session:", "oauth:", "confirm:", "forward:", "server:", "gate:")


def metric_label(label: str, tool_names: Container[str] = ()) -> str:
    """A record's label as a metric label: one of ours (a tool, an event), else `unknown`, so that a client cannot
    add series by naming things."""
    return label if label in tool_names or label.startswith(EVENT_PREFIXES) else "unknown"


class Recorder:
    def __init__(self, settings: Settings, audit_log: AuditLog, metrics: Metrics) -> None:
        self.audit_log = audit_log
        self.metrics = metrics
        self.refuse_unrecorded = settings.audit.audit_on_failure == "refuse"  # RELAY_SHELL_AUDIT_ON_FAILURE
        # call_id = this process's random tag + a counter: unique in the log across restarts, cheap per call.
        self.call_tag = secrets.token_hex(6)
        self._call_numbers = itertools.count(1)
        self._call_counters: dict[tuple[str, int, str], Any] = {}
        self._call_durations: dict[str, Any] = {}
        self.refused_calls = 0  # calls refused because the log could not be written (shown by server_info)
        self.interrupted_at_start = 0  # calls the previous process left interrupted (its server:start record)

    def new_call_id(self) -> str:
        return f"{self.call_tag}-{next(self._call_numbers)}"

    def write(self, record: dict[str, Any], counted_as: str, tier: int, outcome: str, started: float) -> bool:
        """Append a record that says how something ended and count it under the metric label `counted_as` (see
        metric_label), its tier and outcome, with its duration. False when it could not be written."""
        failed = self.append(record)
        key = (counted_as, tier, outcome)
        counter = self._call_counters.get(key)
        if counter is None:  # labels() resolves a child each time; calls repeat the same few combinations
            counter = self._call_counters[key] = self.metrics.tool_calls.labels(
                tool=counted_as, tier=str(tier), outcome=outcome
            )
        counter.inc()
        duration = self._call_durations.get(counted_as)
        if duration is None:
            duration = self._call_durations[counted_as] = self.metrics.call_duration.labels(tool=counted_as)
        duration.observe(time.monotonic() - started)
        return failed is None

    def write_start(self, record: dict[str, Any]) -> str | None:
        """The write-ahead record of an admitted call, on disk (and fsynced with AUDIT_FSYNC=always) before its
        plan executes. Returns the refusal when it could not be written and AUDIT_ON_FAILURE is refuse."""
        failed = self.append(record)
        return self.refusal(failed) if failed is not None else None

    def append(self, record: dict[str, Any]) -> AuditWriteError | None:
        try:
            self.audit_log.write(record)
        except AuditWriteError as exc:
            self.metrics.audit_errors.inc()
            self.metrics.audit_degraded.set(1)
            print(f"relay-shell: audit write failed: {exc}", file=sys.stderr)
            return exc
        self.metrics.audit_records.inc()
        self.metrics.audit_degraded.set(0)
        return None

    def unavailable(self) -> str | None:
        """Fail closed before anything runs if the log cannot be written: the refusal, or None."""
        try:
            self.audit_log.ensure_open()
        except AuditWriteError as exc:
            self.metrics.audit_errors.inc()
            self.metrics.audit_degraded.set(1)
            return self.refusal(exc)
        return None

    def refusal(self, exc: AuditWriteError) -> str | None:
        """What a call the log cannot record gets: refused (fail closed) unless AUDIT_ON_FAILURE=continue."""
        if not self.refuse_unrecorded:
            return None
        self.refused_calls += 1
        self.metrics.audit_refused_calls.inc()
        return f"AuditUnavailable: {exc}; the call was refused and nothing ran (RELAY_SHELL_AUDIT_ON_FAILURE=refuse)"

    def audit_counts(self) -> dict[str, int]:
        return {"refused_calls": self.refused_calls, "interrupted_at_start": self.interrupted_at_start}

    # -- events: records of what happens outside a tool call -------------------------------------------------

    def event(self, label: str, client_id: str, fields: dict[str, Any]) -> None:
        """A record for something that happened outside a tool call (a session ending: exit status, why,
        transcript digest). Tier 0, counted under its label."""
        started = time.monotonic()
        record = event_record(label, 0, "ok", Identity(request_id=None, client_id=client_id), {}, started)
        record.update(fields)
        self.write(record, metric_label(label), 0, "ok", started)

    def refused_event(self, label: str, client_id: str, tier: int, reason: str, fields: dict[str, Any]) -> None:
        """A denied record for something refused outside any call (a SOCKS destination named after the call)."""
        started = time.monotonic()
        record = event_record(label, tier, "denied", Identity(request_id=None, client_id=client_id), {}, started)
        record.update(fields)
        record["denied"] = True
        record["reason"] = redact_text(reason)[:512]
        self.write(record, metric_label(label), tier, "denied", started)

    def server_started(self, fields: dict[str, Any]) -> None:
        """This process's first record, `server:start`: its pid, version and call_id tag, and what the previous
        process left behind (the calls it left interrupted, what containment found of them; audit/interrupted.py)."""
        self.interrupted_at_start = int(fields.get("interrupted_count", 0))
        started = time.monotonic()
        record = event_record("server:start", 0, "ok", Identity(request_id=None, client_id="server"), {}, started)
        record.update(pid=os.getpid(), version=__version__, call_tag=self.call_tag, **fields)
        self.write(record, "server:start", 0, "ok", started)
