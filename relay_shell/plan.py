"""The executors' contract: the Subject a call carries (all the text that reaches the target, for policy), the
Plan an executor hands the runner to admit and run, and the Execution it produced (or the job it became: a command
still running when its call yielded, adr/0028). Depends on capture only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from relay_shell.capture import CapturedText

# Called by executors with the progress so far (bytes produced, or hosts done); the runner throttles it and
# reports it to the client when it asked for progress.
ProgressFn = Callable[[int], Awaitable[None]]

Outcome = Literal[
    "ok", "exit_nonzero", "timeout", "denied", "error", "confirm_required", "cancelled", "gated", "running"
]


@dataclass(frozen=True)
class Subject:
    """All the text that reaches the target."""

    command: str | None = None  # shell text run as /bin/sh -c
    argv: tuple[str, ...] | None = None  # exec without a shell (use_shell=false)
    script: str | None = None  # script fed to an interpreter
    interpreter: str | None = None  # "bash" | "sh" | "python"
    stdin: str | None = None  # data on stdin
    env: tuple[tuple[str, str | None], ...] = ()  # env overlay (None value = unset)
    fixed_tier: int | None = None  # inspection tools: tier given by the tool
    # Lines typed into a terminal: read by a shell, a Python REPL or anything else, so classified as shell
    # text and, where that finds something stateful, as Python too.
    typed: str | None = None
    # The directories the shell text may start in (a call's `cwd`; a local terminal's shell and its foreground
    # program at the send): relative words are read there as well (attack 5, C1; adr/0025 Round 10).
    directories: tuple[str, ...] = ()
    # What the sessions layer knows of a call beyond its text, as (text, tier, why): how the reader of a terminal
    # takes typed keys and lines (history expansion, completion, line editing, a program's escape, a hook the
    # shell keeps), and what a spawn's env undoes of the terminal's settings (sessions/reading.py, adr/0026).
    session_findings: tuple[tuple[str, int, str], ...] = ()
    # SSH: every spelling of every host the call reaches (deny patterns match them), and whether the host
    # key goes unchecked (known_hosts=ignore asked for by the call).
    hosts: tuple[str, ...] = ()
    unverified_host_key: bool = False
    # ssh_forward: a listener bound to a non-loopback address ("0.0.0.0:8080 (local)"), reachable from other hosts.
    exposed_listener: str | None = None
    # ssh_upload/ssh_download: what moves where ("upload /src -> host:/dst"), a tier-2 file transfer, and the
    # file the transfer replaces, classified like a `>` redirect onto it (a critical file is tier 3).
    transfer: str | None = None
    transfer_writes: str | None = None
    transfer_tree: bool = False  # transfer_writes is the root a tree is merged into (any file below may be replaced)


@dataclass
class Execution:
    status: Outcome
    output: CapturedText
    exit_code: int | None = None
    signal: str | None = None
    stderr: CapturedText | None = None
    error: str | None = None  # "Kind: message" for status error
    fields: dict[str, Any] = field(default_factory=dict)  # tool-specific structured fields
    headline: str | None = None  # the result's first line, when the tool has its own (session reads)
    # Status "running": the command outlived its call's yield_after and runs on as this job (sessions/jobs.py).
    # The runner writes the call's `job` note, returns the handle, and attaches the end record to the job's end.
    job: YieldedJob | None = None


class YieldedJob(Protocol):
    """A command still running when its call returned: its end comes later, and with it the call's end record."""

    @property
    def job_id(self) -> str: ...

    def attach(self, on_end: Callable[[Execution], Any]) -> None:
        """Call `on_end` with the command's final Execution when it ends (at once if it has): the runner writes
        the call's end record there and returns the result the one-shot call would have, which the job keeps."""
        ...

    async def abandon(self, reason: str) -> None:
        """End it now, unreported (its `job` note could not be written): the end still reaches `on_end`."""
        ...


@dataclass
class Plan:
    subject: Subject  # everything that reaches the target, for classification
    execute: Callable[[ProgressFn], Awaitable[Execution]]
    notes: list[str] = field(default_factory=list)  # clamped arguments and similar adjustments
    timeout: float | None = None
    target: dict[str, Any] | None = None  # host(s) and SSH identity for the audit record; filled in by execute
    # Calls that reach many hosts: each host is admitted on its own (a deny rule on one host refuses that
    # host, not the call); the runner fills `denied_hosts` (name -> the refusal's first line) before execute.
    host_subjects: dict[str, Subject] | None = None
    denied_hosts: dict[str, str] = field(default_factory=dict)
    # Set when progress counts something other than bytes (hosts); a byte count with a total learnt while running
    # (a transfer) sets it in execute, and the runner keeps reporting at most once a second.
    progress_total: int | None = None
    progress_unit: str = "bytes of output"
    session_id: str | None = None  # the PTY session the call acts on, for the audit record
    # The call's id, set by the runner before execute: an executor names its containment unit after it (the
    # RELAY_SHELL_UNIT marker, the cgroup), so a process can be traced to its call, after a restart too.
    call_id: str | None = None
    # Replaces the call's arguments in the audit record (input typed at a password prompt); when set, a
    # refusal's reason is withheld from the record too, since it may quote the input.
    recorded_arguments: dict[str, Any] | None = None
    # Tier-3 confirmation: the digest of its token (or elicitation id), on every record of it (plan, confirm,
    # execute) so an auditor can join them. Never the token itself.
    confirmation: str | None = None
    # Input to a session: the session's state a tier-3 confirmation is bound to (inputs written, output
    # produced: any since voids it) and what the human is shown about where the input goes.
    confirm_state: dict[str, Any] | None = None
    # What computes `confirm_state` (it reads the session's recent output), called only when a confirmation is
    # bound: in the same turn of the event loop as prepare, so the session cannot have changed in between.
    confirm_state_of: Callable[[], dict[str, Any]] | None = None
    # Further fields of the call's audit record (a briefing: the runbooks it returned and their digests); set
    # by prepare or by execute.
    record_fields: dict[str, Any] | None = None
    # begin_session: when the call succeeds, the runner opens the briefing gate for the calling MCP session.
    opens_gate: bool = False


class CommandOutcome(Protocol):
    """How a command ended, locally (ProcessOutcome) or over SSH (RemoteOutcome)."""

    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: CapturedText
    stderr: CapturedText | None


def command_execution(outcome: CommandOutcome, fields: dict[str, Any] | None = None) -> Execution:
    """The result of a one-shot command: timeout, ok or exit_nonzero, with separate stderr when kept apart."""
    fields = dict(fields or {})
    if outcome.stderr is not None:
        fields["stderr"] = outcome.stderr.text
        fields["stderr_bytes"] = outcome.stderr.produced_bytes
    status: Outcome
    if outcome.timed_out:
        status = "timeout"
    elif outcome.exit_code == 0:
        status = "ok"
    else:
        status = "exit_nonzero"
    return Execution(
        status=status,
        output=outcome.stdout,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        stderr=outcome.stderr,
        fields=fields,
    )
