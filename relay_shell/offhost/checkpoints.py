"""Signed checkpoints of the hash chain (adr/0020).

Every AUDIT_CHECKPOINT_INTERVAL (a record count, a time, or both: whichever comes first) and at shutdown, an
`audit:checkpoint` record is appended through the log's ordinary chained append:

    {"v":1, "ts":…, "tool":"audit:checkpoint", "reason":"records"|"time"|"shutdown", "head":<chain of the record
     before it>, "records":<records in the chain before it, = its seq>, "key_id":<16 hex>, "signature":<base64>,
     "seq":…, "prev":…, "chain":…}

The Ed25519 signature covers SIGNED_PREFIX + the sorted-key JSON of {head, key_id, records, seq, ts}. `head` is
the record's own `prev`, so the chain passes through the checkpoint; a shipped checkpoint pins the chain head off
the host, signed. A checkpoint that cannot be signed or written is counted (relay_shell_audit_checkpoint_failures
_total), shown by server_info and printed; the records it would have covered are all in the log, and the next
checkpoint covers them.
"""

from __future__ import annotations

import base64
import binascii
import sys
import threading
import time
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from relay_shell.audit.log import RECORD_VERSION, AuditLog, utc_timestamp
from relay_shell.metrics import Metrics
from relay_shell.offhost.signing_keys import b64, key_id
from relay_shell.settings.offhost import CheckpointInterval

CHECKPOINT_TOOL = "audit:checkpoint"
SIGNED_PREFIX = b"relay-shell audit checkpoint v1\n"


def signed_bytes(head: str, seq: int, records: int, ts: str, signer_id: str) -> bytes:
    fields = {"head": head, "key_id": signer_id, "records": records, "seq": seq, "ts": ts}
    return SIGNED_PREFIX + orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def checkpoint_record(key: Ed25519PrivateKey, signer_id: str, reason: str, seq: int, prev: str) -> dict[str, Any]:
    ts = utc_timestamp()
    signature = key.sign(signed_bytes(prev, seq, seq, ts, signer_id))
    return {
        "v": RECORD_VERSION,
        "ts": ts,
        "tool": CHECKPOINT_TOOL,
        "reason": reason,
        "head": prev,
        "records": seq,
        "key_id": signer_id,
        "signature": b64(signature),
    }


def check_checkpoint(record: dict[str, Any], public_key: Ed25519PublicKey) -> str | None:
    """Why a checkpoint record does not verify, or None. The chain itself (prev, seq) is verify's job."""
    head, seq, records, ts = record.get("head"), record.get("seq"), record.get("records"), record.get("ts")
    signer_id, signature = record.get("key_id"), record.get("signature")
    if not (isinstance(head, str) and isinstance(seq, int) and isinstance(records, int) and isinstance(ts, str)):
        return "checkpoint lacks head, seq, records or ts"
    if not isinstance(signer_id, str) or not isinstance(signature, str):
        return "checkpoint lacks key_id or signature"
    if head != record.get("prev"):
        return f"checkpoint head {head[:16]}… is not the chain it follows (prev): the chain does not pass through it"
    if records != seq:
        return f"checkpoint counts {records} records before it but has seq {seq}"
    expected_id = key_id(public_key)
    if signer_id != expected_id:
        return f"checkpoint signed by key {signer_id}, not by the public key given ({expected_id}) or any other given"
    try:
        public_key.verify(base64.b64decode(signature, validate=True), signed_bytes(head, seq, records, ts, signer_id))
    except (InvalidSignature, binascii.Error, ValueError):
        return "checkpoint signature does not verify: the checkpoint was altered or forged"
    return None


class Checkpointer:
    """Writes the checkpoints: after every `interval.records` records (counted as the log appends them), every
    `interval.seconds` when records were written since the last one (a timer thread), and at shutdown."""

    def __init__(self, log: AuditLog, key: Ed25519PrivateKey, interval: CheckpointInterval, metrics: Metrics) -> None:
        self.log = log
        self.key = key
        self.key_id = key_id(key.public_key())
        self.interval = interval
        self.metrics = metrics
        self.last_seq = log.seq  # what the previous process wrote is covered by the first checkpoint of this one
        self.written = 0
        self.failures = 0
        self.last_error: str | None = None
        self.last_checkpoint: dict[str, Any] | None = None  # seq, head and time of the last one written
        self._busy = threading.Lock()  # one checkpoint at a time (the count and the timer may both ask)
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    def start(self) -> None:
        if self.interval.records is not None:
            self.log.on_appended = self._appended
        if self.interval.seconds is not None:
            self._timer = threading.Thread(target=self._tick, name="audit-checkpoint", daemon=True)
            self._timer.start()

    def stop(self) -> None:
        """The shutdown checkpoint (when records were written since the last one)."""
        self._stop.set()
        self.log.on_appended = None
        if self._timer is not None:
            self._timer.join(5.0)
        self.checkpoint("shutdown")

    def _appended(self) -> None:
        # On the call path: one comparison per record; a checkpoint every `records` records (~0.1 ms).
        records = self.interval.records
        if records is not None and self.log.seq - self.last_seq >= records:
            self.checkpoint("records")

    def _tick(self) -> None:
        assert self.interval.seconds is not None
        while not self._stop.wait(self.interval.seconds):
            self.checkpoint("time")

    def checkpoint(self, reason: str) -> bool:
        """Write one checkpoint if records were written since the last; False when it failed (counted)."""
        with self._busy:
            if self.log.seq <= self.last_seq:
                return True
            written: dict[str, Any] = {}

            def build(seq: int, prev: str) -> dict[str, Any]:
                record = checkpoint_record(self.key, self.key_id, reason, seq, prev)
                written.update(seq=seq, head=prev, ts=record["ts"], reason=reason)
                return record

            try:
                self.log.write_at_head(build)
            except Exception as exc:  # AuditWriteError or a signing failure: counted, never raised into a call
                self.failures += 1
                self.metrics.audit_checkpoint_failures.inc()
                self.last_error = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {exc}"
                print(f"relay-shell: audit checkpoint failed: {exc}", file=sys.stderr, flush=True)
                return False
            self.last_seq = int(written["seq"])
            self.written += 1
            self.last_checkpoint = written
            self.metrics.audit_checkpoints.inc()
            return True

    def describe(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "every_records": self.interval.records,
            "every_seconds": self.interval.seconds,
            "written": self.written,
            "failures": self.failures,
            "last_error": self.last_error,
            "last": self.last_checkpoint,
            "records_since_last": max(0, self.log.seq - self.last_seq),
        }
