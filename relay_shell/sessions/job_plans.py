"""The session tools on a job (`j-…`) or a kept output (`o-…`), adr/0028: one handle model, so session_recv,
session_send, session_kill and session_list take them as they take a PTY session's id; what differs is here.

- session_recv of a running job reads its new output like a session's (`until`, `timeout`, `since`), first line
  `[RUNNING: job ID after Ns | cursor C …]`; once it ended, the first line is the one the one-shot call would
  have had (`[exit N]`, `[signal …]`, `[TIMEOUT …]`) and `result` holds that call's whole structured result.
- session_send writes to the job's stdin (opened with stdin_open), classified by policy as input to the job's
  command, and so is every rest of each line (review J2, adr/0026 Round 5): a program of the job that reads a part
  of it (`dd bs=1 count=1; sh`, a shell's own children reading its stdin) leaves the rest to the next reader;
  `ctrl-d` closes stdin, `ctrl-c` interrupts the job's process group.
- session_kill ends the job's whole unit; its result stays readable until it is dropped.
- session_recv of an output id pages through a cut result's bytes: `since`, `max_bytes`, exactly once each.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from typing import Any

from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.outputs import OUTPUT_PREFIX, OutputStore
from relay_shell.plan import Execution, Outcome, Plan, ProgressFn, Subject
from relay_shell.sessions.ansi import strip_ansi
from relay_shell.sessions.expect import compile_until
from relay_shell.sessions.jobs import JOB_PREFIX, Job, JobTable, running_line, seconds
from relay_shell.sessions.open_input import MAX_OPEN, still_open
from relay_shell.sessions.plans import SETTLE, budget_for, signal_argument, wait_timeout_for
from relay_shell.sessions.registry import WaitResult
from relay_shell.settings.model import Settings

JOB_KEYS = {"ctrl-d": "close its stdin (end of input)", "ctrl-c": "SIGINT to its process group"}


def is_job(session_id: str) -> bool:
    return session_id.startswith(JOB_PREFIX)


def is_output(session_id: str) -> bool:
    return session_id.startswith(OUTPUT_PREFIX)


def prepare_job_recv(
    settings: Settings,
    jobs: JobTable,
    owner: str,
    *,
    session_id: str,
    timeout: float,
    max_bytes: int | None,
    until: str | list[str] | None,
    strip_ansi_codes: bool,
    since: int | None,
) -> Plan:
    notes: list[str] = []
    job = jobs.get(owner, session_id)
    if since is not None and not 0 <= since <= job.ring.end:
        raise ArgumentError(f"since: {since} is outside the output; allowed: 0 to {job.ring.end} (the cursor so far)")
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    budget = budget_for(settings, max_bytes, notes)

    async def execute(progress: ProgressFn) -> Execution:
        job.last_activity = time.monotonic()
        match_from = job.read_cursor if since is None else since
        if patterns or job.ring.end <= match_from:
            result = await job.wait(match_from, patterns, wait_timeout, SETTLE, settle_from_start=False)
        else:  # output is already waiting: return it now
            result = WaitResult("eof" if job.state != "running" else "quiet")
        if result.reason == "match":
            await job.ended(SETTLE)  # a last line is mostly followed by the end: return both together
        return job_read(job, plan, since, budget, strip_ansi_codes, result, bool(patterns), wait_timeout)

    plan = Plan(
        subject=Subject(fixed_tier=0), execute=execute, notes=notes, timeout=wait_timeout, session_id=session_id
    )
    return plan


def job_read(
    job: Job,
    plan: Plan,
    since: int | None,
    budget: int,
    strip: bool,
    result: WaitResult,
    has_until: bool,
    timeout: float,
) -> Execution:
    """What a read of a job returns: its new output, and how it stands (running, or its end as the call's)."""
    read = job.read(since)
    capture = BoundedCapture(budget)
    capture.feed(strip_ansi(read.data) if strip else read.data)
    fields: dict[str, Any] = {
        "session_id": job.job_id,
        "cursor": read.end,
        "since": read.start,
        "dropped": read.dropped,
        "wait": result.reason,
        "match_index": result.match.index if result.match else None,
        "match_text": result.match.text if result.match else None,
        "state": job.state,
        "running": job.state == "running",
    }
    dropped = f" | dropped {read.dropped} bytes" if read.dropped else ""
    if job.state == "running":
        context = ""
        if result.reason == "match" and result.match is not None:
            context = f" | match {result.match.index} {result.match.text[:80]!r}"
        elif result.reason == "timeout":
            context = f" | waited {timeout:g}s" + (": no match for until" if has_until else "")
        headline = running_line(job.job_id, time.monotonic() - job.created, read.end)[:-1] + context + dropped + "]"
        return Execution(status="running", output=capture.result(), headline=headline, fields=fields)
    final, first = _final_of(job)
    duration = (job.ended_at or time.monotonic()) - job.created
    plan.notes.append(
        f"job {job.job_id} ended after {seconds(duration)}s; this read: cursor {read.start} to {read.end}"
        + (f", {read.dropped} bytes dropped before it (read more often, or since=…)" if read.dropped else "")
    )
    plan.notes.extend(note for note in final.get("notes", []) if "session_recv" in note)
    fields["result"] = final
    status: Outcome = final.get("status", "error")
    return Execution(
        status=status,
        output=capture.result(),
        exit_code=final.get("exit_code"),
        signal=final.get("signal"),
        error=final.get("error"),
        headline=first,
        fields=fields,
    )


def _final_of(job: Job) -> tuple[dict[str, Any], str]:
    """An ended job's result as its call would have returned it (structured, and its first line)."""
    if job.final is not None:
        block = job.final.content[0] if job.final.content else None
        return job.final.structured_content or {}, str(getattr(block, "text", "")).split("\n", 1)[0]
    execution = job.final_execution  # ended before the runner attached (it could not): no record was written
    status: Outcome = execution.status if execution is not None else "error"
    error = execution.error if execution is not None else "the job ended unrecorded"
    return {"status": status, "error": error}, f"[ERROR: {error}]"


def _checked_input(job: Job, session_id: str, data: str, keys: list[str] | None, secret_env: str | None) -> list[str]:
    """The keys pressed, once the send is one a job can take: no secret_env, only the keys it reads, a running job
    whose stdin is open for data or ctrl-d."""
    if secret_env is not None:
        raise ArgumentError(
            "secret_env: types a password at a terminal's no-echo prompt; a job reads a pipe without a terminal; "
            "allowed: data, or pass the secret in env when the command starts"
        )
    pressed = [key.strip().lower() for key in keys or []]
    unknown = [key for key in pressed if key not in JOB_KEYS]
    if unknown:
        allowed = "; ".join(f"{key} ({what})" for key, what in JOB_KEYS.items())
        raise ArgumentError(
            f"keys: {unknown[0][:20]!r} is not a key a job reads (it has no terminal); allowed: {allowed}"
        )
    if "\x00" in data:
        # bash and dash drop NUL bytes from what they read (`r\0m` runs `rm`): the line run would not be the line
        # classified. One-shot `stdin` refuses NUL for the same reason (arguments.py).
        raise ArgumentError(
            "data: contains a NUL byte; allowed: text without NUL (a shell reading the job's stdin drops NUL, so "
            "what it ran would not be what was checked)"
        )
    if job.state != "running":
        raise ToolError("SessionEnded", f"job {session_id} has ended; its result can still be read with session_recv")
    if not job.stdin_open and (data or "ctrl-d" in pressed):
        why = (
            "its stdin was closed (ctrl-d)"
            if job.stdin_was_open
            else "it was not started with stdin_open: true, so its stdin is closed (it got `stdin` and EOF, or "
            "/dev/null); start the command again with stdin_open: true to send it input"
        )
        raise ToolError("StdinClosed", f"job {session_id}: {why}")
    return pressed


def prepare_job_send(
    settings: Settings,
    jobs: JobTable,
    owner: str,
    *,
    session_id: str,
    data: str,
    enter: bool,
    keys: list[str] | None,
    secret_env: str | None,
    until: str | list[str] | None,
    timeout: float,
    max_bytes: int | None,
    strip_ansi_codes: bool,
) -> Plan:
    """Input to a job's stdin: classified as stdin of the job's command (for an SSH job, on its host)."""
    notes: list[str] = []
    job = jobs.get(owner, session_id)
    pressed = _checked_input(job, session_id, data, keys, secret_env)
    text = data + ("\n" if enter and data else "")
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(settings, timeout, notes)
    budget = budget_for(settings, max_bytes, notes)
    # A program reading stdin (a shell, a REPL) runs lines, not sends: what is classified is the line this send
    # completes, the unfinished one before it included (`r` then `m -rf DIR` is `rm -rf DIR`).
    tail_seen = job.input_tail
    line = tail_seen + text
    if len(line) > MAX_OPEN:
        raise ToolError(
            "InputTooLong",
            f"job {session_id}: the input this continues has been open (an unclosed quote or line) for over "
            f"{MAX_OPEN} characters; close it, or end the job with session_kill",
        )
    subject = dataclasses.replace(job.subject, stdin=line) if text else Subject(fixed_tier=1)
    if text:
        rests = tuple(rest_findings(job.subject, text))
        subject = dataclasses.replace(subject, session_findings=(*subject.session_findings, *rests))

    async def execute(progress: ProgressFn) -> Execution:
        if job.state != "running":
            raise ToolError(
                "SessionEnded", f"job {session_id} has ended; its result can still be read with session_recv"
            )
        job.last_activity = time.monotonic()
        match_from = job.ring.end
        async with job.input_lock:
            if text:
                if job.input_tail != tail_seen:
                    # Another send changed the unfinished line after this one was classified against it.
                    raise ToolError(
                        "InputChanged",
                        f"job {session_id}: another send changed the line this input continues while it was being "
                        "checked; nothing was written: send it again",
                    )
                try:
                    await job.process.write(text.encode("utf-8", errors="surrogateescape"), time.monotonic() + 10)
                except TimeoutError as exc:
                    raise ToolError("InputBlocked", f"{exc}: the job is not reading its input") from None
                # Inside an open quote or string the whole input so far is one construct; else the unended line.
                job.input_tail = line if still_open(line) else unfinished_line(line)
            if "ctrl-d" in pressed:
                job.process.close_stdin()
                job.stdin_open = False
            if "ctrl-c" in pressed:
                await job.process.send_signal(signal.SIGINT)
        result = await job.wait(match_from, patterns, wait_timeout, SETTLE, settle_from_start=False)
        if result.reason == "match":
            await job.ended(SETTLE)
        return job_read(job, plan, None, budget, strip_ansi_codes, result, bool(patterns), wait_timeout)

    plan = Plan(subject=subject, execute=execute, notes=notes, timeout=wait_timeout, session_id=session_id)
    return plan


def prepare_job_kill(
    settings: Settings, jobs: JobTable, owner: str, *, session_id: str, signal_name: str, close: bool
) -> Plan:
    job = jobs.get(owner, session_id)
    name, signal_number = signal_argument(signal_name)

    async def execute(progress: ProgressFn) -> Execution:
        job.last_activity = time.monotonic()
        if close:
            if job.state == "running":
                await jobs.close(job, f"ended by session_kill (SIG{name})", signal_number)
            headline = f"[closed {session_id}: {_ending(job)}]"
        else:
            if job.state != "running":
                raise ToolError("SessionEnded", f"job {session_id} has ended ({_ending(job)})")
            await job.process.send_signal(signal_number)
            headline = f"[sent SIG{name} to the process group of job {session_id}]"
        return Execution(
            status="ok",
            output=BoundedCapture(1).result(),
            exit_code=job.exit_code,
            signal=job.signal_name,
            headline=headline,
            fields={"session_id": session_id, "state": job.state, "running": job.state == "running"},
        )

    return Plan(subject=Subject(fixed_tier=1), execute=execute, session_id=session_id)


def _ending(job: Job) -> str:
    final = job.final.structured_content if job.final is not None else None
    if final is None:
        return "running" if job.state == "running" else "ended"
    if final.get("status") == "timeout":
        return "timed out"
    if final.get("signal"):
        return f"killed by {final['signal']}"
    if final.get("exit_code") is not None:
        return f"exited with {final['exit_code']}"
    return str(final.get("status"))


def prepare_output_recv(
    settings: Settings,
    outputs: OutputStore,
    owner: str,
    *,
    session_id: str,
    max_bytes: int | None,
    until: str | list[str] | None,
    strip_ansi_codes: bool,
    since: int | None,
) -> Plan:
    """A page of a kept output: bytes from `since` (default: after the last page), at most `max_bytes`."""
    notes: list[str] = []
    outputs.get(owner, session_id)  # unknown, gone or not yours: said now
    if until is not None:
        raise ArgumentError(f"until: {session_id} is a kept output, complete: nothing more will come; allowed: omit it")
    if strip_ansi_codes:
        raise ArgumentError(f"strip_ansi: {session_id} is read as the command wrote it; allowed: false")
    if since is not None and since < 0:
        raise ArgumentError(f"since: {since} is negative; allowed: 0 to the output's size")
    budget = budget_for(settings, max_bytes, notes)

    async def execute(progress: ProgressFn) -> Execution:
        page = outputs.read(owner, session_id, since, budget)
        capture = BoundedCapture(max(1, len(page.data)))
        capture.feed(page.data)
        end = ", the end" if page.end == page.size else ""
        headline = (
            f"[output {session_id}: bytes {page.start}-{page.end} of {page.size}{end} | cursor {page.end} | "
            f"kept {seconds(page.expires_in)}s more]"
        )
        fields = {
            "session_id": session_id,
            "cursor": page.end,
            "since": page.start,
            "total_bytes": page.size,
            "state": "kept",
        }
        return Execution(status="ok", output=capture.result(), headline=headline, fields=fields)

    return Plan(subject=Subject(fixed_tier=0), execute=execute, notes=notes, session_id=session_id)


def rest_findings(job_subject: Subject, text: str) -> list[tuple[str, int, str]]:
    """What the job's command would do with each rest of each line of `text` as its stdin, at tier 2 or above:
    a program that read the part before it (`dd bs=1 count=1`, `head -c2`, `read -n1`) stopped there, and the
    next reader (a shell) gets the rest. Classified as the job's own stdin, so the reader decides the language
    (a shell's rests as shell text; Python's as Python). A line too long to classify at every point is tier 2
    when the job's command runs its stdin as shell text."""
    from relay_shell.policy.classify import analyze  # the classifier, loaded on first use (policy/admission.py)
    from relay_shell.policy.rests import PROBE, line_rests, runs_something

    def stdin_findings(stdin: str) -> list[Any]:
        # What the stdin adds: the command's own findings (admitted when the job started) are not the rest's.
        return [finding for finding in analyze(dataclasses.replace(job_subject, stdin=stdin)) if finding not in own]

    own = analyze(dataclasses.replace(job_subject, stdin=None))
    rests = line_rests(text)
    if rests is None:
        if any(finding.tier >= 2 for finding in stdin_findings(PROBE)):
            why = "input too long to classify at every point where a program of the job may stop reading it"
            return [(text[:200], 2, why)]
        return []
    found: list[tuple[str, int, str]] = []
    for start, rest in rests:
        for finding in stdin_findings(rest + "\n"):
            if finding.tier >= 2 and runs_something(finding.canonical or rest):
                why = f"if a program of the job reads {start} characters of the line, the next reader gets the rest"
                found.append((rest[:200], finding.tier, f"{why}: {finding.reason}"))
    return found


def prepare_not_a_terminal(session_id: str) -> Plan:
    raise ToolError(
        "NotATerminal", f"{session_id} has no terminal (a job or a kept output); session_resize is for PTY sessions"
    )


def unfinished_line(text: str) -> str:
    """What a program reading `text` line by line has not run yet: the part after its last newline that ends a
    line (a newline after an odd number of backslashes continues the line, as sh reads it)."""
    end = len(text)
    while True:
        index = text.rfind("\n", 0, end)
        if index < 0:
            return text
        before = text[:index]
        if (len(before) - len(before.rstrip("\\"))) % 2 == 0:
            return text[index + 1 :]
        end = index
