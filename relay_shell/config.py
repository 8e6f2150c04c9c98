"""Settings from RELAY_SHELL_* environment variables, with ranges, and the clamps applied to tool arguments.

Every setting has a default and an allowed range. An invalid value stops startup with exit code 2 and one
line naming the variable, the bad value and what is allowed (see `load_settings`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "RELAY_SHELL_"


def default_audit_path() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "relay-shell" / "audit.jsonl"


def compile_exec_deny(patterns: list[str]) -> list[Any]:
    """RELAY_SHELL_EXEC_DENY's patterns in RE2, not `re`: the text is a traced program's argv, matched while its
    exec waits, so matching must take linear time whatever the pattern (adr/0019). ValueError naming the setting
    for a pattern RE2 does not accept (backreferences, lookaround)."""
    if not patterns:
        return []
    import re2  # ~3 ms: only when there are patterns

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, once
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re2.compile(pattern, options))
        except re2.error as exc:
            problem = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise ValueError(
                f"RELAY_SHELL_EXEC_DENY: pattern {pattern!r} is not valid RE2 syntax ({problem}); allowed: RE2 "
                "regexes (no backreferences, no lookaround), as a JSON array or one per line"
            ) from None
    return compiled


def parse_patterns(raw: str) -> list[str]:
    """Policy patterns: a JSON array of regexes, or one regex per line. Blank lines are ignored."""
    text = raw.strip()
    if not text:
        return []
    if text.startswith("["):
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError("must be a JSON array of regex strings")
        return value
    return [line.strip() for line in text.splitlines() if line.strip()]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_default=True)

    transport: Literal["stdio", "http"] = Field("stdio", description="stdio or http (streamable HTTP at /mcp)")
    http_host: str = Field("127.0.0.1", description="address the HTTP transport binds; non-loopback needs TOKEN_FILE")
    http_port: int = Field(8765, ge=0, le=65535, description="port of the HTTP transport, 0 to 65535 (0 picks one)")
    http_allowed_hosts: str = Field(
        "", description="comma-separated extra Host header values accepted (host:port, * for any port)"
    )
    http_allowed_origins: str = Field("", description="comma-separated extra Origin values accepted")
    token_file: Path | None = Field(
        None,
        description="empty (no authentication) or a file of `NAME SHA256-OF-TOKEN` lines, not group/world readable",
    )
    metrics_token_name: str = Field(
        "", description="empty (any client token may read /metrics) or the token NAME that alone may read it"
    )
    oauth_state_dir: Path | None = Field(
        None,
        description="empty (no OAuth) or a directory (0700) where the OAuth 2.1 authorization server keeps its "
        "clients and hashed tokens; needs TOKEN_FILE (an operator token approves each client)",
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
    audit_path: Path = Field(default_factory=default_audit_path, description="path of the JSON Lines audit log")
    audit_chain: bool = Field(True, description="true or false")
    audit_fsync: Literal["off", "always"] = Field("off", description="off or always")
    audit_on_failure: Literal["refuse", "continue"] = Field("refuse", description="refuse or continue")
    policy_mode: Literal["open", "guarded", "readonly"] = Field("open", description="open, guarded or readonly")
    policy_deny: str = Field("", description="a JSON array of regexes, or one regex per line")
    policy_allow: str = Field("", description="a JSON array of regexes, or one regex per line")
    confirm_tier3: Literal["off", "token", "elicit"] = Field(
        "off",
        description="off, token (a tier-3 call needs operation_confirm(token), then the identical call) or elicit "
        "(ask the human through MCP elicitation; token for clients without it)",
    )
    confirm_ttl: float = Field(
        300.0,
        ge=1.0,
        le=3600.0,
        description="seconds a tier-3 confirmation stays valid (token issue to use; the human's time to answer an "
        "elicitation), 1 to 3600",
    )
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
    secret_env_allow: str = Field(
        "",
        description="comma-separated names (or shell patterns like DB_*) of server environment variables that "
        "session_send(secret_env=...) may type; empty: none",
    )
    record_dir: Path | None = Field(None, description="empty (off) or a directory for asciicast session transcripts")
    record_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024 * 1024, le=64 * 1024**3, description="bytes per transcript, 1048576 to 68719476736"
    )
    ssh_config: Path | None = Field(
        default_factory=lambda: Path.home() / ".ssh" / "config",
        description="path of the OpenSSH client config (default ~/.ssh/config); empty to ignore it",
    )
    inventory: Path | None = Field(
        None, description="empty (none) or the path of a JSON/YAML inventory or an Ansible inventory (YAML or INI)"
    )
    ssh_known_hosts: Literal["strict", "accept-new", "ignore"] = Field(
        "accept-new", description="default host-key mode: strict, accept-new or ignore"
    )
    ssh_connect_timeout: float = Field(10.0, ge=0.5, le=300.0, description="seconds to connect and log in, 0.5 to 300")
    ssh_max_connections: int = Field(256, ge=1, le=4096, description="pooled SSH connections at most, 1 to 4096")
    ssh_max_channels: int = Field(
        10, ge=1, le=1000, description="channels per SSH connection (sshd MaxSessions, default 10), 1 to 1000"
    )
    ssh_idle_timeout: float = Field(
        300.0, ge=1.0, le=86400.0, description="seconds an unused SSH connection stays open, 1 to 86400"
    )
    ssh_keepalive: float = Field(30.0, ge=1.0, le=3600.0, description="seconds between SSH keepalives, 1 to 3600")
    max_forwards: int = Field(
        32,
        ge=1,
        le=1024,
        description="SSH port forwards open at once (ssh_forward), all clients together (one client at most half, "
        "at least 1), 1 to 1024",
    )
    forward_idle_timeout: float = Field(
        3600.0,
        ge=1.0,
        le=604800.0,
        description="seconds a port forward may carry no connection before it is closed, 1 to 604800",
    )
    max_transfer_bytes: int = Field(
        4 * 1024**3,
        ge=1024,
        le=2**50,
        description="bytes one ssh_upload/ssh_download may move (all files together), 1024 to 1125899906842624",
    )
    fanout_max_hosts: int = Field(256, ge=1, le=10000, description="hosts per ssh_fanout/ssh_check call, 1 to 10000")
    fanout_max_concurrency: int = Field(
        64, ge=1, le=1024, description="largest `concurrency` an ssh_fanout may ask for, 1 to 1024"
    )
    metrics_addr: str = Field("", description="empty (off) or a loopback HOST:PORT such as 127.0.0.1:9464")
    runbook_dir: Path | None = Field(
        None, description="empty (off) or a directory of Markdown runbooks with YAML front matter (*.md, recursive)"
    )
    runbook_max_files: int = Field(
        2000, ge=1, le=10000, description="runbook files loaded at most (the rest are reported), 1 to 10000"
    )
    runbook_max_bytes: int = Field(
        256 * 1024, ge=1024, le=16 * 1024 * 1024, description="bytes one runbook file may have, 1024 to 16777216"
    )
    audit_syslog: str = Field(
        "",
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
        None, description="empty or the unencrypted PEM private key of AUDIT_SYSLOG_CERT (readable by the owner only)"
    )
    audit_journald: str = Field(
        "off",
        description="off, on (every audit record to journald's native socket /run/systemd/journal/socket, its "
        "fields as journal fields) or the absolute path of a journald native socket",
    )
    audit_signing_key: Path | None = Field(
        None, description="empty (no checkpoints) or an Ed25519 private key file (relay-shell audit keygen PATH)"
    )
    audit_checkpoint_interval: str = Field(
        "1000,5m",
        description="when a signed checkpoint is written: a record count (1 to 10000000), a time (60s, 5m, 1h; 1s "
        "to 24h) or both separated by a comma (whichever comes first), e.g. 1000,5m",
    )
    gate: Literal["off", "briefing"] = Field(
        "off",
        description="off or briefing (per MCP session, a call that would run anything first returns the runbooks "
        "that apply, until begin_session)",
    )
    exec_trace: Literal["on", "off"] = Field(
        "off",
        description="on (every execve of the trees calls and local sessions start goes into their audit records, "
        "where the kernel allows it) or off (the default: it costs ~0.6 ms per call, adr/0019)",
    )
    exec_deny: str = Field(
        "",
        description="a JSON array of RE2 regexes (no backreferences, no lookaround), or one per line, over "
        "`path argv...` of each exec: a match is EPERM",
    )
    exec_trace_entries: int = Field(
        64, ge=0, le=1024, description="exec entries one audit record keeps (the count and digest cover all), 0 to 1024"
    )

    @field_validator("policy_deny", "policy_allow")
    @classmethod
    def _patterns_compile(cls, raw: str) -> str:
        for pattern in parse_patterns(raw):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a valid regex ({exc})") from exc
        return raw

    @field_validator("exec_deny")
    @classmethod
    def _exec_deny_compiles_in_re2(cls, raw: str) -> str:
        compile_exec_deny(parse_patterns(raw))
        return raw

    @field_validator(
        "record_dir", "inventory", "ssh_config", "token_file", "oauth_state_dir", "runbook_dir", mode="before"
    )
    @classmethod
    def _empty_record_dir_is_off(cls, raw: object) -> object:
        return None if raw == "" else raw

    @field_validator("runbook_dir")
    @classmethod
    def _runbook_dir_is_a_directory(cls, raw: Path | None) -> Path | None:
        if raw is not None and not raw.expanduser().is_dir():
            raise ValueError("is not a directory")
        return raw.expanduser().resolve() if raw is not None else None

    @field_validator("audit_syslog")
    @classmethod
    def _syslog_target_valid(cls, raw: str) -> str:
        if raw:
            syslog_target(raw)
        return raw

    @field_validator("audit_syslog_ca", "audit_syslog_cert", "audit_syslog_key", "audit_signing_key", mode="before")
    @classmethod
    def _empty_file_is_off(cls, raw: object) -> object:
        return None if raw == "" else raw

    @field_validator("audit_syslog_ca", "audit_syslog_cert", "audit_syslog_key", "audit_signing_key")
    @classmethod
    def _file_readable(cls, raw: Path | None) -> Path | None:
        if raw is not None and not raw.expanduser().is_file():
            raise ValueError("is not a file")
        return raw.expanduser() if raw is not None else None

    @field_validator("audit_journald")
    @classmethod
    def _journald_socket(cls, raw: str) -> str:
        path = journald_socket(raw)
        if path is not None and not Path(path).exists():
            raise ValueError(f"no journald socket at {path} (is systemd-journald running on this host?)")
        return raw

    @field_validator("audit_checkpoint_interval")
    @classmethod
    def _interval_valid(cls, raw: str) -> str:
        checkpoint_interval(raw)
        return raw

    @field_validator("metrics_addr")
    @classmethod
    def _metrics_addr_loopback(cls, raw: str) -> str:
        if raw:
            metrics_host_port(raw)
        return raw

    @model_validator(mode="after")
    def _output_within_hard_cap(self) -> Settings:
        if self.max_output > self.max_output_hard:
            raise ValueError(
                f"RELAY_SHELL_MAX_OUTPUT={self.max_output}: must not exceed "
                f"RELAY_SHELL_MAX_OUTPUT_HARD={self.max_output_hard}"
            )
        return self

    @model_validator(mode="after")
    def _tls_files_need_tls(self) -> Settings:
        # A CA or client certificate set for a target that does not use TLS would be silently ignored.
        files = {"AUDIT_SYSLOG_CA": self.audit_syslog_ca, "AUDIT_SYSLOG_CERT": self.audit_syslog_cert}
        files["AUDIT_SYSLOG_KEY"] = self.audit_syslog_key
        named = [name for name, value in files.items() if value is not None]
        if named and not self.audit_syslog.startswith("tls://"):
            raise ValueError(
                f"RELAY_SHELL_{named[0]} is set but RELAY_SHELL_AUDIT_SYSLOG is {self.audit_syslog or 'empty'!r}: "
                "the CA and client certificate settings are for a tls:// target only; unset them or use tls://"
            )
        if (self.audit_syslog_cert is None) != (self.audit_syslog_key is None):
            missing = "AUDIT_SYSLOG_KEY" if self.audit_syslog_key is None else "AUDIT_SYSLOG_CERT"
            raise ValueError(f"RELAY_SHELL_{missing} is empty: a client certificate needs both CERT and KEY")
        return self

    @model_validator(mode="after")
    def _offhost_needs_chain(self) -> Settings:
        # The receiver drops duplicates by `seq` and the shipper resumes by the chain; a checkpoint signs the head.
        offhost = self.audit_syslog or self.audit_journald != "off" or self.audit_signing_key is not None
        if not self.audit_chain and offhost:
            raise ValueError(
                "RELAY_SHELL_AUDIT_CHAIN=false: AUDIT_SYSLOG, AUDIT_JOURNALD and AUDIT_SIGNING_KEY need the hash "
                "chain (shipping "
                "resumes by seq and chain, a checkpoint signs the chain head); set AUDIT_CHAIN=true"
            )
        return self

    @property
    def deny_patterns(self) -> list[str]:
        return parse_patterns(self.policy_deny)

    @property
    def allow_patterns(self) -> list[str]:
        return parse_patterns(self.policy_allow)


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


JOURNALD_SOCKET = "/run/systemd/journal/socket"


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


@dataclass(frozen=True)
class CheckpointInterval:
    records: int | None  # a checkpoint after this many records, or None
    seconds: float | None  # a checkpoint after this much time (when records were written since), or None


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


class ConfigError(Exception):
    """One line naming the variable, the bad value and what is allowed."""


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        location = error["loc"]
        if not location:
            raise ConfigError(str(error["msg"]).removeprefix("Value error, ")) from None
        field_name = str(location[0])
        variable = ENV_PREFIX + field_name.upper()
        field = Settings.model_fields[field_name]
        bad_value = os.environ.get(variable, "")
        problem = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{variable}={bad_value!r}: {problem}; allowed: {field.description}") from None


# Set by relay-shell itself, not by an operator: the containment marker every command inherits (a relay-shell
# started by a command sees it; containment/proc.py MARKER_VARIABLE).
NOT_SETTINGS = {"RELAY_SHELL_UNIT"}


def unknown_variables() -> list[str]:
    """RELAY_SHELL_* names that no setting reads: usually a typo an operator wants to hear about."""
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | NOT_SETTINGS
    return sorted(name for name in os.environ if name.startswith(ENV_PREFIX) and name not in known)


def clamp(name: str, value: float, low: float, high: float) -> tuple[float, str | None]:
    """Clamp a tool argument into its configured range; the note tells the caller what happened."""
    if value < low:
        return low, f"{name} {_number(value)} raised to {_number(low)} (allowed {_number(low)} to {_number(high)})"
    if value > high:
        return high, f"{name} {_number(value)} lowered to {_number(high)} (allowed {_number(low)} to {_number(high)})"
    return value, None


def _number(value: float) -> str:
    if isinstance(value, int):  # any length: JSON allows integers no float can hold (10**400)
        digits = str(abs(value))
        if len(digits) <= 20:
            return str(value)
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"
