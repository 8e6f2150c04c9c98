"""[audit]: the local audit log (RELAY_SHELL_AUDIT_PATH, _CHAIN, _FSYNC, _ON_FAILURE)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from relay_shell.settings.values import Area


def default_audit_path() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "relay-shell" / "audit.jsonl"


class AuditSettings(Area):
    audit_path: Path = Field(default_factory=default_audit_path, description="path of the JSON Lines audit log")
    audit_chain: bool = Field(True, description="true or false")
    audit_fsync: Literal["off", "always"] = Field("off", description="off or always")
    audit_on_failure: Literal["refuse", "continue"] = Field("refuse", description="refuse or continue")
