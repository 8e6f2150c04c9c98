"""What takes the audit log off the host, assembled from the settings: the shipper (offhost/shipper.py) and the signed
checkpoints (offhost/checkpoints.py). Started before the server serves, stopped after everything else at shutdown:
the shutdown checkpoint first (it is the last record), then shipping flushes it to the collector."""

from __future__ import annotations

import ssl
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from relay_shell.audit.log import AuditLog
from relay_shell.errors import ConfigError
from relay_shell.metrics import Metrics
from relay_shell.offhost.checkpoints import Checkpointer
from relay_shell.offhost.shipper import Shipper
from relay_shell.offhost.signing_keys import KeyFileError, load_signing_key
from relay_shell.offhost.syslog import tls_context
from relay_shell.settings.model import Settings
from relay_shell.settings.offhost import SyslogTarget


class OffHost:
    def __init__(self, settings: Settings, log: AuditLog) -> None:
        """Raises ConfigError (naming the setting) for a signing key, a CA file or a client certificate that cannot
        be used."""
        self.settings = settings
        self.log = log
        self.key: Ed25519PrivateKey | None = None
        self.checkpointer: Checkpointer | None = None
        self.shipper: Shipper | None = None  # AUDIT_SYSLOG
        self.journal: Shipper | None = None  # AUDIT_JOURNALD
        self._stopped = False
        if settings.offhost.audit_signing_key is not None:
            try:
                self.key = load_signing_key(settings.offhost.audit_signing_key)
            except KeyFileError as exc:
                raise ConfigError(f"RELAY_SHELL_AUDIT_SIGNING_KEY: {exc}") from None
        self.tls = syslog_tls(settings)

    def attach(self, metrics: Metrics) -> None:
        """Make the checkpointer and the shipper, counting into the server's metrics (build_server)."""
        settings = self.settings
        if self.key is not None:
            interval = settings.offhost.audit_checkpoint_interval
            self.checkpointer = Checkpointer(self.log, self.key, interval, metrics)
        if settings.offhost.audit_syslog:
            self.shipper = Shipper(self.log, settings.offhost.audit_syslog, self.tls, metrics)
        journal_path = settings.offhost.audit_journald.path if settings.offhost.audit_journald is not None else None
        if journal_path is not None:
            target = SyslogTarget("journald", path=journal_path)
            self.journal = Shipper(self.log, target, None, metrics, target_label="journald")
        if self.shippers():  # the lag of the target furthest behind, read at scrape time
            metrics.audit_ship_lag_records.set_function(lambda: max(each.lag_records() for each in self.shippers()))
            metrics.audit_ship_lag_seconds.set_function(lambda: max(each.lag_seconds() for each in self.shippers()))

    def shippers(self) -> list[Shipper]:
        return [shipper for shipper in (self.shipper, self.journal) if shipper is not None]

    def start(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.start()
        for shipper in self.shippers():
            shipper.start()

    def stop(self) -> None:
        """The shutdown checkpoint, then the last records to the collector (bounded: a few seconds)."""
        if self._stopped:
            return
        self._stopped = True
        if self.checkpointer is not None:
            self.checkpointer.stop()
        for shipper in self.shippers():
            shipper.stop()

    def describe(self) -> dict[str, Any]:
        """server_info's `audit.shipping` and `audit.checkpoints`."""
        return {
            "shipping": self.shipper.describe() if self.shipper is not None else None,
            "journald": self.journal.describe() if self.journal is not None else None,
            "checkpoints": self.checkpointer.describe() if self.checkpointer is not None else None,
        }

    def startup_note(self) -> str:
        parts = []
        for shipper in self.shippers():
            parts.append(f"shipping to {shipper.target.url()}")
        if self.checkpointer is not None:
            parts.append(f"signed checkpoints (key {self.checkpointer.key_id})")
        return ", ".join(parts) or "off-host off"


def syslog_tls(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of a tls:// target, made once (at start-up and by --check-config) so a CA or client
    certificate file that holds no usable PEM is a configuration error naming its setting, not a shipper that keeps
    failing to connect."""
    if not (settings.offhost.audit_syslog is not None and settings.offhost.audit_syslog.scheme == "tls"):
        return None
    return tls_context(
        settings.offhost.audit_syslog_ca, settings.offhost.audit_syslog_cert, settings.offhost.audit_syslog_key
    )
