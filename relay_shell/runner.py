"""THE audited path. Every tool call: identify → classify + admit → start record → execute → bound → end record
→ metrics. Every context pull (prompt, resource): the tier-0 helper `context_pull` (cap, digest record, counter).

Write-ahead (adr/0014): a call that runs anything gets a `start` record, on disk before anything executes, and an
`end` record before its result returns, paired by `call_id`. A call refused or invalid before it runs, and a pure
read (annotated read-only and touching nothing outside the server), gets the `end` record alone.

No other code writes audit records or builds tool results. Nothing raised below escapes to the
transport: failures become `[ERROR: …]` results with isError, and they are audited too.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp_types import CallToolResult, TextContent

from relay_shell import __version__
from relay_shell.audit.log import RECORD_VERSION, AuditLog, AuditWriteError, utc_timestamp
from relay_shell.audit.record import audit_arguments, output_digests, redact_text
from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.config import Settings
from relay_shell.confirm.binding import bind_call, token_digest
from relay_shell.confirm.elicitation import (
    ANSWER_OUTCOMES,
    REFUSED_BECAUSE,
    InputRequired,
    ask_human,
    can_elicit,
    is_modern,
    question_round,
    round_answer,
    round_state,
)
from relay_shell.confirm.store import ConfirmationStore, confirm_required
from relay_shell.errors import ToolError
from relay_shell.identity import Identity, identify, owner_of
from relay_shell.metrics import Metrics
from relay_shell.plan import Execution, Outcome, Plan, Subject
from relay_shell.policy.admission import Policy
from relay_shell.progress import Progress
from relay_shell.results import NO_DEFAULTS, capped_text, render_text, status_line, structured_content, truncation_line
from relay_shell.runbooks.gate import BriefingGate, call_digest
from relay_shell.wire import RefusedCall

logger = logging.getLogger("relay_shell")
RequestContext = ServerRequestContext[Any, Any] | None


class Runner:
    def __init__(self, settings: Settings, audit_log: AuditLog, policy: Policy, metrics: Metrics) -> None:
        self.settings = settings
        self.audit_log = audit_log
        self.policy = policy
        self.metrics = metrics
        self.transport = settings.transport
        # Registered tool names: only these become metric labels, so an unknown name cannot add series.
        self.known_tools: set[str] = set()
        self._call_counters: dict[tuple[str, int, str], Any] = {}
        # Per tool, the defaults its outputSchema declares: what a result carries for a field the call did not set.
        self.result_defaults: dict[str, dict[str, Any]] = {}
        # Per tool, what the audit record may keep of the arguments of any call, valid or not (a password
        # typed into a session is withheld even when the call fails validation).
        self.argument_filters: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        # Per tool, its argument validation (defaults filled in): a tier-3 confirmation binds the arguments as
        # the tool received them, so `timeout` omitted and `timeout=60` are the same call.
        self.argument_validators: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self.confirmations = ConfirmationStore(settings.confirm_ttl)  # tokens (token mode, and elicit's fallback)
        self.elicitations = ConfirmationStore(settings.confirm_ttl)  # questions put to the human, one answer each
        self.gate: BriefingGate | None = None  # RELAY_SHELL_GATE=briefing: runbooks before the first calls
        # Tools that run nothing and touch nothing outside the server (read-only, not open-world): one record.
        self.pure_reads: set[str] = set()
        # call_id = this process's random tag + a counter: unique in the log across restarts, cheap per call.
        self._call_tag = secrets.token_hex(6)
        self._call_numbers = itertools.count(1)
        self.refused_calls = 0  # calls refused because the log could not be written (shown by server_info)
        self.interrupted_at_start = 0  # calls the previous process left interrupted (its server:start record)

    # -- tool calls --------------------------------------------------------------------------------------

    async def run(
        self,
        request_context: ServerRequestContext[Any, Any],
        tool: str,
        prepare: Callable[[], Plan],
        report_progress: Callable[[float, float | None, str], Any] | None = None,
    ) -> CallToolResult:
        call = _Call(tool, identify(request_context, self.transport), time.monotonic(), self.new_call_id())
        call.arguments = self._recordable(tool, _raw_arguments(request_context))
        refusal = self._audit_unavailable()
        if refusal is not None:
            return self._finish(call, 0, "error", error=refusal)
        try:
            plan = prepare()
        except ToolError as exc:
            return self._finish(call, 0, "error", error=f"{exc.kind}: {exc}")
        except Exception as exc:  # a bug in preparation must still be a clean, audited result
            logger.exception("preparing %s failed", tool)
            return self._finish(call, 0, "error", error=f"Internal: {type(exc).__name__}")

        if plan.recorded_arguments is not None:
            call.arguments = plan.recorded_arguments
        try:
            decision = self.policy.decide(plan.subject)
        except Exception as exc:
            logger.exception("policy failed for %s", tool)
            return self._finish(call, 3, "error", error=f"Policy: {type(exc).__name__}")
        if decision.denied:
            return self._finish(call, decision.tier, "denied", error=decision.reason, plan=plan)
        tier = decision.tier
        admitted_as = "admitted"
        if plan.host_subjects:
            try:
                tier, refusal = self._admit_hosts(plan, tier)
            except Exception as exc:
                logger.exception("policy failed for %s", tool)
                return self._finish(call, 3, "error", error=f"Policy: {type(exc).__name__}")
            if refusal is not None:
                return self._finish(call, tier, "denied", error=refusal, plan=plan)
        if tier >= 1 and self.gate is not None and self.gate.enabled:
            # After the policy (a refused call is refused, not briefed), before a human is asked to confirm.
            gated = self._gated(request_context, call, plan, tier)
            if gated is not None:
                return gated
        if tier == 3 and self.settings.confirm_tier3 != "off":
            # After every deny and mode check: a refused call never reaches confirmation.
            reason = decision.reason if decision.tier == 3 else "a target host makes this call tier 3"
            try:
                stop = await self._confirm_tier3(request_context, call, plan, reason)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    self._finish(call, tier, "cancelled", plan=plan)
                raise
            except InputRequired:
                raise  # the server's tool-call gate answers with the question
            except Exception as exc:  # nothing runs unconfirmed, and nothing escapes to the transport
                logger.exception("confirming %s failed", tool)
                return self._finish(call, tier, "error", error=f"Confirmation: {type(exc).__name__}")
            if stop is not None:
                return stop
            admitted_as = "confirmed"  # tier 3, and a human confirmed exactly this call

        if tool not in self.pure_reads:
            # Write-ahead: nothing runs unless its start record was written (or AUDIT_ON_FAILURE=continue).
            refusal = self._write_start(call, tier, admitted_as, plan)
            if refusal is not None:
                return self._finish(call, tier, "error", error=refusal, plan=plan)
        progress = Progress(report_progress, plan)
        plan.call_id = call.call_id  # the executor names its containment unit after it
        try:
            execution = await plan.execute(progress.report)
        except anyio.get_cancelled_exc_class():
            # The client cancelled (or went away): the executor killed what it started; the record is
            # still written before the cancellation propagates.
            with anyio.CancelScope(shield=True):
                self._finish(call, tier, "cancelled", plan=plan)
            raise
        except ToolError as exc:
            execution = Execution(status="error", output=_empty(), error=f"{exc.kind}: {exc}")
        except OSError as exc:
            where = f": {exc.filename!r}" if exc.filename else ""
            execution = Execution(status="error", output=_empty(), error=f"OSError: {exc.strerror or exc}{where}")
        except Exception as exc:
            logger.exception("executing %s failed", tool)
            execution = Execution(status="error", output=_empty(), error=f"Internal: {type(exc).__name__}: {exc}")
        # The gate opens only on a briefing that was made and returned: a failed begin_session briefed no one.
        opens = plan.opens_gate and execution.status == "ok"
        failed = self._open_gate(request_context, call, plan) if opens else None
        if failed is not None:
            execution = Execution(status="error", output=_empty(), error=failed)
        return self._finish(call, tier, execution.status, plan=plan, execution=execution)

    async def reject(
        self, request_context: ServerRequestContext[Any, Any], tool: str, arguments: Any, message: str
    ) -> CallToolResult:
        """An invalid call caught before the tool function (unknown tool, argument names or types)."""
        call = _Call(tool, identify(request_context, self.transport), time.monotonic(), self.new_call_id())
        recorded = self._rejected_arguments(tool, arguments)
        # The message may quote a value the filter kept out of the record (`got ['<token>']`).
        withheld = tool in self.argument_filters and recorded != arguments
        # A name that is not one of ours is recorded as `unknown` (the message quotes it): a client must not
        # be able to write records that pass for the server's own events (`oauth:…`, `session:end`) or add
        # metric series.
        call.tool, call.arguments = (tool if tool in self.known_tools else "unknown"), recorded
        return self._finish(call, 0, "error", error=message, reason_withheld=withheld)

    def refused_by_transport(self, client_name: str, refused: RefusedCall) -> None:
        """A tools/call the transport answered with a JSON-RPC error before any tool saw it (its id, encoding,
        shape or size: wire.py, adr/0016): its one record, with what could be read of it and the digest of the
        message as received. The transport names the client (it has no request context)."""
        started = time.monotonic()
        tool = refused.tool if isinstance(refused.tool, str) and refused.tool in self.known_tools else "unknown"
        arguments = {} if refused.arguments is None else self._rejected_arguments(tool, refused.arguments)
        identity = Identity(request_id=refused.request_id, client_id=f"{self.transport}:{client_name}")
        record = self._record(tool, 0, "error", identity, audit_arguments(arguments), started)
        record.update(call_id=self.new_call_id(), phase="end", reason=redact_text(refused.reason)[:512])
        record.update(message_len=refused.message_len, message_sha256=refused.message_sha256)
        self._write(record, tool, 0, "error", started)

    def _rejected_arguments(self, tool: str, arguments: Any) -> dict[str, Any]:
        """What the record of a refused call keeps of arguments that may not even be an object."""
        if isinstance(arguments, dict):
            return self._recordable(tool, arguments)
        if tool in self.argument_filters:
            return {"arguments": f"withheld ({type(arguments).__name__})"}
        return {"arguments": repr(arguments)[:1024]}

    # -- context pulls -----------------------------------------------------------------------------------

    def context_pull(self, request_context: RequestContext, label: str, text: str, counted_as: str = "") -> str:
        """The tier-0 helper for prompts/get and resources/read: cap, audit a digest record, count. The record
        is `label`; the counter `counted_as` when given (a runbook prompt's record names the runbook, its metric
        series is the bounded `prompt:runbook`: label values are the server's own)."""
        started = time.monotonic()
        identity = identify(request_context, self.transport)
        body, captured = capped_text(text, self.settings.max_output)
        record = self._record(label, 0, "ok", identity, audit_arguments(_raw_arguments(request_context)), started)
        record.update(call_id=self.new_call_id(), phase="end", **output_digests(body, captured))
        self._write(record, counted_as or label, 0, "ok", started)
        if not self.audit_log.healthy and self.settings.audit_on_failure == "refuse":
            raise RuntimeError("audit log unavailable: " + (self.audit_log.last_error or "unknown error"))
        return body

    def context_refused(
        self, request_context: RequestContext, label: str, outcome: Outcome, reason: str, counted_as: str = ""
    ) -> None:
        """A context pull refused before anything was rendered (a prompt the policy mode hides, invalid
        prompt arguments): audited and counted like a refused call; the caller answers with a protocol error."""
        started = time.monotonic()
        identity = identify(request_context, self.transport)
        record = self._record(label, 0, outcome, identity, audit_arguments(_raw_arguments(request_context)), started)
        record.update(call_id=self.new_call_id(), phase="end", denied=outcome == "denied")
        record["reason"] = redact_text(reason)[:512]  # the reason may echo argument values
        self._write(record, counted_as or label, 0, outcome, started)

    # -- lifecycle events --------------------------------------------------------------------------------

    def event(self, label: str, client_id: str, fields: dict[str, Any]) -> None:
        """A record for something that happened outside a tool call (a session ending: exit status, why,
        transcript digest). Tier 0, counted under its label."""
        started = time.monotonic()
        record = self._record(label, 0, "ok", Identity(request_id=None, client_id=client_id), {}, started)
        record.update(fields)
        self._write(record, label, 0, "ok", started)

    def server_started(self, fields: dict[str, Any]) -> None:
        """This process's first record, `server:start`: its pid, version and call_id tag, and what the previous
        process left behind (the calls it left interrupted, what containment found of them; audit/interrupted.py)."""
        self.interrupted_at_start = int(fields.get("interrupted_count", 0))
        started = time.monotonic()
        record = self._record("server:start", 0, "ok", Identity(request_id=None, client_id="server"), {}, started)
        record.update(pid=os.getpid(), version=__version__, call_tag=self._call_tag, **fields)
        self._write(record, "server:start", 0, "ok", started)

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
        if not write:
            return decision.reason
        started = time.monotonic()
        record = self._record(
            label, decision.tier, "denied", Identity(request_id=None, client_id=client_id), {}, started
        )
        record.update(fields)
        record["denied"] = True
        record["reason"] = redact_text(decision.reason)[:512]
        self._write(record, label, decision.tier, "denied", started)
        return decision.reason

    # -- tier-3 confirmation -----------------------------------------------------------------------------

    async def _confirm_tier3(
        self, request_context: ServerRequestContext[Any, Any] | None, call: _Call, plan: Plan, reason: str
    ) -> CallToolResult | None:
        """None when the call may run now (an armed token for exactly this call was used up, or the human
        accepted); otherwise the result to return instead. `plan.confirmation` links the records. Records
        written while the call waits for the human (the question, the answer) are `phase: "confirm"`; the
        call's start record follows once it is confirmed."""
        owner = owner_of(request_context)
        try:
            arguments = self._call_arguments(call.tool, request_context)
            binding = bind_call(call.tool, arguments, plan, owner, call.identity.client_id, reason)
        except ToolError as exc:  # ConfirmTooLong: a call a human cannot be shown in full is never offered
            return self._finish(call, 3, "error", error=f"{exc.kind}: {exc}", plan=plan)
        armed = self.confirmations.take(binding, owner)
        if armed is not None:
            plan.confirmation = armed
            return None
        if self.settings.confirm_tier3 == "elicit" and request_context is not None and can_elicit(request_context):
            state = round_state(request_context)
            if state is None:  # first ask: the plan is recorded before the human sees the question
                state, plan.confirmation = self.elicitations.issue(binding, owner)
                asking = Execution(status="confirm_required", output=_empty(), error=reason + "; asking the human")
                planned = self._finish(call, 3, "confirm_required", plan=plan, execution=asking, phase="confirm")
                if (planned.structured_content or {}).get("status") == "error":
                    return planned  # the plan could not be recorded: do not even ask
                if is_modern(request_context):
                    raise question_round(binding.summary, state)  # the client asks, then repeats the call
                answer = await ask_human(request_context, binding.summary, self.settings.confirm_ttl)
            else:  # the repeated call carries the human's answer
                plan.confirmation = token_digest(state)
                answer = round_answer(request_context)
            if not self.elicitations.redeem(plan.confirmation, binding, owner) and answer == "accept":
                answer = "stale"  # a yes to a question answered before, expired, or about another call
            outcome = ANSWER_OUTCOMES[answer]
            record = self._record("confirm:elicitation", 3, outcome, call.identity, {}, call.started)
            record.update(call_id=call.call_id, phase="confirm", denied=outcome == "denied", answer=answer)
            record["confirmation"] = plan.confirmation
            written = self._write(record, "confirm:elicitation", 3, outcome, call.started)
            if answer == "accept":
                if written or self.settings.audit_on_failure != "refuse":
                    return None
                failed = "AuditWriteFailed: the human's confirmation could not be recorded; nothing ran"
                return self._finish(call, 3, "error", error=failed, plan=plan)
            if answer != "failed":  # a client that could not ask after all gets a token below
                return self._finish(call, 3, "denied", error=REFUSED_BECAUSE[answer], plan=plan)
        token, plan.confirmation = self.confirmations.issue(binding, owner)
        execution = confirm_required(token, binding, self.settings.confirm_ttl, reason)
        return self._finish(call, 3, "confirm_required", plan=plan, execution=execution)

    # -- the briefing gate (runbooks/gate.py) ------------------------------------------------------------

    def _gated(self, request_context: Any, call: _Call, plan: Plan, tier: int) -> CallToolResult | None:
        """None when the call may run; else its briefing, `[GATED: …]`, recorded as `gate:brief`; nothing ran."""
        assert self.gate is not None
        owner = owner_of(request_context)
        digest = call_digest(call.tool, self._call_arguments(call.tool, request_context))
        if self.gate.admits(owner, digest):
            return None
        held = self.gate.hold(call.tool, plan, _raw_arguments(request_context), self.settings.max_output)
        result = self._finish(call, tier, held.status, plan=plan, execution=held, record_label="gate:brief")
        self.metrics.gated_calls.labels(tool=call.tool if call.tool in self.known_tools else "unknown").inc()
        if held.status == "gated" and (result.structured_content or {}).get("status") == "gated":
            self.gate.remember_briefed(owner, digest)  # recorded: the identical call runs when repeated
        return result

    def _open_gate(self, request_context: Any, call: _Call, plan: Plan) -> str | None:
        """begin_session succeeded: open the session's gate once its `gate:open` record is written."""
        if self.gate is None or not self.gate.enabled:
            return None
        record = self._record("gate:open", 0, "ok", call.identity, {}, call.started)
        record.update(plan.record_fields or {})
        if not self._write(record, "gate:open", 0, "ok", call.started) and self.settings.audit_on_failure == "refuse":
            return "AuditWriteFailed: the gate:open record could not be written; the gate stays shut"
        self.gate.open(owner_of(request_context))
        return None

    def _call_arguments(self, tool: str, request_context: ServerRequestContext[Any, Any] | None) -> dict[str, Any]:
        raw = _raw_arguments(request_context)
        validate = self.argument_validators.get(tool)
        if validate is None:
            return raw
        try:
            return validate(raw)
        except Exception:  # validated before the tool ran; unvalidated arguments only bind more strictly
            return raw

    # -- internals ---------------------------------------------------------------------------------------

    def _admit_hosts(self, plan: Plan, tier: int) -> tuple[int, str | None]:
        """Admit each host of a many-host call on its own; refuse the call only when every host is refused."""
        assert plan.host_subjects is not None
        for name, subject in plan.host_subjects.items():
            host_decision = self.policy.decide(subject)
            if host_decision.denied:
                plan.denied_hosts[name] = host_decision.reason
            else:
                tier = max(tier, host_decision.tier)
        if len(plan.denied_hosts) == len(plan.host_subjects):
            reasons = dict.fromkeys(plan.denied_hosts.values())
            return tier, f"every host was refused: {'; '.join(list(reasons)[:3])}"
        return tier, None

    def _recordable(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        argument_filter = self.argument_filters.get(tool)
        return argument_filter(arguments) if argument_filter is not None else arguments

    def _audit_unavailable(self) -> str | None:
        """Fail closed before anything runs if the log cannot be written."""
        try:
            self.audit_log.ensure_open()
        except AuditWriteError as exc:
            return self._refusal(exc)
        return None

    def _write_start(self, call: _Call, tier: int, decision: str, plan: Plan) -> str | None:
        """The write-ahead record of an admitted call, on disk (and fsynced with AUDIT_FSYNC=always) before its
        plan executes. Returns the refusal when it could not be written and AUDIT_ON_FAILURE is refuse."""
        record: dict[str, Any] = {
            "v": RECORD_VERSION,
            "ts": utc_timestamp(),
            "tool": call.tool,
            "phase": "start",
            "call_id": call.call_id,
            "tier": tier,
            "denied": False,
            "decision": decision,
            "args": call.audited_arguments(),
            "request_id": call.identity.request_id,
            "client_id": call.identity.client_id,
        }
        # a many-host call runs on the admitted hosts only: the refused ones are named
        known = {"denied_hosts": sorted(plan.denied_hosts), "target": plan.target, "session_id": plan.session_id}
        record.update({key: value for key, value in known.items() if value})
        if plan.confirmation is not None:
            record["confirmation"] = plan.confirmation
        try:
            self.audit_log.write(record)
        except AuditWriteError as exc:
            print(f"relay-shell: audit write failed: {exc}", file=sys.stderr)
            return self._refusal(exc)
        self.metrics.audit_records.inc()
        self.metrics.audit_degraded.set(0)
        return None

    def _refusal(self, exc: AuditWriteError) -> str | None:
        """What a call the log cannot record gets: refused (fail closed) unless AUDIT_ON_FAILURE=continue."""
        self.metrics.audit_errors.inc()
        self.metrics.audit_degraded.set(1)
        if self.settings.audit_on_failure != "refuse":
            return None
        self.refused_calls += 1
        self.metrics.audit_refused_calls.inc()
        return f"AuditUnavailable: {exc}; the call was refused and nothing ran (RELAY_SHELL_AUDIT_ON_FAILURE=refuse)"

    def _finish(
        self,
        call: _Call,
        tier: int,
        outcome: Outcome,
        *,
        error: str | None = None,
        plan: Plan | None = None,
        execution: Execution | None = None,
        reason_withheld: bool = False,
        phase: str = "end",
        record_label: str | None = None,
    ) -> CallToolResult:
        """The call's end record (or a tier-3 dialogue's `confirm` record), then its result."""
        tool = call.tool
        duration_ms = int((time.monotonic() - call.started) * 1000)
        notes = plan.notes if plan is not None else []
        execution = execution or Execution(status=outcome, output=_empty(), error=error)
        error = execution.error or error
        captured = execution.output
        first = execution.headline or status_line(
            outcome, execution.exit_code, execution.signal, plan.timeout if plan else None, error, tier
        )
        body = captured.text
        trailer = [truncation_line(captured)] if captured.truncated else []
        if execution.stderr is not None and execution.stderr.produced_bytes:
            body += ("" if not body or body.endswith("\n") else "\n") + "[stderr]\n" + execution.stderr.text
            if execution.stderr.truncated:
                trailer.append("stderr " + truncation_line(execution.stderr))
        text = render_text(first, notes, body, trailer)

        label = record_label or tool  # a gated call's record is the gate's event (gate:brief)
        if plan is not None and plan.recorded_arguments is not None:
            # A send that found echo off only as it typed: the end record withholds the input (adr/0014).
            call.record_as(plan.recorded_arguments)
        record = self._record(label, tier, outcome, call.identity, call.audited_arguments(), call.started)
        record.update(call_id=call.call_id, phase=phase, **output_digests(text, captured))
        record["denied"] = outcome == "denied"
        if execution.exit_code is not None:
            record["exit_code"] = execution.exit_code
        if execution.signal is not None:
            record["signal"] = execution.signal
        if execution.stderr is not None:
            record["stderr_sha256"] = execution.stderr.sha256
            record["stderr_len"] = execution.stderr.produced_bytes
        if error is not None and plan is not None and plan.recorded_arguments is not None:
            record["reason"] = "withheld: the refused input was typed with terminal echo off"
        elif error is not None and reason_withheld:
            record["reason"] = "withheld: it may quote an argument the record keeps only as a digest or not at all"
        elif error is not None:
            record["reason"] = redact_text(error)[:512]  # error texts may echo argument values
        if plan is not None and plan.target is not None:
            record["target"] = plan.target
        if plan is not None and plan.confirmation is not None:
            record["confirmation"] = plan.confirmation
        session_id = plan.session_id if plan is not None else None
        session_id = session_id or execution.fields.get("session_id")
        if session_id:
            record["session_id"] = session_id
        if plan is not None and plan.record_fields:
            record.update(plan.record_fields)
        record["duration_ms"] = duration_ms
        written = self._write(record, label, tier, outcome, call.started)
        defaults = self.result_defaults.get(tool, NO_DEFAULTS)
        if not written and self.settings.audit_on_failure == "refuse" and outcome not in ("denied", "error"):
            # It ran, but without its record the result may not be shown: fail closed, say what happened. Its
            # start record is in the log, so `audit verify` lists the call as interrupted.
            what = "nothing ran" if outcome in ("confirm_required", "gated") else f"the call ran ({first})"
            message = (
                f"AuditWriteFailed: {what} but its audit record could not be written "
                f"({self.audit_log.last_error}); output withheld"
            )
            return CallToolResult(
                content=[TextContent(type="text", text=f"[ERROR: {message}]")],
                structured_content=structured_content(
                    defaults, "error", tier, Execution(status="error", output=_empty()), duration_ms, notes, message
                ),
                is_error=True,
            )
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=structured_content(defaults, outcome, tier, execution, duration_ms, notes, error),
            is_error=outcome not in ("ok", "exit_nonzero"),
        )

    def _record(
        self, tool: str, tier: int, outcome: str, identity: Identity, args: dict[str, Any], started: float
    ) -> dict[str, Any]:
        """A record's common fields (`args` already redacted and summarised). A call's records add its call_id and
        phase; events (a session's end, an OAuth grant) are no call and have neither."""
        return {
            "v": RECORD_VERSION,
            "ts": utc_timestamp(),
            "tool": tool,
            "tier": tier,
            "denied": False,
            "outcome": outcome,
            "args": args,
            "request_id": identity.request_id,
            "client_id": identity.client_id,
            "duration_ms": int((time.monotonic() - started) * 1000),
        }

    def audit_counts(self) -> dict[str, int]:
        return {"refused_calls": self.refused_calls, "interrupted_at_start": self.interrupted_at_start}

    def new_call_id(self) -> str:
        return f"{self._call_tag}-{next(self._call_numbers)}"

    def _write(self, record: dict[str, Any], tool: str, tier: int, outcome: str, started: float) -> bool:
        written = True
        try:
            self.audit_log.write(record)
            self.metrics.audit_records.inc()
            self.metrics.audit_degraded.set(0)
        except AuditWriteError as exc:
            written = False
            self.metrics.audit_errors.inc()
            self.metrics.audit_degraded.set(1)
            print(f"relay-shell: audit write failed: {exc}", file=sys.stderr)
        event_label = tool.startswith(_EVENT_PREFIXES)
        label = tool if tool in self.known_tools or event_label else "unknown"
        key = (label, tier, outcome)
        counter = self._call_counters.get(key)
        if counter is None:  # labels() resolves a child each time; calls repeat the same few combinations
            counter = self._call_counters[key] = self.metrics.tool_calls.labels(
                tool=label, tier=str(tier), outcome=outcome
            )
        counter.inc()
        self.metrics.call_duration.labels(tool=label).observe(time.monotonic() - started)
        return written


@dataclass
class _Call:
    """What every record of one tool call shares."""

    tool: str
    identity: Identity
    started: float
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


# Records that are the server's own events, not tool calls: their labels may become metric labels.
_EVENT_PREFIXES = ("prompt:", "resource:", "session:", "oauth:", "confirm:", "forward:", "server:", "gate:")


def _raw_arguments(request_context: ServerRequestContext[Any, Any] | None) -> dict[str, Any]:
    if request_context is None or request_context.params is None:
        return {}
    params = request_context.params
    arguments = params.get("arguments")
    if isinstance(arguments, dict):
        return dict(arguments)
    # prompts/get has arguments, resources/read has a uri
    return {key: value for key, value in params.items() if key in ("uri", "name") and isinstance(value, str)}


def _empty() -> CapturedText:
    return BoundedCapture(1).result()
