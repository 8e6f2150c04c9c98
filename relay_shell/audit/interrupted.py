"""What the previous server process left unfinished: the calls whose start record has no end record.

At start-up, before it serves, the server reads its log backwards from the end to the previous process's own
`server:start` record (or the top of the file, at most MAX_SCAN_BYTES) and lists every `start` record no `end`
record follows — of that process only, when its record names its `call_tag` (the prefix of its call ids). The
runner writes them into this process's `server:start` record (adr/0014), so the log itself says which calls
the previous process was running when it died.

The record also says what containment found of the previous process's units (`leftover_processes`: the
processes still carrying their marker and whether they were ended); this module only reads the log.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_shell.audit.log import parse_line

SERVER_START_TOOL = "server:start"
# Bounded work at start-up whatever the log size (parsing costs ~2-4 µs a record: 16 MiB, ~30,000 records, is
# ~0.1 s); a previous run longer than this is scanned in its last part and the record says so (`complete`).
MAX_SCAN_BYTES = 16 * 1024 * 1024
MAX_LISTED = 1000  # interrupted calls named one by one in the record; the count is always complete

_PHASE = b'"phase":"'
_SERVER_START = b'"tool":"' + SERVER_START_TOOL.encode() + b'"'


@dataclass(frozen=True)
class InterruptedCall:
    call_id: str
    tool: str
    ts: str
    client_id: str | None

    def record(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "ts": self.ts, "client_id": self.client_id}


@dataclass(frozen=True)
class PreviousRun:
    interrupted: list[InterruptedCall]  # oldest first
    scanned_bytes: int
    complete: bool  # False: the scan stopped at MAX_SCAN_BYTES before the previous process's start record


def find_interrupted(path: Path) -> PreviousRun:
    """The calls the previous process started and did not end, from the log at `path` (missing: none)."""
    ended: set[str] = set()
    interrupted: list[InterruptedCall] = []
    scanned = 0
    for raw, scanned in _lines_backwards(path):
        if _SERVER_START in raw and (started := parse_line(raw)).get("tool") == SERVER_START_TOOL:
            interrupted.reverse()
            tag = started.get("call_tag")
            if isinstance(tag, str):
                # Only that process's calls: another server writing the same log (against the one-server-per-log
                # rule) may have calls in flight, which were not interrupted.
                interrupted = [call for call in interrupted if call.call_id.startswith(f"{tag}-")]
            return PreviousRun(interrupted, scanned, True)
        if _PHASE not in raw:
            continue
        record = parse_line(raw)  # the key literal can also sit in nested arguments: the parsed record decides
        phase = record.get("phase")
        call_id = str(record.get("call_id"))
        if phase == "end":
            ended.add(call_id)
        elif phase == "start" and call_id not in ended:
            interrupted.append(
                InterruptedCall(call_id, str(record.get("tool")), str(record.get("ts")), record.get("client_id"))
            )
    interrupted.reverse()
    return PreviousRun(interrupted, scanned, scanned < MAX_SCAN_BYTES)


def restart_fields(previous: PreviousRun, leftovers: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields of the `server:start` record for what the previous process left behind; `leftovers` is what
    containment found still running of its units (containment/leftovers.py: `Leftover.record()`)."""
    return {
        "interrupted": [call.record() for call in previous.interrupted[-MAX_LISTED:]],
        "interrupted_count": len(previous.interrupted),
        "scan": {"bytes": previous.scanned_bytes, "complete": previous.complete},
        "leftover_processes": list(leftovers),
    }


def _lines_backwards(path: Path) -> Iterator[tuple[bytes, int]]:
    """Yield (line, bytes scanned so far) from the last complete line to the first, within MAX_SCAN_BYTES."""
    try:
        handle = open(path, "rb")
    except OSError:  # no log yet, or none that can be read: nothing is known of a previous process
        return
    with handle:
        position = handle.seek(0, os.SEEK_END)
        scanned = 0
        carry = b""
        while position > 0 and scanned < MAX_SCAN_BYTES:
            step = min(1 << 20, position)
            position -= step
            scanned += step
            handle.seek(position)
            parts = (handle.read(step) + carry).split(b"\n")
            # The first part may be the end of a line that starts in an earlier block.
            carry = parts[0] if position > 0 else b""
            for raw in reversed(parts[1:] if position > 0 else parts):
                if raw:
                    yield raw, scanned
