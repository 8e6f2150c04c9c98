"""A call whose command outlived its yield_after (adr/0028): the call returns the output so far and the job's
handle; the log gets a small `job` note under the call's id (when it yielded, as which job, how much it had
produced), and the call's end record — exit status, digests of everything it produced, its exec trace — is
written when the job ends, whether or not anyone reads it. The start record was written before it ran, as for
every call; a server killed meanwhile leaves the start (and the note) without an end: an interrupted call."""

from __future__ import annotations

import time

from mcp_types import CallToolResult

from relay_shell.plan import Execution, Plan
from relay_shell.runner.finish import Finisher
from relay_shell.runner.recorder import Recorder
from relay_shell.runner.records import CallAudit, record_of


async def yielded(
    recorder: Recorder, finisher: Finisher, call: CallAudit, tier: int, execution: Execution, plan: Plan
) -> CallToolResult:
    job = execution.job
    assert job is not None
    note = record_of(
        call.tool,
        call.identity,
        {
            "phase": "job",
            "call_id": call.call_id,
            "tier": tier,
            "job_id": job.job_id,
            "after_ms": int((time.monotonic() - call.started) * 1000),
            "raw_len": execution.output.produced_bytes + (execution.stderr.produced_bytes if execution.stderr else 0),
        },
    )
    failed = recorder.append(note)
    # From here on the job's end writes the call's end record (at once, if it has already ended).
    job.attach(lambda final: finisher.finish(call, tier, final, plan=plan))
    if failed is not None and recorder.refuse_unrecorded:
        # Fail closed: a job the log cannot account for does not run on unseen. Its end record is attempted.
        await job.abandon("the audit log could not be written when the call yielded")
        message = (
            f"AuditWriteFailed: the command ran as job {job.job_id} but the log could not take its note "
            f"({recorder.audit_log.last_error}); the job was ended, output withheld"
        )
        return finisher.result_of(call, tier, execution, plan, message)
    return finisher.result_of(call, tier, execution, plan)
