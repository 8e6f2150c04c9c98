"""The end of every tool call, however it ended: its result text, its `end` record written, then its result for
the client (text and structuredContent). A result whose record could not be written is withheld (fail closed)."""

from __future__ import annotations

import time
from typing import Any

from mcp_types import CallToolResult, TextContent

from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.plan import Execution, Outcome, Plan
from relay_shell.results import result_text, structured_content
from relay_shell.runner.recorder import Recorder, metric_label
from relay_shell.runner.records import CallAudit, end_record
from relay_shell.runner.tools import ToolTable, shared_result_defaults


def empty_output() -> CapturedText:
    return BoundedCapture(1).result()


def stopped(outcome: Outcome, error: str | None) -> Execution:
    """A call that ends before (or instead of) running: refused, invalid, failed."""
    return Execution(status=outcome, output=empty_output(), error=error)


class Finisher:
    def __init__(self, recorder: Recorder, tools: ToolTable) -> None:
        self.recorder = recorder
        self.tools = tools
        # A call naming no tool of ours still gets every field all results share (those of ToolResult).
        self.unknown_defaults = shared_result_defaults(tools.values())

    def stop(
        self,
        call: CallAudit,
        tier: int,
        outcome: Outcome,
        error: str | None,
        plan: Plan | None = None,
        reason_withheld: bool = False,
    ) -> CallToolResult:
        """The result of a call that ends with no output of its own: refused, invalid, failed or cancelled."""
        return self.finish(call, tier, stopped(outcome, error), plan=plan, reason_withheld=reason_withheld)

    def finish(
        self,
        call: CallAudit,
        tier: int,
        execution: Execution,
        *,
        plan: Plan | None = None,
        phase: str = "end",
        label: str | None = None,
        reason_withheld: bool = False,
    ) -> CallToolResult:
        """The call's end record (or a tier-3 dialogue's `confirm` record), then its result. `label`: the record's
        when it is not the tool's (a gated call's record is the gate's event, `gate:brief`)."""
        duration_ms = int((time.monotonic() - call.started) * 1000)
        notes = plan.notes if plan is not None else []
        first, text = result_text(execution, tier, plan.timeout if plan is not None else None, notes)
        if plan is not None and plan.recorded_arguments is not None:
            # A send that found echo off only as it typed: the end record withholds the input (adr/0014).
            call.record_as(plan.recorded_arguments)
        label = label or call.tool
        record = end_record(label, call, tier, execution, text, plan, phase, reason_withheld, duration_ms)
        outcome = execution.status
        written = self.recorder.write(record, metric_label(label, self.tools), tier, outcome, call.started)
        entry = self.tools.get(call.tool)
        defaults = entry.result_defaults if entry is not None else self.unknown_defaults
        if not written and self.recorder.refuse_unrecorded and outcome not in ("denied", "error"):
            # It ran, but without its record the result may not be shown: fail closed, say what happened. Its
            # start record is in the log, so `audit verify` lists the call as interrupted.
            what = "nothing ran" if outcome in ("confirm_required", "gated") else f"the call ran ({first})"
            message = (
                f"AuditWriteFailed: {what} but its audit record could not be written "
                f"({self.recorder.audit_log.last_error}); output withheld"
            )
            return reply(f"[ERROR: {message}]", defaults, tier, stopped("error", message), duration_ms, notes)
        return reply(text, defaults, tier, execution, duration_ms, notes)

    def result_of(
        self, call: CallAudit, tier: int, execution: Execution, plan: Plan, message: str | None = None
    ) -> CallToolResult:
        """A result no record goes with (a call that yielded: its end record comes when its job ends); with
        `message`, the error that replaces it."""
        duration_ms = int((time.monotonic() - call.started) * 1000)
        entry = self.tools.get(call.tool)
        defaults = entry.result_defaults if entry is not None else self.unknown_defaults
        if message is not None:
            return reply(f"[ERROR: {message}]", defaults, tier, stopped("error", message), duration_ms, plan.notes)
        _, text = result_text(execution, tier, plan.timeout, plan.notes)
        return reply(text, defaults, tier, execution, duration_ms, plan.notes)


def reply(
    text: str, defaults: dict[str, Any], tier: int, execution: Execution, duration_ms: int, notes: list[str]
) -> CallToolResult:
    outcome = execution.status
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured_content(defaults, outcome, tier, execution, duration_ms, notes, execution.error),
        is_error=outcome not in ("ok", "exit_nonzero", "running"),
    )
