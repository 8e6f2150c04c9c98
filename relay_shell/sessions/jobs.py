"""Jobs (adr/0028): a command that outlives its call's `yield_after` runs on under a handle, `j-…`, and the call
returns the output so far with that handle. A job is a session whose terminal is the running command: the same
output ring, cursor, `until` and owner, read and ended through the session tools (sessions/job_plans.py).

The call's end record is written when the command ends — whether or not anyone reads it — by the runner, which
attached itself to the job when the call yielded (`attach`); the result it returns is the one the one-shot call
would have returned, and the job keeps it for RELAY_SHELL_JOB_RETENTION seconds for session_recv to show. Jobs
belong to the caller's principal (the token or OAuth grant over HTTP, so a client that reconnects finds them; the
stream over stdio), count against RELAY_SHELL_MAX_JOBS, and are ended, and recorded, when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_types import CallToolResult

from relay_shell.errors import ArgumentError, ToolError
from relay_shell.launch import UNTRACED, TreeRecords
from relay_shell.outputs import OutputStore, StreamSink
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.sessions.registry import CLOSED_REMEMBERED, Session
from relay_shell.sessions.ring import OutputRing

JOB_PREFIX = "j-"
STOP_WAIT = 30.0  # seconds a stop waits for the command's end (its kill escalates well within it)


class JobCommand(Protocol):
    """What a running command offers its job: local (local/process.py) or over SSH (ssh/remote_exec.py)."""

    stdout: StreamSink
    stderr: StreamSink | None
    progress: ProgressFn

    @property
    def pid(self) -> int | None: ...

    @property
    def where(self) -> str: ...  # "local", "on root@db1:22"

    def produced(self) -> int: ...

    async def wait(self, until: float | None) -> bool: ...

    def stop(self, first_signal: int | None) -> None: ...

    async def send_signal(self, signal_number: int) -> None: ...

    async def write(self, data: bytes, deadline: float) -> None: ...

    def close_stdin(self) -> None: ...


@dataclass
class JobStart:
    """How one call may become a job: when it yields, who owns the job, what it is, and where it goes."""

    table: JobTable
    outputs: OutputStore  # a cut result's full output (outputs.py)
    owner: str  # the principal over HTTP, the stream over stdio (identity.job_owner_of)
    client_id: str
    yield_after: float  # seconds; 0 = never
    stdin_open: bool  # the command's stdin stays open for session_send


class JobRing(OutputRing):
    """A job's ring, first filled with the output produced before the call yielded: when only part of it was
    still held (an output over RELAY_SHELL_OUTPUT_STORE_BYTES), the rest counts as dropped."""

    held_from = 0

    @property
    def start(self) -> int:
        return max(self.held_from, self.end - self.capacity)

    def fill(self, data: bytes, total: int) -> None:
        data = data[-self.capacity :]
        self.end = self.held_from = total - len(data)
        self.append(data)


class JobTerminal:
    """The session face of a job's command: a byte stream without a screen."""

    exec_trace: TreeRecords = UNTRACED  # the call's exec trace goes into its end record, not into session reads
    kernel_confined = False  # not read: a job's stdin is classified by job_plans.py, not as typed lines

    def directories(self) -> tuple[str, ...]:
        return ()  # not read: a job's stdin is classified by job_plans.py

    def __init__(self, kind: str, command: JobCommand) -> None:
        self.kind = kind
        self.command = command
        self.pid = command.pid
        self.where = command.where
        self.signalling: set[asyncio.Future[None]] = set()

    def start(self, on_output: Callable[[bytes], None], on_exit: Callable[[int | None, str | None], None]) -> None:
        pass  # the job feeds itself (Job.__init__) and ends itself (Job.finished)

    async def write(self, data: bytes, deadline: float) -> None:
        await self.command.write(data, deadline)

    def resize(self, cols: int, rows: int) -> None:
        raise ToolError("NotATerminal", "a job runs without a terminal: there is nothing to resize")

    def send_signal(self, signal_number: int) -> None:
        signalling = asyncio.ensure_future(self.command.send_signal(signal_number))
        self.signalling.add(signalling)
        signalling.add_done_callback(self.signalling.discard)

    def password_mode(self) -> bool:
        return False

    def shell_reads_line(self) -> bool:
        return False  # what reads the job's stdin is not known (sessions/passwords.py)

    def reader_waiting(self, whole: int = 0) -> bool:
        return False  # no terminal: nothing asks for a password

    def keeps_lines(self, length: int) -> bool:
        return True  # not a terminal: a job's input is classified by job_plans.py

    def reader_wait(self) -> float:
        return 0.0  # no terminal: nothing to wait for

    def line_settings(self) -> list[object] | None:
        return None  # no terminal: the bytes reach the program as written

    def interrupt_clears_line(self) -> bool:
        return False  # no terminal: a Ctrl-C written to stdin is a byte, not a signal

    async def close(self, grace: float, first_signal: int | None = None) -> None:
        self.command.stop(first_signal)


