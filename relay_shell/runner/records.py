"""The audit records the runner writes, built here: every record's common fields, a call's `start` record (written
before it runs) and its `end` record (how it ended, digests of what it returned). Arguments reach a record
redacted and summarised (audit/record.py), reasons redacted and cut."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from relay_shell.audit.log import RECORD_VERSION, utc_timestamp
from relay_shell.audit.record import audit_arguments, output_digests, redact_text
from relay_shell.capture import CapturedText
from relay_shell.identity import Identity
from relay_shell.plan import Execution, Plan


@dataclass
class CallAudit:
    """What every record of one tool call shares."""

    tool: str  # the record's label: the tool, or `unknown` for a name that is not one of ours
    identity: Identity
    started: float  # time.monotonic()
    call_id: str
    arguments: dict[str, Any] = field(default_factory=dict)  # what the record may keep (filtered, or replaced)
    _audited: dict[str, Any] | None = None

    def audited_arguments(self) -> dict[str, Any]:
        """The arguments redacted and summarised, once for both records (unless `record_as` replaced them)."""
        if self._audited is None:
            self._audited = audit_arguments(self.arguments)
        return self._audited

    def record_as(self, arguments: dict[str, Any]) -> None:
        """What the records still to be written keep of the arguments from now on."""
        if arguments is not self.arguments:
            self.arguments = arguments
            self._audited = None


def record_of(label: str, identity: Identity, fields: dict[str, Any]) -> dict[str, Any]:
    """A record: version, time and label, then `fields` in their order, then who asked."""
    return {
        "v": RECORD_VERSION,
        "ts": utc_timestamp(),
        "tool": label,
        **fields,
        "request_id": identity.request_id,
        "client_id": identity.client_id,
    }


def event_record(
    label: str, tier: int, outcome: str, identity: Identity, args: dict[str, Any], started: float
) -> dict[str, Any]:
    """The fields of a record that says how something ended (`args` already redacted and summarised). A call's
    records add its call_id and phase; events (a session's end, an OAuth grant) are no call and have neither."""
    record = record_of(label, identity, {"tier": tier, "denied": False, "outcome": outcome, "args": args})
    record["duration_ms"] = int((time.monotonic() - started) * 1000)
    return record


def start_record(call: CallAudit, tier: int, decision: str, plan: Plan) -> dict[str, Any]:
    """The write-ahead record of an admitted call: what runs, where, and how it was admitted (adr/0014)."""
    fields = {
        "phase": "start",
        "call_id": call.call_id,
        "tier": tier,
        "denied": False,
        "decision": decision,
        "args": call.audited_arguments(),
    }
    record = record_of(call.tool, call.identity, fields)
    # a many-host call runs on the admitted hosts only: the refused ones are named
    known = {"denied_hosts": sorted(plan.denied_hosts), "target": plan.target, "session_id": plan.session_id}
    record.update({key: value for key, value in known.items() if value})
    if plan.confirmation is not None:
        record["confirmation"] = plan.confirmation
    return record


def end_record(
    label: str,
    call: CallAudit,
    tier: int,
    execution: Execution,
    text: str,
    plan: Plan | None,
    phase: str,
    reason_withheld: bool,
    duration_ms: int,
) -> dict[str, Any]:
    """A call's `end` record (or a tier-3 dialogue's `confirm` record): the outcome, digests of the result `text`
    and of stderr, the reason of a refusal or error, and the plan's target and fields."""
    outcome = execution.status
    captured: CapturedText = execution.output
    record = event_record(label, tier, outcome, call.identity, call.audited_arguments(), call.started)
    record.update(call_id=call.call_id, phase=phase, **output_digests(text, captured))
    record["denied"] = outcome == "denied"
    if execution.exit_code is not None:
        record["exit_code"] = execution.exit_code
    if execution.signal is not None:
        record["signal"] = execution.signal
    if execution.stderr is not None:
        record["stderr_sha256"] = execution.stderr.sha256
        record["stderr_len"] = execution.stderr.produced_bytes
    if captured.truncated:  # the result showed head + tail only (`output_id`, when kept, pages all of it)
        record["truncated"] = True
    if execution.stderr is not None and execution.stderr.truncated:
        record["stderr_truncated"] = True
    error = execution.error
    if error is not None and plan is not None and plan.recorded_arguments is not None:
        record["reason"] = "withheld: the refused input was typed at a password prompt"
    elif error is not None and reason_withheld:
        record["reason"] = "withheld: it may quote an argument the record keeps only as a digest or not at all"
    elif error is not None:
        record["reason"] = redact_text(error)[:512]  # error texts may echo argument values
    if plan is not None and plan.target is not None:
        record["target"] = plan.target
    if plan is not None and plan.confirmation is not None:
        record["confirmation"] = plan.confirmation
    session_id = (plan.session_id if plan is not None else None) or execution.fields.get("session_id")
    if session_id:
        record["session_id"] = session_id
    if plan is not None and plan.record_fields:
        record.update(plan.record_fields)
    record["duration_ms"] = duration_ms  # as the result says
    return record
