"""Context pulls: what prompts/get and resources/read return is audited like a tier-0 call (the text capped, a
digest record, a counter). The record is labelled `prompt:<name>` or `resource:<name>`."""

from __future__ import annotations

import time

from relay_shell.audit.record import audit_arguments, output_digests, redact_text
from relay_shell.plan import Outcome
from relay_shell.results import capped_text
from relay_shell.runner.recorder import Recorder, metric_label
from relay_shell.runner.records import event_record
from relay_shell.runner.request import CallRequest, RequestContext
from relay_shell.settings.model import Settings


class ContextPulls:
    def __init__(self, settings: Settings, recorder: Recorder) -> None:
        self.recorder = recorder
        self.transport = settings.http.transport
        self.max_output = settings.limits.max_output

    def pull(self, context: RequestContext, label: str, text: str, counted_as: str = "") -> str:
        """The text to return, capped, once its record is written. The counter is `counted_as` when given (a
        runbook prompt's record names the runbook, its metric series is the bounded `prompt:runbook`: label
        values are the server's own). Raises RuntimeError when the log cannot be written and
        AUDIT_ON_FAILURE=refuse."""
        started = time.monotonic()
        request = CallRequest.read(context, self.transport)
        body, captured = capped_text(text, self.max_output)
        arguments = audit_arguments(request.arguments)
        record = event_record(label, 0, "ok", request.identity, arguments, started)
        record.update(call_id=self.recorder.new_call_id(), phase="end", **output_digests(body, captured))
        self.recorder.write(record, metric_label(counted_as or label), 0, "ok", started)
        if not self.recorder.audit_log.healthy and self.recorder.refuse_unrecorded:
            raise RuntimeError("audit log unavailable: " + (self.recorder.audit_log.last_error or "unknown error"))
        return body

    def refuse(self, context: RequestContext, label: str, outcome: Outcome, reason: str, counted_as: str = "") -> None:
        """A pull refused before anything was rendered (a prompt the policy mode hides, invalid prompt
        arguments): audited and counted like a refused call; the caller answers with a protocol error."""
        started = time.monotonic()
        request = CallRequest.read(context, self.transport)
        arguments = audit_arguments(request.arguments)
        record = event_record(label, 0, outcome, request.identity, arguments, started)
        record.update(call_id=self.recorder.new_call_id(), phase="end", denied=outcome == "denied")
        record["reason"] = redact_text(reason)[:512]  # the reason may echo argument values
        self.recorder.write(record, metric_label(counted_as or label), 0, outcome, started)
