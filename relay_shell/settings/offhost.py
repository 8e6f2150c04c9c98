"""[offhost]: what takes the audit log off the host: shipping to syslog (RFC 5424 over tcp/tls/udp/unix) and to
journald, and signed checkpoints (RELAY_SHELL_AUDIT_SYSLOG*, _AUDIT_JOURNALD, _AUDIT_SIGNING_KEY,
_AUDIT_CHECKPOINT_INTERVAL), held parsed: a SyslogTarget, a CheckpointInterval."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_serializer, field_validator, model_validator

from relay_shell.settings.values import SECRET, Area, empty_is_none, existing_file, text

JOURNALD_SOCKET = "/run/systemd/journal/socket"


@dataclass(frozen=True)
class SyslogTarget:
    """Where records are shipped: scheme tcp, tls, udp or unix (AUDIT_SYSLOG), or journald (AUDIT_JOURNALD); `path`
    for unix and journald, `host` and `port` otherwise."""

    scheme: str
    host: str = ""
    port: int = 0
    path: str = ""

    def url(self) -> str:
        if self.scheme in ("unix", "journald"):
            return f"{self.scheme}:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def syslog_target(raw: str) -> SyslogTarget:
    """Parse AUDIT_SYSLOG: tcp://HOST:PORT, tls://HOST:PORT, udp://HOST:PORT or unix:PATH (absolute)."""
    if raw.startswith("unix:"):
        path = raw.removeprefix("unix:").removeprefix("//")
        if not path.startswith("/"):
            raise ValueError("unix: needs an absolute socket path, e.g. unix:/dev/log")
        return SyslogTarget("unix", path=path)
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme not in ("tcp", "tls", "udp"):
        raise ValueError("must start with tcp://, tls://, udp:// or unix:")
    host, sep, port_text = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{scheme}:// needs HOST:PORT with a port from 1 to 65535 (and nothing after it)")
    if not re.fullmatch(r"[A-Za-z0-9.:_-]{1,253}", host):
        raise ValueError(f"{host!r} is not a host name or IP address")
    return SyslogTarget(scheme, host=host, port=int(port_text))


def journald_socket(raw: str) -> str | None:
    """AUDIT_JOURNALD: None for off, journald's socket path for on or a path."""
    if raw == "off":
        return None
    if raw == "on":
        return JOURNALD_SOCKET
    if not raw.startswith("/"):
        raise ValueError("must be off, on or the absolute path of a journald native socket")
    return raw


@dataclass(frozen=True)
class CheckpointInterval:
    records: int | None  # a checkpoint after this many records, or None
    seconds: float | None  # a checkpoint after this much time (when records were written since), or None

    def text(self) -> str:
        """As the setting is written: `1000,5m`."""
        parts = [] if self.records is None else [str(self.records)]
        if self.seconds is not None:
            seconds = int(self.seconds)
            for unit, size in (("h", 3600), ("m", 60)):
                if seconds % size == 0:
                    parts.append(f"{seconds // size}{unit}")
                    break
            else:
                parts.append(f"{seconds}s")
        return ",".join(parts)


_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def checkpoint_interval(raw: str) -> CheckpointInterval:
    """`1000` (records), `60s` / `5m` / `1h` (time), or one of each separated by a comma."""
    records: int | None = None
    seconds: float | None = None
    parts = [part.strip() for part in raw.split(",")]
    if not 1 <= len(parts) <= 2:
        raise ValueError("give a record count, a time, or one of each separated by a comma")
    for part in parts:
        if part.isdigit():
            if records is not None or not 1 <= int(part) <= 10_000_000:
                raise ValueError(f"{part!r}: a record count is given once, 1 to 10000000")
            records = int(part)
            continue
        found = re.fullmatch(r"([0-9]{1,6})([smh])", part)
        if found is None:
            raise ValueError(f"{part!r} is neither a record count (1000) nor a time (60s, 5m, 1h)")
        value = int(found.group(1)) * _UNIT_SECONDS[found.group(2)]
        if seconds is not None or not 1 <= value <= 86400:
            raise ValueError(f"{part!r}: a time is given once, 1s to 24h")
        seconds = float(value)
    return CheckpointInterval(records, seconds)


