"""[runbooks]: the team's runbooks (adr/0017) and the briefing gate (RELAY_SHELL_RUNBOOK_*, RELAY_SHELL_GATE)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from relay_shell.settings.values import Area, empty_is_none


class RunbookSettings(Area):
    runbook_dir: Path | None = Field(
        None, description="empty (off) or a directory of Markdown runbooks with YAML front matter (*.md, recursive)"
    )
    runbook_max_files: int = Field(
        2000, ge=1, le=10000, description="runbook files loaded at most (the rest are reported), 1 to 10000"
    )
    runbook_max_bytes: int = Field(
        256 * 1024, ge=1024, le=16 * 1024 * 1024, description="bytes one runbook file may have, 1024 to 16777216"
    )
    gate: Literal["off", "briefing"] = Field(
        "off",
        description="off or briefing (per MCP session, a call that would run anything first returns the runbooks "
        "that apply, until begin_session)",
    )

    _empty_is_off = field_validator("runbook_dir", mode="before")(empty_is_none)

    @field_validator("runbook_dir")
    @classmethod
    def _runbook_dir_is_a_directory(cls, raw: Path | None) -> Path | None:
        if raw is not None and not raw.expanduser().is_dir():
            raise ValueError("is not a directory")
        return raw.expanduser().resolve() if raw is not None else None
