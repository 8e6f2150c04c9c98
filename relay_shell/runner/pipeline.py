"""THE audited path. Every tool call: identify → prepare → admit (policy) → brief (the gate) → confirm (tier 3) →
start record → execute → end record → metrics, read here from top to bottom. A call whose command outlives its
yield_after returns a job's handle instead, and its end record is written when the job ends (jobs.py).

Write-ahead (adr/0014): a call that runs anything gets a `start` record, on disk before anything executes, and an
`end` record before its result returns, paired by `call_id`. A call refused or invalid before it runs, and a pure
read (annotated read-only and touching nothing outside the server), gets the `end` record alone.

No other code writes audit records or builds tool results. Nothing raised below escapes to the transport:
failures become `[ERROR: …]` results with isError, and they are audited too. The records are built in records.py
and written by recorder.py, results finished in finish.py; the tier-3 dialogue is confirmation.py, the briefing
gate briefing.py, prompt and resource reads context.py.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp_types import CallToolResult

from relay_shell.audit.record import audit_arguments, redact_text
from relay_shell.errors import InputRequired, ToolError
from relay_shell.identity import Identity
from relay_shell.plan import Execution, Plan, Subject
from relay_shell.policy.admission import Policy
from relay_shell.progress import Progress
from relay_shell.runner.briefing import hold_unbriefed, open_gate
from relay_shell.runner.finish import Finisher, stopped
from relay_shell.runner.jobs import yielded
from relay_shell.runner.recorder import Recorder
from relay_shell.runner.records import CallAudit, event_record, start_record
from relay_shell.runner.request import CallRequest
from relay_shell.runner.tools import ToolEntry, ToolTable
from relay_shell.settings.model import Settings
from relay_shell.wire import RefusedCall

if TYPE_CHECKING:
    from relay_shell.runbooks.gate import BriefingGate
    from relay_shell.runner.confirmation import Confirmation

logger = logging.getLogger("relay_shell")
ReportProgress = Callable[[float, float | None, str], Any]


class Runner:
    def __init__(
        self,
        settings: Settings,
        recorder: Recorder,
        policy: Policy,
        tools: ToolTable,
        gate: BriefingGate | None = None,
    ) -> None:
        self.settings = settings
        self.recorder = recorder
        self.policy = policy
        self.tools = tools  # the tool registry's entries (surface/registry.py)
        # RELAY_SHELL_GATE=briefing: runbooks before the first calls; None when off (a gate made disabled is off)
        self.gate = gate if gate is not None and gate.enabled else None
        self.finisher = Finisher(recorder, tools)

    @functools.cached_property
    def confirmation(self) -> Confirmation:
        """The tier-3 dialogue and its pending tokens, made for the first tier-3 call or operation_confirm: with
        RELAY_SHELL_CONFIRM_TIER3=off (the default) a server never loads confirm/."""
        from relay_shell.runner.confirmation import Confirmation

        return Confirmation(self.settings, self.finisher)

    async def run(
        self, request: CallRequest, prepare: Callable[[], Plan], report_progress: ReportProgress | None = None
    ) -> CallToolResult:
        """Run one validated tool call: `prepare` checks the arguments and says what would run (a Plan)."""
        entry = self.tools.get(request.tool)
        call = self._call_audit(request.tool, request)
        call.arguments = entry.recordable(request.arguments, request.owner) if entry is not None else request.arguments
        refusal = self.recorder.unavailable()
        if refusal is not None:
            return self.finisher.stop(call, 0, "error", refusal)
        try:
            plan = prepare()
        except ToolError as exc:
            return self.finisher.stop(call, 0, "error", f"{exc.kind}: {exc}")
        except Exception as exc:  # a bug in preparation must still be a clean, audited result
            logger.exception("preparing %s failed", request.tool)
            return self.finisher.stop(call, 0, "error", f"Internal: {type(exc).__name__}")
        if plan.recorded_arguments is not None:
            call.arguments = plan.recorded_arguments

        admitted = self._admit(call, plan)
        if isinstance(admitted, CallToolResult):
            return admitted
        tier, reason = admitted
        if tier >= 1 and self.gate is not None:
            # After the policy (a refused call is refused, not briefed), before a human is asked to confirm.
            held = hold_unbriefed(self.gate, self.finisher, request, call, plan, tier, self.settings.limits.max_output)
            if held is not None:
                return held
        decision = "admitted"
        if tier == 3 and self.settings.policy.confirm_tier3 != "off":
            # After every deny and mode check: a refused call never reaches confirmation.
            stop = await self._confirm(request, call, plan, reason)
            if stop is not None:
                return stop
            decision = "confirmed"  # tier 3, and a human confirmed exactly this call

        if entry is None or not entry.pure_read:
            # Write-ahead: nothing runs unless its start record was written (or AUDIT_ON_FAILURE=continue).
            refusal = self.recorder.write_start(start_record(call, tier, decision, plan))
            if refusal is not None:
                return self.finisher.stop(call, tier, "error", refusal, plan)
        execution = await self._execute(call, plan, tier, report_progress)
        if execution.job is not None:  # the command runs on as a job: its end record comes with its end
            return await yielded(self.recorder, self.finisher, call, tier, execution, plan)
        # The gate opens only on a briefing that was made and returned: a failed begin_session briefed no one.
        if plan.opens_gate and execution.status == "ok" and self.gate is not None:
            failed = open_gate(self.gate, self.finisher, request, call, plan)
            if failed is not None:
                execution = stopped("error", failed)
        return self.finisher.finish(call, tier, execution, plan=plan)

    async def reject(self, request: CallRequest, arguments: Any, message: str) -> CallToolResult:
        """An invalid call caught before the tool function (unknown tool, argument names or types), or refused
        by the call router (not initialized, busy). `arguments`: the call's, as sent (maybe not an object)."""
        entry = self.tools.get(request.tool)
        # A name that is not one of ours is recorded as `unknown` (the message quotes it): a client must not be
        # able to write records that pass for the server's own events (`oauth:…`, `session:end`) or add metric
        # series.
        call = self._call_audit(request.tool if entry is not None else "unknown", request)
        call.arguments = rejected_arguments(entry, arguments, request.owner)
        # The message may quote a value the filter kept out of the record (`got ['<token>']`).
        withheld = entry is not None and entry.record_filter is not None and call.arguments != arguments
        return self.finisher.stop(call, 0, "error", message, reason_withheld=withheld)

    def refused_by_transport(self, client_name: str, refused: RefusedCall) -> None:
        """A tools/call the transport answered with a JSON-RPC error before any tool saw it (its id, encoding,
        shape or size: wire.py, adr/0016): its one record, with what could be read of it and the digest of the
        message as received. The transport names the client (it has no request context)."""
        started = time.monotonic()
        entry = self.tools.get(refused.tool) if isinstance(refused.tool, str) else None
        tool = refused.tool if entry is not None and isinstance(refused.tool, str) else "unknown"
        arguments = {} if refused.arguments is None else rejected_arguments(entry, refused.arguments, None)
        identity = Identity(request_id=refused.request_id, client_id=f"{self.settings.http.transport}:{client_name}")
        record = event_record(tool, 0, "error", identity, audit_arguments(arguments), started)
        record.update(call_id=self.recorder.new_call_id(), phase="end", reason=redact_text(refused.reason)[:512])
        record.update(message_len=refused.message_len, message_sha256=refused.message_sha256)
        if refused.http_status is not None:
            record["http_status"] = refused.http_status
        self.recorder.write(record, tool, 0, "error", started)

    def admit_later(
        self, label: str, client_id: str, subject: Subject, fields: dict[str, Any], write: bool = True
    ) -> str | None:
        """Admission for what a call set up and that happens later, outside any call (a connection through a
        SOCKS forward to a destination named only then): the policy decides; a refusal is written as a denied
        record under `label` and its reason returned. Admitted ones are not recorded (the call was), nor
        refusals with `write` false (the caller counts repeats of one it recorded, against a flood)."""
        decision = self.policy.decide(subject)
        if not decision.denied:
            return None
        if write:
            self.recorder.refused_event(label, client_id, decision.tier, decision.reason, fields)
        return decision.reason

    # -- the steps -------------------------------------------------------------------------------------------

    def _call_audit(self, label: str, request: CallRequest) -> CallAudit:
        return CallAudit(label, request.identity, time.monotonic(), self.recorder.new_call_id())

    def _admit(self, call: CallAudit, plan: Plan) -> tuple[int, str] | CallToolResult:
        """The call's tier and why (the policy's reason), or the result of a refusal. A many-host call is
        admitted host by host, and refused only when every host is."""
        try:
            decision = self.policy.decide(plan.subject)
            subjects = {} if decision.denied else plan.host_subjects or {}
            hosts = {name: self.policy.decide(subject) for name, subject in subjects.items()}
        except Exception as exc:
            logger.exception("policy failed for %s", call.tool)
            return self.finisher.stop(call, 3, "error", f"Policy: {type(exc).__name__}")
        if decision.denied:
            return self.finisher.stop(call, decision.tier, "denied", decision.reason, plan)
        tier = decision.tier
        for name, host_decision in hosts.items():
            if host_decision.denied:
                plan.denied_hosts[name] = host_decision.reason
            else:
                tier = max(tier, host_decision.tier)
        if plan.host_subjects and len(plan.denied_hosts) == len(plan.host_subjects):
            reasons = list(dict.fromkeys(plan.denied_hosts.values()))
            return self.finisher.stop(call, tier, "denied", f"every host was refused: {'; '.join(reasons[:3])}", plan)
        return tier, decision.reason if decision.tier == 3 else "a target host makes this call tier 3"

    async def _confirm(self, request: CallRequest, call: CallAudit, plan: Plan, reason: str) -> CallToolResult | None:
        try:
            return await self.confirmation.confirm(request, call, plan, reason)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                self.finisher.stop(call, 3, "cancelled", None, plan)
            raise
        except InputRequired:
            raise  # the call router answers with the question (a 2026-07-28 client asks its human)
        except Exception as exc:  # nothing runs unconfirmed, and nothing escapes to the transport
            logger.exception("confirming %s failed", call.tool)
            return self.finisher.stop(call, 3, "error", f"Confirmation: {type(exc).__name__}")

    async def _execute(
        self, call: CallAudit, plan: Plan, tier: int, report_progress: ReportProgress | None
    ) -> Execution:
        """The plan run; every failure an Execution with status error. The end record is written on cancellation
        too (the client cancelled, or went away: the executor killed what it started) before it propagates."""
        progress = Progress(report_progress, plan)
        plan.call_id = call.call_id  # the executor names its containment unit after it
        try:
            return await plan.execute(progress.report)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                self.finisher.stop(call, tier, "cancelled", None, plan)
            raise
        except ToolError as exc:
            return stopped("error", f"{exc.kind}: {exc}")
        except OSError as exc:
            where = f": {exc.filename!r}" if exc.filename else ""
            return stopped("error", f"OSError: {exc.strerror or exc}{where}")
        except Exception as exc:
            logger.exception("executing %s failed", call.tool)
            return stopped("error", f"Internal: {type(exc).__name__}: {exc}")


def rejected_arguments(entry: ToolEntry | None, arguments: Any, owner: str | None) -> dict[str, Any]:
    """What the record of a refused call keeps of arguments that may not even be an object; `owner`: the caller's
    (None when the transport refused the message before its client was told apart)."""
    if isinstance(arguments, dict):
        return entry.recordable(arguments, owner) if entry is not None else arguments
    if entry is not None and entry.record_filter is not None:
        return {"arguments": f"withheld ({type(arguments).__name__})"}
    return {"arguments": repr(arguments)[:1024]}
