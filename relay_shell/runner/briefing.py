"""The briefing gate in the call pipeline (RELAY_SHELL_GATE=briefing; the gate's state is runbooks/gate.py): a
call of tier 1 or more from an MCP session that has not begun a task gets the runbooks its words select instead
of running, recorded as `gate:brief`; `begin_session` opens the gate, recorded as `gate:open`. With the gate off
nothing here runs, and nothing of runbooks/ is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_types import CallToolResult

from relay_shell.plan import Plan
from relay_shell.runner.finish import Finisher
from relay_shell.runner.recorder import metric_label
from relay_shell.runner.records import CallAudit, event_record
from relay_shell.runner.request import CallRequest

if TYPE_CHECKING:
    from relay_shell.runbooks.gate import BriefingGate


def hold_unbriefed(
    gate: BriefingGate, finisher: Finisher, request: CallRequest, call: CallAudit, plan: Plan, tier: int, cap: int
) -> CallToolResult | None:
    """None when the call may run; else its briefing, `[GATED: …]` (at most `cap` bytes), recorded as
    `gate:brief`: nothing ran."""
    from relay_shell.runbooks.gate import call_digest  # loaded already: the gate exists

    owner = request.owner
    digest = call_digest(call.tool, request.call_arguments())
    if gate.admits(owner, digest):
        return None
    held = gate.hold(call.tool, plan, request.arguments, cap)
    result = finisher.finish(call, tier, held, plan=plan, label="gate:brief")
    finisher.recorder.metrics.gated_calls.labels(tool=metric_label(call.tool, finisher.tools)).inc()
    if held.status == "gated" and (result.structured_content or {}).get("status") == "gated":
        gate.remember_briefed(owner, digest)  # recorded: the identical call runs when repeated
    return result


def open_gate(gate: BriefingGate, finisher: Finisher, request: CallRequest, call: CallAudit, plan: Plan) -> str | None:
    """begin_session succeeded: open the session's gate once its `gate:open` record is written. The failure, or
    None."""
    recorder = finisher.recorder
    record = event_record("gate:open", 0, "ok", call.identity, {}, call.started)
    record.update(plan.record_fields or {})
    if not recorder.write(record, "gate:open", 0, "ok", call.started) and recorder.refuse_unrecorded:
        return "AuditWriteFailed: the gate:open record could not be written; the gate stays shut"
    gate.open(request.owner)
    return None
