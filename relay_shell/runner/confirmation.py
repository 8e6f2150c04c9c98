"""The tier-3 confirmation dialogue (adr/0010), as the runner holds it: a call admitted at tier 3 runs only once a
human confirmed exactly this call — by a token (`[CONFIRM REQUIRED …]`, then operation_confirm, then the identical
call again) or, with RELAY_SHELL_CONFIRM_TIER3=elicit, by answering a question the client puts to them. The
pieces (the binding, the screen, the stores, the MCP elicitation) are in confirm/; the records are written here.

Records written while the call waits for the human (the plan, the answer) are `phase: "confirm"`; the call's
start record follows once it is confirmed. `plan.confirmation` (a digest of the token or question) links them."""

from __future__ import annotations

from mcp_types import CallToolResult

from relay_shell.confirm.binding import CallBinding, bind_call, token_digest
from relay_shell.confirm.elicitation import (
    ANSWER_OUTCOMES,
    REFUSED_BECAUSE,
    Answer,
    ask_human,
    can_elicit,
    is_modern,
    question_round,
    round_answer,
    round_state,
)
from relay_shell.confirm.store import ConfirmationStore, confirm_required
from relay_shell.confirm.tool import prepare_confirm
from relay_shell.errors import ToolError
from relay_shell.plan import Execution, Plan
from relay_shell.runner.finish import Finisher, empty_output
from relay_shell.runner.records import CallAudit, event_record
from relay_shell.runner.request import CallRequest
from relay_shell.settings.model import Settings


class Confirmation:
    def __init__(self, settings: Settings, finisher: Finisher) -> None:
        self.mode = settings.policy.confirm_tier3  # off, token or elicit
        self.ttl = settings.policy.confirm_ttl
        self.finisher = finisher
        self.recorder = finisher.recorder
        self.tokens = ConfirmationStore(
            settings.policy.confirm_ttl
        )  # token mode, and elicit's fallback (operation_confirm)
        self.questions = ConfirmationStore(settings.policy.confirm_ttl)  # questions put to the human, one answer each

    async def confirm(self, request: CallRequest, call: CallAudit, plan: Plan, reason: str) -> CallToolResult | None:
        """None when the call may run now (an armed token for exactly this call was used up, or the human
        accepted); otherwise the result to return instead. Raises InputRequired when a 2026-07-28 client is to
        ask its human and repeat the call."""
        owner = request.owner
        try:
            binding = bind_call(call.tool, request.call_arguments(), plan, owner, call.identity.client_id, reason)
        except ToolError as exc:  # ConfirmTooLong: a call a human cannot be shown in full is never offered
            return self.finisher.stop(call, 3, "error", f"{exc.kind}: {exc}", plan)
        armed = self.tokens.take(binding, owner)
        if armed is not None:
            plan.confirmation = armed
            return None
        if self.mode == "elicit" and request.context is not None and can_elicit(request.context):
            answer = await self._ask(request, call, plan, binding, reason)
            if isinstance(answer, CallToolResult):
                return answer  # the plan could not be recorded: the human was not even asked
            answer, written = self._record_answer(call, plan, binding, owner, answer)
            if answer == "accept" and (written or not self.recorder.refuse_unrecorded):
                return None
            if answer == "accept":
                failed = "AuditWriteFailed: the human's confirmation could not be recorded; nothing ran"
                return self.finisher.stop(call, 3, "error", failed, plan)
            if answer != "failed":  # a client that could not ask after all gets a token below
                return self.finisher.stop(call, 3, "denied", REFUSED_BECAUSE[answer], plan)
        token, plan.confirmation = self.tokens.issue(binding, owner)
        execution = confirm_required(token, binding, self.ttl, reason)
        return self.finisher.finish(call, 3, execution, plan=plan)

    def arming_plan(self, owner: str, token: str) -> Plan:
        """operation_confirm's plan: arm the pending confirmation this token names, for this owner."""
        return prepare_confirm(self.tokens, self.mode, owner, token)

    async def _ask(
        self, request: CallRequest, call: CallAudit, plan: Plan, binding: CallBinding, reason: str
    ) -> Answer | CallToolResult:
        """The human's answer: asked now (2025-11-25: elicitation/create during the call), or carried by the
        repeated call (2026-07-28: the client asked after an input_required answer)."""
        context = request.context
        assert context is not None
        state = round_state(context)
        if state is not None:  # the repeated call carries the human's answer
            plan.confirmation = token_digest(state)
            return round_answer(context)
        # first ask: the plan is recorded before the human sees the question
        state, plan.confirmation = self.questions.issue(binding, request.owner)
        asking = Execution(status="confirm_required", output=empty_output(), error=reason + "; asking the human")
        planned = self.finisher.finish(call, 3, asking, plan=plan, phase="confirm")
        if (planned.structured_content or {}).get("status") == "error":
            return planned
        if is_modern(context):
            raise question_round(binding.summary, state)  # the client asks, then repeats the call
        return await ask_human(context, binding.summary, self.ttl)

    def _record_answer(
        self, call: CallAudit, plan: Plan, binding: CallBinding, owner: str, answer: Answer
    ) -> tuple[Answer, bool]:
        """The answer as it counts (a yes to no open question is `stale`), recorded as `confirm:elicitation`;
        and whether that record was written."""
        assert plan.confirmation is not None
        if not self.questions.redeem(plan.confirmation, binding, owner) and answer == "accept":
            answer = "stale"  # a yes to a question answered before, expired, or about another call
        outcome = ANSWER_OUTCOMES[answer]
        record = event_record("confirm:elicitation", 3, outcome, call.identity, {}, call.started)
        record.update(call_id=call.call_id, phase="confirm", denied=outcome == "denied", answer=answer)
        record["confirmation"] = plan.confirmation
        return answer, self.recorder.write(record, "confirm:elicitation", 3, outcome, call.started)
