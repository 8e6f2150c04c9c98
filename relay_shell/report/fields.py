"""What the report reads out of one audit record: its time, the hosts it touched, a one-line summary of its
arguments, the keys that group it with other records, and whether its output was cut."""

from __future__ import annotations

import calendar
import time
from typing import Any

import orjson

SUMMARY_CHARS = 240
# Tools that run on the server's own host; a session's later calls inherit its spawn's host.
LOCAL_TOOLS = frozenset({"shell_exec", "shell_script", "shell_spawn"})
# Calls whose returned text holds the bytes they produced, whole unless cut. End records say `truncated: true` when
# the result was cut (adr/0028); before that they had no such field, so a call that produced more bytes than its
# returned text holds was taken for cut (session reads strip escapes, so not them).
CUT_TOOLS = frozenset({"shell_exec", "shell_script", "ssh_exec"})
# Argument names that say what a call did, in the order the summary prefers them.
SUMMARY_ARGUMENTS = (
    "command",
    "script",
    "data",
    "keys",
    "spec",
    "uri",
    "name",
    "query",
    "remote_path",
    "local_path",
    "hosts",
    "host",
    "forward_id",
    "session_id",
    "confirmation",
)

_epoch_of_day: dict[str, int] = {}


def epoch_ms(ts: object) -> int | None:
    """Milliseconds since the epoch of a record's `ts` (`2026-01-31T12:00:00.123456Z`); None when it is not one.
    Days are converted once and cached; the time of day is arithmetic (this runs for every row)."""
    if not isinstance(ts, str) or len(ts) < 19 or ts[10] != "T" or ts[13] != ":" or ts[16] != ":":
        return None
    day = ts[:10]
    day_seconds = _epoch_of_day.get(day)
    if day_seconds is None:
        try:
            day_seconds = calendar.timegm(time.strptime(day, "%Y-%m-%d"))
        except ValueError:
            return None
        if len(_epoch_of_day) > 100_000:
            _epoch_of_day.clear()
        _epoch_of_day[day] = day_seconds
    clock = ts[11:19]
    fraction = ts[20:23].rstrip("Z") if len(ts) > 20 and ts[19] == "." else ""
    if not (clock[:2].isdigit() and clock[3:5].isdigit() and clock[6:8].isdigit()):
        return None
    seconds = day_seconds + int(clock[:2]) * 3600 + int(clock[3:5]) * 60 + int(clock[6:8])
    return seconds * 1000 + (int(fraction.ljust(3, "0")) if fraction.isdigit() else 0)


def text_of(value: Any) -> str:
    """A value as one line of text; a long string the record kept as head + tail shows its head."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "head" in value and "len" in value:
        return f"{value['head']}… ({value['len']} characters)"
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return " ".join(value)
    return orjson.dumps(value).decode()


def summary(record: dict[str, Any]) -> str:
    """What the call did, in one line: its command, script, typed data, URI …, or its arguments as JSON."""
    arguments = record.get("args")
    text = ""
    if isinstance(arguments, dict):
        for name in SUMMARY_ARGUMENTS:
            if name in arguments and arguments[name] not in (None, "", []):
                text = text_of(arguments[name])
                break
        else:
            text = orjson.dumps(arguments).decode() if arguments else ""
    gated = record.get("gated_tool")
    if isinstance(gated, str):
        text = f"{gated}: {text}"
    if not text:
        text = _event_summary(record)
    if len(text) > SUMMARY_CHARS:
        text = text[: SUMMARY_CHARS - 1] + "…"
    return text.replace("\n", "⏎ ")


def _event_summary(record: dict[str, Any]) -> str:
    """What a record of no call says: a session's end, late execs, a server's start, a forward's end …"""
    tool = record.get("tool")
    if tool == "session:end":
        return f"{record.get('session_id', '')} {record.get('reason', '')}"
    if tool == "server:start":
        policy = record.get("policy") if isinstance(record.get("policy"), dict) else {}
        mode = f", policy {policy.get('mode')}" if policy else ""
        return f"pid {record.get('pid')}, version {record.get('version')}{mode}"
    execs = record.get("execs")
    if isinstance(execs, dict):
        entries = execs.get("entries") if isinstance(execs.get("entries"), list) else []
        first = entries[0].get("argv") if entries and isinstance(entries[0], dict) else None
        return f"{execs.get('count', 0)} exec(s) of call {record.get('call_id')}: {text_of(first) if first else ''}"
    named = [f"{name} {text_of(record[name])}" for name in ("forward_id", "destination", "reason") if name in record]
    return ", ".join(named)


def hosts_of(record: dict[str, Any]) -> list[str]:
    """The hosts a record names in its `target`: one host, or a fan-out's hosts."""
    target = record.get("target")
    if not isinstance(target, dict):
        return []
    listed = target.get("hosts")
    if isinstance(listed, list):
        return [str(entry.get("host")) for entry in listed if isinstance(entry, dict) and entry.get("host")]
    host = target.get("host")
    return [str(host)] if host else []


def session_of(record: dict[str, Any]) -> str | None:
    session_id = record.get("session_id")
    if not session_id and isinstance(record.get("args"), dict):
        session_id = record["args"].get("session_id")
    return session_id if isinstance(session_id, str) and session_id else None


def group_keys(record: dict[str, Any]) -> list[str]:
    """Keys shared by records that belong together: a session's calls and its end (session id), a forward's
    call, refusals and end (forward id), a tier-3 confirmation's steps (its digest), a call's late execs, a job's
    call and the session tools' calls on it (job id), a cut result's call and the reads of its output (output id)."""
    keys = []
    session_id = session_of(record)
    if session_id:
        keys.append(session_id)
    for name in ("job_id", "output_id"):
        value = record.get(name)
        if isinstance(value, str) and value and value not in keys:
            keys.append(value)
    target = record.get("target")
    forward_id = record.get("forward_id") or (target.get("forward_id") if isinstance(target, dict) else None)
    if not forward_id and isinstance(record.get("args"), dict):
        forward_id = record["args"].get("forward_id")
    if isinstance(forward_id, str) and forward_id:
        keys.append(forward_id)
    confirmation = record.get("confirmation")
    if isinstance(confirmation, str) and confirmation:
        keys.append("confirm:" + confirmation)
    if record.get("tool") == "exec:late" and isinstance(record.get("call_id"), str):
        keys.append(record["call_id"])
    return keys


def output_cut(record: dict[str, Any]) -> bool:
    if record.get("truncated") is True or record.get("stderr_truncated") is True:
        return True
    raw_len, output_len = record.get("raw_len"), record.get("output_len")
    return (
        record.get("tool") in CUT_TOOLS
        and isinstance(raw_len, int)
        and isinstance(output_len, int)
        and raw_len > output_len
    )


def execs_denied(record: dict[str, Any]) -> int:
    execs = record.get("execs")
    if not isinstance(execs, dict):
        return 0
    denied = execs.get("denied")
    if isinstance(denied, int) and denied > 0:
        return denied
    entries = execs.get("entries")
    if not isinstance(entries, list):
        return 0
    return sum(1 for entry in entries if isinstance(entry, dict) and entry.get("denied"))
