"""server_info and audit_tail: tier-0 plans that describe the server and its recent audit records."""

from __future__ import annotations

import re
from typing import Any

import orjson

from relay_shell import __version__
from relay_shell.audit.log import AuditLog
from relay_shell.audit.tail import TailFilter, recent_records
from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.settings.model import Settings

MAX_TAIL_LINES = 1000
CALL_ID = re.compile(r"[A-Za-z0-9-]{1,64}")


def server_state(
    settings: Settings,
    audit_log: AuditLog,
    metrics_port: int | None,
    open_sessions: int,
    ssh_connections: int,
    audit_counts: dict[str, int],
    containment: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    audit_offhost: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "version": __version__,
        "transport": settings.http.transport,
        "policy": {
            "mode": settings.policy.policy_mode,
            "deny_patterns": len(settings.policy.policy_deny),
            "allow_patterns": len(settings.policy.policy_allow),
            "confirm_tier3": settings.policy.confirm_tier3,
            "confirm_ttl_seconds": settings.policy.confirm_ttl,
        },
        "limits": {
            "max_output_default": settings.limits.max_output,
            "max_output_hard": settings.limits.max_output_hard,
            "max_timeout_seconds": settings.limits.max_timeout,
            "kill_grace_seconds": settings.limits.kill_grace,
        },
        "audit": {
            "path": str(audit_log.path),
            "chain": settings.audit.audit_chain,
            "fsync": settings.audit.audit_fsync,
            "on_failure": settings.audit.audit_on_failure,
            "healthy": audit_log.healthy,
            "last_error": audit_log.last_error,
            "records_written": audit_log.records_written,
            "write_errors": audit_log.write_errors,
            # calls refused because their start record (or the log) could not be written; nothing of them ran
            "refused_calls": audit_counts["refused_calls"],
            # calls the previous server process left without an end record (named in this one's server:start)
            "interrupted_at_start": audit_counts["interrupted_at_start"],
            "seq": audit_log.seq if settings.audit.audit_chain else None,
            # off-host copy and signed checkpoints (adr/0020): lag, errors, the last checkpoint; None when off
            **(audit_offhost or {"shipping": None, "journald": None, "checkpoints": None}),
        },
        "sessions": {
            "open": open_sessions,
            "max": settings.sessions.max_sessions,
            "buffer_bytes": settings.sessions.session_buffer_bytes,
            "idle_timeout_seconds": settings.sessions.session_idle_timeout,
            "max_lifetime_seconds": settings.sessions.session_max_lifetime,
            "transcripts": str(settings.sessions.record_dir) if settings.sessions.record_dir else None,
        },
        "metrics": {"listen_port": metrics_port},
        "containment": containment,
        "ssh": {
            "ssh_config": str(settings.ssh.ssh_config) if settings.ssh.ssh_config else None,
            "inventory": str(settings.ssh.inventory) if settings.ssh.inventory else None,
            "host_key_mode": settings.ssh.ssh_known_hosts,
            "connect_timeout_seconds": settings.ssh.ssh_connect_timeout,
            "connections_open": ssh_connections,
            "max_connections": settings.ssh.ssh_max_connections,
            "channels_per_connection": settings.ssh.ssh_max_channels,
            "idle_timeout_seconds": settings.ssh.ssh_idle_timeout,
            "keepalive_seconds": settings.ssh.ssh_keepalive,
            "max_forwards": settings.ssh.max_forwards,
            "fanout_max_hosts": settings.ssh.fanout_max_hosts,
            "fanout_max_concurrency": settings.ssh.fanout_max_concurrency,
            "max_transfer_bytes": settings.ssh.max_transfer_bytes,
        },
        **(extra or {}),
    }


def prepare_server_info(
    settings: Settings,
    audit_log: AuditLog,
    metrics_port: int | None,
    open_sessions: int,
    ssh_connections: int,
    audit_counts: dict[str, int],
    containment: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    audit_offhost: dict[str, Any] | None = None,
) -> Plan:
    """`extra`: sections other areas describe themselves (runbooks, the briefing gate)."""

    async def execute(progress: ProgressFn) -> Execution:
        state = server_state(
            settings,
            audit_log,
            metrics_port,
            open_sessions,
            ssh_connections,
            audit_counts,
            containment,
            extra,
            audit_offhost,
        )
        return _text_execution(settings, state, {"info": state})

    return Plan(subject=Subject(fixed_tier=0), execute=execute)


def prepare_audit_tail(
    settings: Settings,
    audit_log: AuditLog,
    tool: str | None,
    tier: int | None,
    denied: bool | None,
    lines: int,
    call_id: str | None = None,
) -> Plan:
    if not 1 <= lines <= MAX_TAIL_LINES:
        raise ArgumentError(f"lines: {lines} is out of range; allowed: 1 to {MAX_TAIL_LINES}")
    if tier is not None and not 0 <= tier <= 3:
        raise ArgumentError(f"tier: {tier} is out of range; allowed: 0 to 3")
    check_call_id(call_id)
    record_filter = TailFilter(tool=tool, tier=tier, denied=denied, call_id=call_id)

    async def execute(progress: ProgressFn) -> Execution:
        records = recent_records(audit_log.path, lines, record_filter)
        # structuredContent is bounded like the text: keep the newest records that fit the output cap.
        size = sum(len(orjson.dumps(record)) + 4 for record in records)
        while records and size > settings.limits.max_output:
            size -= len(orjson.dumps(records.pop(0))) + 4
        return _text_execution(settings, records, {"records": records})

    return Plan(subject=Subject(fixed_tier=0), execute=execute)


def check_call_id(call_id: str | None) -> None:
    """A call_id filter must look like one (the records' `call_id`), so a typo is an error, not an empty list."""
    if call_id is not None and not CALL_ID.fullmatch(call_id):
        shown = call_id if len(call_id) <= 80 else call_id[:77] + "..."
        raise ArgumentError(
            f"call_id: {shown!r} is not a call id; allowed: the `call_id` of an audit record, "
            "e.g. '3f9a1b2c4d5e-17' (letters, digits and '-', at most 64)"
        )


def _text_execution(settings: Settings, value: Any, fields: dict[str, Any]) -> Execution:
    capture = BoundedCapture(settings.limits.max_output)
    capture.feed(orjson.dumps(value, option=orjson.OPT_INDENT_2))
    return Execution(status="ok", output=capture.result(), fields=fields)
