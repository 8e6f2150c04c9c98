"""[metrics]: the Prometheus endpoint: the loopback listener of a stdio server, held parsed as (host, port), and
which HTTP client token may read /metrics (RELAY_SHELL_METRICS_ADDR, RELAY_SHELL_METRICS_TOKEN_NAME)."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_serializer, field_validator

from relay_shell.settings.values import Area, text


def metrics_host_port(raw: str) -> tuple[str, int]:
    """Split HOST:PORT and insist on a loopback host: the stdio metrics listener has no authentication."""
    host, sep, port_text = raw.rpartition(":")
    host = host.strip("[]")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError("must be HOST:PORT with a port from 0 to 65535")
    if host == "localhost":
        return "127.0.0.1", int(port_text)
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ValueError("host must be a loopback IP address or localhost") from exc
    if not address.is_loopback:
        raise ValueError("host must be loopback (127.0.0.0/8, ::1): the metrics listener has no authentication")
    return host, int(port_text)


def host_port_text(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class MetricsSettings(Area):
    metrics_addr: tuple[str, int] | None = Field(
        None, description="empty (off) or a loopback HOST:PORT such as 127.0.0.1:9464"
    )
    metrics_token_name: str = Field(
        "", description="empty (any client token may read /metrics) or the token NAME that alone may read it"
    )

    @field_validator("metrics_addr", mode="before")
    @classmethod
    def _loopback_address(cls, raw: object) -> object:
        if raw is None:
            return None
        if isinstance(raw, tuple) and len(raw) == 2:  # parsed already: checked again, never trusted
            raw = host_port_text(str(raw[0]), int(raw[1]))
        return metrics_host_port(text(raw)) if text(raw) else None

    @field_serializer("metrics_addr")
    def _address_text(self, address: tuple[str, int] | None) -> str:
        return host_port_text(*address) if address is not None else ""
