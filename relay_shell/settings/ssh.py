"""[ssh]: the fleet: the OpenSSH config and inventory, host keys, the connection pool, port forwards, transfers
and fan-out (RELAY_SHELL_SSH_*, _INVENTORY, _MAX_FORWARDS, _FORWARD_IDLE_TIMEOUT, _MAX_TRANSFER_BYTES, _FANOUT_*)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from relay_shell.settings.values import Area, empty_is_none


class SshSettings(Area):
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

    _empty_is_off = field_validator("ssh_config", "inventory", mode="before")(empty_is_none)
