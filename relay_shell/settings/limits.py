"""[limits]: how far one call may go: output bytes, seconds, the kill grace, calls at once, and the containment
that holds each call's processes (RELAY_SHELL_MAX_OUTPUT, _MAX_TIMEOUT, _KILL_GRACE, _CONTAINMENT, ...)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from relay_shell.settings.values import Area


class LimitSettings(Area):
    max_output: int = Field(65536, ge=1024, le=64 * 1024 * 1024, description="bytes, 1024 to MAX_OUTPUT_HARD")
    max_output_hard: int = Field(1024 * 1024, ge=1024, le=64 * 1024 * 1024, description="bytes, 1024 to 67108864")
    max_timeout: float = Field(3600.0, ge=1.0, le=86400.0, description="seconds, 1 to 86400")
    kill_grace: float = Field(2.0, ge=0.1, le=60.0, description="seconds between SIGTERM and SIGKILL, 0.1 to 60")
    containment: Literal["auto", "cgroup", "subreaper", "off"] = Field(
        "auto",
        description="auto (a cgroup v2 per call and session where the server may manage one, else subreaper), "
        "cgroup (required: startup fails without one), subreaper (child subreaper + RELAY_SHELL_UNIT marker) or "
        "off (process groups only: a process that leaves its group escapes)",
    )
    max_concurrent_calls: int = Field(
        64, ge=1, le=10000, description="tool calls running at once; beyond it a call is refused as Busy, 1 to 10000"
    )

    @model_validator(mode="after")
    def _output_within_hard_cap(self) -> LimitSettings:
        if self.max_output > self.max_output_hard:
            raise ValueError(
                f"RELAY_SHELL_MAX_OUTPUT={self.max_output}: must not exceed "
                f"RELAY_SHELL_MAX_OUTPUT_HARD={self.max_output_hard}"
            )
        return self
