"""What an executor hands the runner: a Plan to admit and run, and the Execution it produced."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from relay_shell.capture import CapturedText
from relay_shell.policy.classify import Subject
from relay_shell.results import Outcome

# Called by executors with the progress so far (bytes produced, or hosts done); the runner throttles it and
# reports it to the client when it asked for progress.
ProgressFn = Callable[[int], Awaitable[None]]


class ToolError(Exception):
    """A call that cannot proceed, reported as `[ERROR: Kind: message]`; the message says what to change."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ArgumentError(ToolError):
    """A tool argument is invalid. The message names the argument, the problem and what is allowed."""

    def __init__(self, message: str) -> None:
        super().__init__("InvalidArgument", message)


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
    # Replaces the call's arguments in the audit record (input typed at a password prompt); when set, a
    # refusal's reason is withheld from the record too, since it may quote the input.
    recorded_arguments: dict[str, Any] | None = None
    # Tier-3 confirmation: the digest of its token (or elicitation id), on every record of it (plan, confirm,
    # execute) so an auditor can join them. Never the token itself.
    confirmation: str | None = None
    # Input to a session: the session's state a tier-3 confirmation is bound to (inputs written, output
    # produced: any since voids it) and what the human is shown about where the input goes.
    confirm_state: dict[str, Any] | None = None