class OffHostSettings(Area):
    audit_syslog: SyslogTarget | None = Field(
        None,
        description="empty (off) or where to ship every audit record as RFC 5424 syslog: tcp://HOST:PORT, "
        "tls://HOST:PORT (RFC 5425), udp://HOST:PORT (lossy) or unix:PATH (a datagram socket such as /dev/log)",
    )
    audit_syslog_ca: Path | None = Field(
        None, description="empty (the system's CA certificates) or a PEM file of the CAs a tls:// collector may use"
    )
    audit_syslog_cert: Path | None = Field(
        None,
        description="empty or a PEM client certificate (chain) relay-shell shows a tls:// collector that asks for "
        "one (mutual TLS); needs AUDIT_SYSLOG_KEY",
    )
    audit_syslog_key: Path | None = Field(
        None,
        description="empty or the unencrypted PEM private key of AUDIT_SYSLOG_CERT (readable by the owner only)",
        json_schema_extra=SECRET,
    )
    audit_journald: SyslogTarget | None = Field(
        None,
        description="off, on (every audit record to journald's native socket /run/systemd/journal/socket, its "
        "fields as journal fields) or the absolute path of a journald native socket",
    )
    audit_signing_key: Path | None = Field(
        None,
        description="empty (no checkpoints) or an Ed25519 private key file (relay-shell audit keygen PATH)",
        json_schema_extra=SECRET,
    )
    audit_checkpoint_interval: CheckpointInterval = Field(
        CheckpointInterval(1000, 300.0),
        description="when a signed checkpoint is written: a record count (1 to 10000000), a time (60s, 5m, 1h; 1s "
        "to 24h) or both separated by a comma (whichever comes first), e.g. 1000,5m",
    )

    @field_validator("audit_syslog", mode="before")
    @classmethod
    def _syslog_target(cls, raw: object) -> object:
        if raw is None or isinstance(raw, SyslogTarget):
            return raw
        return syslog_target(text(raw)) if text(raw) else None

    @field_validator("audit_journald", mode="before")
    @classmethod
    def _journald_target(cls, raw: object) -> object:
        if raw is None or isinstance(raw, SyslogTarget):
            return raw
        path = journald_socket(text(raw))
        if path is None:
            return None
        if not Path(path).exists():
            raise ValueError(f"no journald socket at {path} (is systemd-journald running on this host?)")
        return SyslogTarget("journald", path=path)

    @field_validator("audit_checkpoint_interval", mode="before")
    @classmethod
    def _interval(cls, raw: object) -> object:
        return raw if isinstance(raw, CheckpointInterval) else checkpoint_interval(text(raw))

    _empty_is_off = field_validator(
        "audit_syslog_ca", "audit_syslog_cert", "audit_syslog_key", "audit_signing_key", mode="before"
    )(empty_is_none)
    _readable = field_validator("audit_syslog_ca", "audit_syslog_cert", "audit_syslog_key", "audit_signing_key")(
        existing_file
    )

    @field_serializer("audit_syslog")
    def _syslog_text(self, target: SyslogTarget | None) -> str:
        return target.url() if target is not None else ""

    @field_serializer("audit_journald")
    def _journald_text(self, target: SyslogTarget | None) -> str:
        if target is None:
            return "off"
        return "on" if target.path == JOURNALD_SOCKET else target.path

    @field_serializer("audit_checkpoint_interval")
    def _interval_text(self, interval: CheckpointInterval) -> str:
        return interval.text()

    @model_validator(mode="after")
    def _tls_files_need_tls(self) -> OffHostSettings:
        # A CA or client certificate set for a target that does not use TLS would be silently ignored.
        files = {"AUDIT_SYSLOG_CA": self.audit_syslog_ca, "AUDIT_SYSLOG_CERT": self.audit_syslog_cert}
        files["AUDIT_SYSLOG_KEY"] = self.audit_syslog_key
        named = [name for name, value in files.items() if value is not None]
        if named and (self.audit_syslog is None or self.audit_syslog.scheme != "tls"):
            shown = self.audit_syslog.url() if self.audit_syslog is not None else "empty"
            raise ValueError(
                f"RELAY_SHELL_{named[0]} is set but RELAY_SHELL_AUDIT_SYSLOG is {shown!r}: "
                "the CA and client certificate settings are for a tls:// target only; unset them or use tls://"
            )
        if (self.audit_syslog_cert is None) != (self.audit_syslog_key is None):
            missing = "AUDIT_SYSLOG_KEY" if self.audit_syslog_key is None else "AUDIT_SYSLOG_CERT"
            raise ValueError(f"RELAY_SHELL_{missing} is empty: a client certificate needs both CERT and KEY")
        return self

    def ships(self) -> bool:
        """Anything off-host on: shipping to syslog or journald, or signed checkpoints."""
        return self.audit_syslog is not None or self.audit_journald is not None or self.audit_signing_key is not None