class Job(Session):
    def __init__(
        self,
        job_id: str,
        start: JobStart,
        kind: str,
        shown: str,
        subject: Subject,
        command: JobCommand,
        buffer_bytes: int,
        started: float,
        on_end: Callable[[Session], None],
    ) -> None:
        super().__init__(job_id, start.owner, start.client_id, shown, JobTerminal(kind, command), 0, 0, 0, None, on_end)
        self.ring = JobRing(buffer_bytes)
        self.process = command
        self.subject = subject  # the call's: input sent to the job is classified with it
        self.stdin_open = start.stdin_open
        self.stdin_was_open = start.stdin_open
        # Input sent that no newline has ended yet: the next send is classified with it, as the line it completes.
        self.input_tail = ""
        self.created = started  # the call's start: the age is the command's
        self.final: CallToolResult | None = None  # the call's result, as the one-shot call would have returned it
        self.final_execution: Execution | None = None
        self.stop_reason: str | None = None
        self._on_end: Callable[[Execution], Any] | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        backlog = command.stdout.recent(buffer_bytes)
        if command.stderr is not None:  # before the yield the two streams are shown one after the other
            backlog += command.stderr.recent(buffer_bytes)
        self.ring.fill(backlog, command.produced())
        self.read_cursor = self.ring.end  # the yield's result showed everything so far
        command.stdout.listener = self.on_output
        if command.stderr is not None and command.stderr is not command.stdout:
            command.stderr.listener = self.on_output

    # -- the YieldedJob face the runner sees ---------------------------------------------------------------

    @property
    def job_id(self) -> str:
        return self.session_id

    def attach(self, on_end: Callable[[Execution], Any]) -> None:
        self._on_end = on_end
        if self.final_execution is not None and self.final is None:
            self.final = on_end(self.final_execution)

    async def abandon(self, reason: str) -> None:
        self.stop(None, reason)
        await self.ended()

    # -- its life --------------------------------------------------------------------------------------------

    async def run_to_end(self, final: Callable[[], Awaitable[Execution]]) -> None:
        """The command's remaining life, in a task of its own: wait for its end, make its final Execution, have
        the call's end record written, then wake the readers."""
        try:
            await self.process.wait(None)
            execution = await final()
        except ToolError as exc:  # an SSH connection lost on the way: the end record says so
            execution = Execution("error", self.process.stdout.capture.result(), error=f"{exc.kind}: {exc}")
        except Exception as exc:  # a bug must still end the job, audited
            execution = Execution("error", self.process.stdout.capture.result(), error=f"Internal: {exc!r}"[:300])
        if self.stop_reason is not None:
            execution.status = "cancelled"
            execution.error = self.stop_reason
        self.final_execution = execution
        if self._on_end is not None:
            self.final = self._on_end(execution)  # the end record, then the result it allows
        self.on_exit(execution.exit_code, execution.signal)
        if not self.done.done():
            self.done.set_result(None)

    def stop(self, first_signal: int | None, reason: str) -> None:
        if self.state == "running" and self.stop_reason is None:
            self.stop_reason = reason
            self.end_reason = reason
        self.process.stop(first_signal)

    async def ended(self, within: float = STOP_WAIT) -> None:
        """Until the job has ended and its end record was written, or `within` seconds passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.done), within)

    def running_execution(self, extra: dict[str, Any]) -> Execution:
        """The yielding call's result: the output so far (as the one-shot would show it) and the handle."""
        stderr = self.process.stderr
        stderr_text = stderr.capture.result() if stderr is not None else None
        after = time.monotonic() - self.created
        fields: dict[str, Any] = {"job_id": self.job_id, "cursor": self.ring.end, "running": True, **extra}
        if stderr_text is not None:
            fields["stderr"] = stderr_text.text
            fields["stderr_bytes"] = stderr_text.produced_bytes
        return Execution(
            status="running",
            output=self.process.stdout.capture.result(),
            stderr=stderr_text,
            headline=running_line(self.job_id, after, self.ring.end),
            fields=fields,
            job=self,
        )

    def describe(self) -> dict[str, object]:
        described = super().describe()
        final = self.final.structured_content if self.final is not None else None
        described.update(
            cols=None,
            rows=None,
            running=self.state == "running",
            status=(final or {}).get("status", "running" if self.state == "running" else "ended"),
            stdin_open=self.state == "running" and self.stdin_open,
        )
        if final is not None:
            described.update(exit_code=final.get("exit_code"), signal=final.get("signal"))
        return described


