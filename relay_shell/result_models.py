"""The typed tool results: the models behind every tool's outputSchema. Nothing validates with them on a call;
only the schema built from them (cached, surface/build.py) and a tool's first call (the SDK evaluates the
function's annotations for its argument model) need them, so they load then, through `results` (its
`__getattr__`), not at every server start (~5 ms)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from relay_shell.plan import Outcome


def nullable(json_type: str, description: str) -> WithJsonSchema:
    """`{"type": [T, "null"]}` instead of pydantic's anyOf: same meaning, and clients validate every result
    against the schema, where anyOf costs them several times more."""
    return WithJsonSchema({"type": [json_type, "null"], "description": description})


def _every_field_required(schema: dict[str, Any]) -> None:
    # Every result carries every field (its default when the call has no value for it), so the schema says
    # so: a client may read `result["timed_out"]` without a fallback.
    schema["required"] = list(schema["properties"])


class ToolResult(BaseModel):
    """Fields every tool returns; tools add their own below. Every field is in every structuredContent, at its
    declared default (null, false, 0, []) when the call has no value for it, and required in the schema."""

    # These models only describe results (their JSON schema, built once and cached): nothing validates with
    # them on a call, so pydantic need not build their validators when the server starts.
    model_config = ConfigDict(defer_build=True, json_schema_extra=_every_field_required)

    status: Outcome = Field(
        description="what happened: ok, exit_nonzero, timeout, denied, error, confirm_required, cancelled, gated, "
        "running (the command runs on as a job)"
    )
    tier: int = Field(description="policy tier of the call: 0 observe, 1 reversible, 2 stateful, 3 irreversible")
    exit_code: Annotated[int | None, nullable("integer", "exit status when the command exited")] = None
    signal: Annotated[str | None, nullable("string", "signal name when the command was killed by a signal")] = None
    timed_out: bool = Field(False, description="true when the timeout killed the command")
    truncated: bool = Field(False, description="true when output was cut to head + tail")
    output: str = Field(description="the (possibly truncated) output text")
    output_bytes: int = Field(description="bytes the command produced in total, before any cut")
    output_sha256: str = Field(description="SHA-256 of every byte produced (audit raw_sha256)")
    duration_ms: int = Field(description="wall time of the call in milliseconds")
    notes: list[str] = Field([], description="adjustments made, e.g. a clamped timeout")
    error: Annotated[str | None, nullable("string", "error or denial message when status is error or denied")] = None
    confirm_token: Annotated[
        str | None,
        nullable("string", "status confirm_required: after the human agrees, pass to operation_confirm, then repeat"),
    ] = None
    confirm_ttl: Annotated[
        float | None, nullable("number", "status confirm_required: seconds to confirm and repeat the identical call")
    ] = None


class ExecResult(ToolResult):
    stderr: Annotated[str | None, nullable("string", "stderr when merge_stderr=false")] = None
    stderr_bytes: Annotated[int | None, nullable("integer", "bytes written to stderr when merge_stderr=false")] = None
    running: bool = Field(
        False, description="true: the command still runs as job `job_id`; read it with session_recv(session_id=job_id)"
    )
    job_id: Annotated[
        str | None,
        nullable("string", "the job the command runs on as (after yield_after); read, send to, kill it as a session"),
    ] = None
    cursor: Annotated[
        int | None, nullable("integer", "a job's output so far: session_recv continues after it, or pass it as since")
    ] = None
    output_id: Annotated[
        str | None,
        nullable("string", "output cut: all of it kept for a while; page it with session_recv(session_id=output_id)"),
    ] = None


class SessionResult(ToolResult):
    session_id: Annotated[str | None, nullable("string", "the session the call acted on")] = None
    cursor: Annotated[
        int | None, nullable("integer", "offset after the last byte returned: pass as `since` to re-read")
    ] = None
    since: Annotated[int | None, nullable("integer", "offset of the first byte returned")] = None
    dropped: int = Field(0, description="bytes missed: overwritten in the ring before they were read")
    wait: Annotated[str | None, nullable("string", "why the wait ended: match, quiet, timeout or eof")] = None
    match_index: Annotated[int | None, nullable("integer", "index of the `until` pattern that matched")] = None
    match_text: Annotated[str | None, nullable("string", "the text the pattern matched")] = None
    state: Annotated[str | None, nullable("string", "running, exited or closed")] = None
    pid: Annotated[int | None, nullable("integer", "process id of the session's program (shell_spawn)")] = None
    running: bool = Field(False, description="a job (j-…): true while its command runs")
    result: Annotated[
        dict[str, Any] | None,
        nullable(
            "object",
            "a job that ended: the result its call would have returned had it not yielded (status, exit_code, "
            "signal, timed_out, output head + tail, output_bytes, output_sha256, output_id, stderr, duration_ms)",
        ),
    ] = None
    total_bytes: Annotated[
        int | None, nullable("integer", "a kept output (o-…): its size; the last page has cursor equal to it")
    ] = None


class SessionListResult(ToolResult):
    sessions: list[dict[str, Any]] = Field([], description="your sessions with their state")


class SshExecResult(ExecResult):
    host: Annotated[str | None, nullable("string", "the host as named in the call")] = None
    host_key: Annotated[str | None, nullable("string", "SHA-256 fingerprint of the host key the server presented")] = (
        None
    )


class FanoutResult(ToolResult):
    hosts: list[dict[str, Any]] = Field(
        [], description="per host: host, status, exit_code, duration_ms, output, output_bytes, output_sha256, error"
    )
    summary: Annotated[dict[str, Any] | None, nullable("object", "hosts counted by status")] = None


class KeyscanResult(ToolResult):
    hosts: list[dict[str, Any]] = Field([], description="per host: status and keys (type, fingerprint, known_hosts)")


class TransferResult(ToolResult):
    host: Annotated[str | None, nullable("string", "the host as named in the call")] = None
    host_key: Annotated[str | None, nullable("string", "SHA-256 fingerprint of the host key the server presented")] = (
        None
    )
    files: list[dict[str, Any]] = Field(
        [], description="what arrived (first 1000): path (destination), bytes and sha256, or link for a symlink"
    )
    failed: list[dict[str, Any]] = Field(
        [], description="what did not arrive (first 1000): path (source) and error, including entries never started"
    )
    files_done: int = Field(0, description="regular files that arrived complete")
    bytes_done: int = Field(0, description="bytes of the files that arrived complete")
    files_total: int = Field(0, description="regular files the call set out to transfer")
    bytes_total: int = Field(0, description="bytes of those files as scanned before the transfer")
    partial: bool = Field(False, description="true when not everything arrived (timeout, errors, size limit)")


class ForwardResult(ToolResult):
    forward_id: Annotated[str | None, nullable("string", "the forward: pass to ssh_forward_close")] = None
    listen_port: Annotated[int | None, nullable("integer", "the port the listener got (the chosen one for port 0)")] = (
        None
    )
    forward: Annotated[
        dict[str, Any] | None,
        nullable(
            "object",
            "spec, host, via, listen, listen_on, destination, bytes_to_destination, bytes_from_destination, "
            "connections, open_connections, failed_connections, refused_connections, age_s",
        ),
    ] = None


class ForwardListResult(ToolResult):
    forwards: list[dict[str, Any]] = Field([], description="your open forwards, each as `forward` in ssh_forward")


class InventoryResult(ToolResult):
    inventory: Annotated[dict[str, Any] | None, nullable("object", "hosts, groups, problems, files")] = None


class ServerInfoResult(ToolResult):
    info: Annotated[dict[str, Any] | None, nullable("object", "version, transport, policy, limits, audit state")] = None


class ConfirmResult(ToolResult):
    expires_in: Annotated[
        float | None, nullable("number", "seconds left to repeat the identical call, which then runs once")
    ] = None


class AuditTailResult(ToolResult):
    records: list[dict[str, Any]] = Field(
        [],
        description="audit records, oldest first; a call that ran has a `phase: start` and a `phase: end` record "
        "with one `call_id`",
    )


class RunbookEntry(BaseModel):
    """One runbook in a briefing: every field is always present, and no other."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str = Field(description="the runbook (its prompt name; the resource relay-shell://runbooks/NAME)")
    title: str = Field(description="its title")
    priority: int = Field(description="1 to 10; 10 = a guardrail, always included")
    score: int = Field(description="keyword matches × priority (0 for a guardrail nothing matched)")
    shown: Literal["full", "summary", "name"] = Field(description="how it is in the text: full, summary or name")
    bytes: int = Field(description="bytes of its part of the text")
    sha256: str = Field(description="SHA-256 of the runbook file as loaded")


class RunbookResult(ToolResult):
    keywords: list[str] = Field([], description="the keywords the runbooks were matched with")
    runbooks: list[RunbookEntry] = Field([], description="the runbooks returned, best first")
    matched: int = Field(0, description="runbooks that matched, priority-10 ones included")
    omitted: int = Field(0, description="matching runbooks not even named, for want of bytes")
    total: int = Field(0, description="runbooks offered in this policy mode")
    gate: Annotated[
        str | None, nullable("string", "begin_session: the briefing gate of this session (open, or off)")
    ] = None
