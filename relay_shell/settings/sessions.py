"""[sessions]: persistent PTY sessions: how many, their buffers and lifetimes, the secrets they may type, what a
password prompt looks like, their transcripts (RELAY_SHELL_MAX_SESSIONS, RELAY_SHELL_SESSION_*, _SECRET_ENV_ALLOW,
_PASSPROMPT, _RECORD_*)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_serializer, field_validator

from relay_shell.settings.patterns import Regex, compile_patterns
from relay_shell.settings.values import Area, comma_list, empty_is_none

# What a password prompt looks like by default: sudo's `[Pp]assword` and the prompts of ssh, ssh-keygen, gpg,
# openssl (pass phrase, Verifying), PIN and one-time codes. Written so that RE2 and Python's re read them alike;
# compiled with re here so that a server that never types a password does not load RE2 (~3 ms) to start.
DEFAULT_PASSPROMPT_TEXT = (
    r"(?i)password",
    r"(?i)pass ?phrase",
    r"(?i)passcode",
    r"(?i)\bPIN\b",
    r"(?i)\bverif(y|ying|ication)\b",
    r"(?i)\benter\b.*\bkey\b",
    r"(?i)one-time",
)
DEFAULT_PASSPROMPT: tuple[Regex, ...] = tuple(re.compile(pattern) for pattern in DEFAULT_PASSPROMPT_TEXT)


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
    passprompt: tuple[Regex, ...] = Field(
        DEFAULT_PASSPROMPT,
        description="a JSON array of RE2 regexes, or one per line, searched in the last line of a session's output: "
        "input typed while one matches and the terminal does not echo (a program, not a shell, reading) is "
        "withheld from the audit record; empty: nothing is withheld",
    )
    record_dir: Path | None = Field(None, description="empty (off) or a directory for asciicast session transcripts")
    record_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024 * 1024, le=64 * 1024**3, description="bytes per transcript, 1048576 to 68719476736"
    )

    _list = field_validator("secret_env_allow", mode="before")(comma_list)
    _empty_is_off = field_validator("record_dir", mode="before")(empty_is_none)
    _compiled = field_validator("passprompt", mode="before")(compile_patterns)

    @field_serializer("passprompt")
    def _pattern_texts(self, patterns: tuple[Regex, ...]) -> list[str]:
        return [pattern.pattern for pattern in patterns]