async def run_or_yield(
    start: JobStart | None,
    command: JobCommand,
    plan: Plan,
    kind: str,
    shown: str,
    final: Callable[[], Awaitable[Execution]],
    running_fields: Callable[[], dict[str, Any]] = dict,
) -> Execution:
    """A started command to its end, or, still running at the call's `yield_after`, on as a job: then the call's
    result is the output so far and the job's handle. `final` makes the ended command's Execution (the one-shot
    result: drained, a cut output kept, the exec trace into the plan)."""
    started = time.monotonic()
    until = None if start is None or start.yield_after <= 0 else started + start.yield_after
    if await command.wait(until):
        return await final()
    assert start is not None
    if not start.table.room():
        plan.notes.append(
            f"not yielded after {seconds(start.yield_after)}s: {start.table.running()} jobs are running "
            f"(RELAY_SHELL_MAX_JOBS={start.table.max_jobs}); the call waited for the command's end"
        )
        await command.wait(None)
        return await final()
    job_id = start.table.new_id()

    async def job_final() -> Execution:
        execution = await final()
        execution.fields["job_id"] = job_id
        plan.record_fields = {**(plan.record_fields or {}), "job_id": job_id}
        return execution

    from relay_shell.redaction.redact import redact  # loaded by the call's start record already

    command.progress = _no_progress  # the call has returned: nobody to report progress to
    job = start.table.open(job_id, start, kind, redact(shown)[:1024], plan.subject, command, started, job_final)
    return job.running_execution(running_fields())


async def _no_progress(produced: int) -> None:
    pass


def running_line(job_id: str, after: float, cursor: int) -> str:
    return f"[RUNNING: job {job_id} after {seconds(after)}s | cursor {cursor}]"


