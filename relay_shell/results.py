"""The text grammar a model reads, and the structured content of every result (the models behind each tool's
outputSchema are in result_models.py, loaded on first use through this module).

First line says what happened: `[exit N]`, `[signal NAME]`, `[TIMEOUT after Ns]`, `[DENIED tier N (NAME): why]`,
`[CONFIRM REQUIRED tier 3: why]`, `[GATED: why]`, `[ERROR: Kind: message]`, `[CANCELLED]` (`[CANCELLED: why]` for a
job ended from outside), or `[RUNNING: job ID after Ns | cursor C]` when the command runs on as a job (adr/0028);
notes (clamped arguments, a cut output kept as `o-…`) follow as `[NOTE: …]` lines; then the body; then
`[TRUNCATED: N bytes produced, M shown — head H + tail T]` when the body was cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.plan import Execution, Outcome
from relay_shell.tiers import TIER_NAMES

if TYPE_CHECKING:
    from relay_shell.result_models import AuditTailResult as AuditTailResult
    from relay_shell.result_models import ConfirmResult as ConfirmResult
    from relay_shell.result_models import ExecResult as ExecResult
    from relay_shell.result_models import FanoutResult as FanoutResult
    from relay_shell.result_models import ForwardListResult as ForwardListResult
    from relay_shell.result_models import ForwardResult as ForwardResult
    from relay_shell.result_models import InventoryResult as InventoryResult
    from relay_shell.result_models import KeyscanResult as KeyscanResult
    from relay_shell.result_models import RunbookEntry as RunbookEntry
    from relay_shell.result_models import RunbookResult as RunbookResult
    from relay_shell.result_models import ServerInfoResult as ServerInfoResult
    from relay_shell.result_models import SessionListResult as SessionListResult
    from relay_shell.result_models import SessionResult as SessionResult
    from relay_shell.result_models import SshExecResult as SshExecResult
    from relay_shell.result_models import ToolResult as ToolResult
    from relay_shell.result_models import TransferResult as TransferResult


def __getattr__(name: str) -> Any:
    """The result models (relay_shell/result_models.py), loaded on first use: tools name them in their return
    annotations as `results.ExecResult`, which Python evaluates only when a schema or an argument model is built."""
    if name.endswith(("Result", "Entry")):
        from relay_shell import result_models

        return getattr(result_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def status_line(
    status: Outcome, exit_code: int | None, signal: str | None, timeout: float | None, error: str | None, tier: int
) -> str:
    if status == "denied":
        return f"[DENIED tier {tier} ({TIER_NAMES[tier]}): {error}]"
    if status == "timeout":
        return f"[TIMEOUT after {timeout:g}s]"
    if status == "error":
        return f"[ERROR: {error}]"
    if status == "cancelled":
        return "[CANCELLED]" if error is None else f"[CANCELLED: {error}]"
    if status == "confirm_required":
        return f"[CONFIRM REQUIRED tier {tier}: {error}]"
    if status == "gated":
        return f"[GATED: {error}]"
    if signal is not None:
        return f"[signal {signal}]"
    if exit_code is not None:
        return f"[exit {exit_code}]"
    return "[ok]"


# Bytes a cut text keeps free for its gap marker ("\n…\n") and its [TRUNCATED …] line (about 100 bytes).
CUT_NOTE_ROOM = 160


def capped_text(text: str, cap: int) -> tuple[str, CapturedText]:
    """A prompt's or resource's text within `cap` bytes: as it is, or cut to head and tail so that they, the gap
    marker and the [TRUNCATED …] line together fit (the text is all such a read returns: no status line)."""
    data = text.encode("utf-8")
    capture = BoundedCapture(cap if len(data) <= cap else cap - CUT_NOTE_ROOM)
    capture.feed(data)
    captured = capture.result()
    return captured.text + ("\n" + truncation_line(captured) if captured.truncated else ""), captured


def truncation_line(captured: CapturedText) -> str:
    return (
        f"[TRUNCATED: {captured.produced_bytes} bytes produced, {captured.shown_bytes} shown — "
        f"head {captured.head_bytes} + tail {captured.tail_bytes}]"
    )


def result_text(execution: Execution, tier: int, timeout: float | None, notes: list[str]) -> tuple[str, str]:
    """A call's result as the model reads it: its first line, and the whole text (first line, notes, output,
    stderr kept apart, truncation lines)."""
    captured = execution.output
    first = execution.headline or status_line(
        execution.status, execution.exit_code, execution.signal, timeout, execution.error, tier
    )
    body = captured.text
    trailer = [truncation_line(captured)] if captured.truncated else []
    stderr = execution.stderr
    if stderr is not None and stderr.produced_bytes:
        body += ("" if not body or body.endswith("\n") else "\n") + "[stderr]\n" + stderr.text
        if stderr.truncated:
            trailer.append("stderr " + truncation_line(stderr))
    return first, render_text(first, notes, body, trailer)


def render_text(first_line: str, notes: list[str], body: str, trailer: list[str]) -> str:
    lines = [first_line]
    lines.extend(f"[NOTE: {note}]" for note in notes)
    text = "\n".join(lines)
    if body:
        text += "\n" + body
    if trailer:
        text += ("" if text.endswith("\n") else "\n") + "\n".join(trailer)
    return text


NO_DEFAULTS: dict[str, Any] = {}


def schema_defaults(output_schema: dict[str, Any] | None) -> dict[str, Any]:
    """What a tool's outputSchema declares as each field's default."""
    # The values (an empty list among them) are shared by every result of the tool: results are only
    # serialized, never changed in place.
    properties = (output_schema or {}).get("properties", {})
    return {name: field["default"] for name, field in properties.items() if "default" in field}


def structured_content(
    defaults: dict[str, Any],
    outcome: Outcome,
    tier: int,
    execution: Execution,
    duration_ms: int,
    notes: list[str],
    error: str | None,
) -> dict[str, Any]:
    """Every field of the tool's outputSchema, always (the contract: a client reads `result["timed_out"]`
    without a fallback): its declared default unless this call has a value for it."""
    captured = execution.output
    return {
        **defaults,
        "status": outcome,
        "tier": tier,
        "exit_code": execution.exit_code,
        "signal": execution.signal,
        "timed_out": outcome == "timeout",
        "truncated": captured.truncated,
        "output": captured.text,
        "output_bytes": captured.produced_bytes,
        "output_sha256": captured.sha256,
        "duration_ms": duration_ms,
        "notes": list(notes),
        "error": error,
        **execution.fields,
    }
