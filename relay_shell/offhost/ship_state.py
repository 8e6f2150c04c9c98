"""The shipping state file: the last confirmed position, saved beside the log (adr/0020).

`.audit.jsonl.ship-state.json` for syslog, `.audit.jsonl.journald-state.json` for journald: hidden, and no name a
rotation glob (`audit.jsonl*`) takes. Written atomically and fsynced, so a crash leaves the old state or the new;
a state saved for another collector is not used (that one gets the current file from its start).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path

import orjson

from relay_shell.offhost.positions import Position


class StateFileError(ValueError):
    """A state file that cannot be read; the message says why."""


def state_path_for(audit_path: Path, target_label: str = "syslog") -> Path:
    """`.audit.jsonl.ship-state.json` beside the log (`.audit.jsonl.journald-state.json` for journald): hidden, and
    no name a rotation glob (`audit.jsonl*`) takes."""
    kind = "ship" if target_label == "syslog" else target_label
    return audit_path.with_name(f".{audit_path.name}.{kind}-state.json")


def read_state(state_path: Path, target_url: str) -> Position | None:
    """The confirmed position saved for `target_url`; None when there is none (or it was another collector's).
    Raises StateFileError for a file that cannot be read."""
    try:
        state = orjson.loads(state_path.read_bytes())
        if state.get("target") != target_url:
            return None  # another collector: it gets the current file from its start
        return Position(
            int(state["dev"]), int(state["ino"]), int(state["offset"]), int(state["seq"]), str(state["chain"])
        )
    except FileNotFoundError:
        return None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StateFileError(str(exc)) from None


def write_state(state_path: Path, target_url: str, position: Position) -> None:
    """Save the position atomically; raises OSError."""
    state = {"version": 1, "target": target_url, **asdict(position), "saved": time.time()}
    temporary = state_path.with_name(state_path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(orjson.dumps(state))
        handle.flush()
        os.fsync(handle.fileno())  # on disk before the rename: a crash leaves the old state or the new
    os.replace(temporary, state_path)