def seconds(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


class JobTable:
    """Every job of the server, by id: at most RELAY_SHELL_MAX_JOBS (running or kept), each ended one kept for
    RELAY_SHELL_JOB_RETENTION seconds."""

    def __init__(
        self,
        max_jobs: int,
        buffer_bytes: int,
        retention: float,
        yield_after: float,
        outputs: OutputStore,
        connected: Callable[[str], bool] = lambda owner: True,
    ) -> None:
        self.default_yield = yield_after  # RELAY_SHELL_YIELD_AFTER
        self.max_jobs = max_jobs
        self.buffer_bytes = buffer_bytes
        self.retention = retention
        self.outputs = outputs
        self.connected = connected
        self.jobs: dict[str, Job] = {}
        self.gone: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (owner, why it is gone)
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, owner: str, client_id: str, yield_after: float | None, stdin_open: bool = False) -> JobStart:
        """How a call may yield, its arguments checked: `yield_after` None is the server's default."""
        seconds_after = self.default_yield if yield_after is None else yield_after
        if seconds_after < 0:
            raise ArgumentError(
                f"yield_after: {yield_after:g} is negative; allowed: 0 (never yield: wait for the end) or seconds, "
                f"e.g. {self.default_yield:g}"
            )
        if stdin_open and seconds_after == 0:
            raise ArgumentError(
                "stdin_open: needs yield_after above 0 (input reaches the job with session_send once the call "
                "returned its handle); allowed: stdin_open=false, or yield_after > 0"
            )
        return JobStart(self, self.outputs, owner, client_id, seconds_after, stdin_open)

    def room(self) -> bool:
        """Whether one more job may open: a kept ended job makes way (the oldest), a running one never does."""
        if len(self.jobs) < self.max_jobs:
            return True
        ended = [job for job in self.jobs.values() if job.state != "running"]
        if not ended:
            return False
        self._forget(min(ended, key=lambda job: job.ended_at or 0), "dropped for a newer job (RELAY_SHELL_MAX_JOBS)")
        return True

    @staticmethod
    def new_id() -> str:
        return JOB_PREFIX + secrets.token_hex(6)

    def open(
        self,
        job_id: str,
        start: JobStart,
        kind: str,
        shown: str,
        subject: Subject,
        command: JobCommand,
        started: float,
        final: Callable[[], Awaitable[Execution]],
    ) -> Job:
        job = Job(job_id, start, kind, shown, subject, command, self.buffer_bytes, started, self._ended)
        self.jobs[job_id] = job
        task = asyncio.get_running_loop().create_task(job.run_to_end(final))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return job

    def get(self, owner: str, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        remembered = self.gone.get(job_id)
        if (job is not None and job.owner != owner) or (remembered is not None and remembered[0] != owner):
            raise ToolError("SessionNotOwned", f"job {job_id!r} belongs to another client; jobs are private")
        if job is not None:
            return job
        if remembered is not None:
            raise ToolError("JobGone", f"job {job_id!r} is gone: {remembered[1]}")
        raise ToolError(
            "UnknownSession", f"no job {job_id[:64]!r}; session_list shows yours (ids look like j-1a2b3c4d5e6f)"
        )

    def owned_by(self, owner: str) -> list[Job]:
        return [job for job in self.jobs.values() if job.owner == owner]

    def running(self) -> int:
        return sum(1 for job in self.jobs.values() if job.state == "running")

    async def close(self, job: Job, reason: str, first_signal: int | None = None) -> None:
        """End a running job (its whole unit) and wait until its end record is written; an ended one stays kept."""
        job.stop(first_signal, reason)
        await job.ended()

    async def close_all(self, reason: str) -> None:
        """The server stops: every running job is ended and its end record written."""
        running = [job for job in self.jobs.values() if job.state == "running"]
        for job in running:
            job.stop(None, reason)
        await asyncio.gather(*(job.ended() for job in running))

    async def close_disconnected(self) -> None:
        """A job of a stream that has ended (stdio, HTTP without a token) can never be read again: end it."""
        gone = [job for job in self.jobs.values() if job.state == "running" and not self.connected(job.owner)]
        for job in gone:
            job.stop(None, "client disconnected")
        await asyncio.gather(*(job.ended() for job in gone))

    def _ended(self, session: Session) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(
            self.retention,
            self._forget,
            session,
            f"its result was kept {seconds(self.retention)}s after it ended (RELAY_SHELL_JOB_RETENTION)",
        )

    def _forget(self, session: Session, why: str) -> None:
        if self.jobs.get(session.session_id) is not session:
            return
        del self.jobs[session.session_id]
        session.state = "closed"
        self.gone[session.session_id] = (session.owner, why)
        while len(self.gone) > CLOSED_REMEMBERED:
            self.gone.popitem(last=False)
