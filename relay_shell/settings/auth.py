"""[auth]: who may use the HTTP transport: the token file and the OAuth 2.1 authorization server
(RELAY_SHELL_TOKEN_FILE, RELAY_SHELL_OAUTH_*). Checked against each other at startup by auth/setup.py."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from relay_shell.settings.values import SECRET, Area, empty_is_none


class AuthSettings(Area):
    token_file: Path | None = Field(
        None,
        description="empty (no authentication) or a file of `NAME SHA256-OF-TOKEN` lines, not group/world readable",
        json_schema_extra=SECRET,
    )
    oauth_state_dir: Path | None = Field(
        None,
        description="empty (no OAuth) or a directory (0700) where the OAuth 2.1 authorization server keeps its "
        "clients and hashed tokens; needs TOKEN_FILE (an operator token approves each client)",
        json_schema_extra=SECRET,
    )
    oauth_issuer: str = Field(
        "", description="empty (http://HTTP_HOST:PORT) or the public https:// base URL clients reach the server at"
    )
    oauth_lock_first_client: bool = Field(
        False, description="true: dynamic client registration accepts only the first client, then refuses"
    )
    oauth_access_ttl: int = Field(3600, ge=60, le=86400, description="seconds an access token lives, 60 to 86400")
    oauth_refresh_ttl: int = Field(
        2592000, ge=3600, le=31536000, description="seconds a refresh token lives, 3600 to 31536000"
    )

    _empty_is_off = field_validator("token_file", "oauth_state_dir", mode="before")(empty_is_none)
