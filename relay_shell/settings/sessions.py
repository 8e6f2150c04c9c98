"""[sessions]: persistent PTY sessions: how many, their buffers and lifetimes, the secrets they may type, their
transcripts (RELAY_SHELL_MAX_SESSIONS, RELAY_SHELL_SESSION_*, _SECRET_ENV_ALLOW, _RECORD_*)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from relay_shell.settings.values import Area, comma_list, empty_is_none


class SessionSettings(Area):
    max_sessions: int = Field(16, ge=1, le=1024, description="PTY sessions open at once, 1 to 1024")
    session_buffer_bytes: int = Field(
        1024 * 1024,
        ge=64 * 1024,
        le=256 * 1024 * 1024,
        description="bytes of output kept per session, 65536 to 268435456",
    )
    session_idle_timeout: float = Field(
        1800.0, ge=1.0, le=604800.0, description="seconds without a call before a session is closed, 1 to 604800"
    )
    session_max_lifetime: float = Field(
        86400.0, ge=1.0, le=2592000.0, description="seconds a session may live at most, 1 to 2592000"
    )
    secret_env_allow: tuple[str, ...] = Field(
        (),
        description="comma-separated names (or shell patterns like DB_*) of server environment variables that "
        "session_send(secret_env=...) may type; empty: none",
    )
    record_dir: Path | None = Field(None, description="empty (off) or a directory for asciicast session transcripts")
    record_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024 * 1024, le=64 * 1024**3, description="bytes per transcript, 1048576 to 68719476736"
    )

    _list = field_validator("secret_env_allow", mode="before")(comma_list)
    _empty_is_off = field_validator("record_dir", mode="before")(empty_is_none)
