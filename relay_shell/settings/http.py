"""[http]: which transport serves, and the HTTP listener (RELAY_SHELL_TRANSPORT, RELAY_SHELL_HTTP_*)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from relay_shell.settings.values import Area, comma_list


class HttpSettings(Area):
    transport: Literal["stdio", "http"] = Field("stdio", description="stdio or http (streamable HTTP at /mcp)")
    http_host: str = Field("127.0.0.1", description="address the HTTP transport binds; non-loopback needs TOKEN_FILE")
    http_port: int = Field(8765, ge=0, le=65535, description="port of the HTTP transport, 0 to 65535 (0 picks one)")
    http_allowed_hosts: tuple[str, ...] = Field(
        (), description="comma-separated extra Host header values accepted (host:port, * for any port)"
    )
    http_allowed_origins: tuple[str, ...] = Field((), description="comma-separated extra Origin values accepted")

    _lists = field_validator("http_allowed_hosts", "http_allowed_origins", mode="before")(comma_list)
