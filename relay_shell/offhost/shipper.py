"""Shipping the audit log to a collector (syslog or journald), behind the file: the file is the spool (adr/0020).

A thread reads the log from where it stopped and sends every line, exactly as written, as one RFC 5424 message
(offhost/syslog.py; for journald a journal entry, offhost/journald.py). Calls never wait for it: nothing on the call
path knows it exists, it polls the file, and what it holds in memory is one batch (at most log_reader.BATCH_BYTES),
at most PENDING_MAX positions awaiting confirmation and at most SEEN_MAX observations of the log's seq. It shares
the GIL with the calls: each line is parsed once, batches are small, and while calls write records a catch-up rests
PACE times as long as each batch took.

Position and delivery. A position is (file, byte offset after a line, seq and chain of that line's record). The
position *sent* moves as batches go out; right after a send the connection's `bytes_acked + SIOCOUTQ` (TCP_INFO
of the raw socket, under TLS too) is the value bytes_acked reaches once the collector's TCP has acknowledged that
position; it is then *acknowledged* (what lag counts), whatever was sent after it and is still in flight, and
*confirmed* once the connection stayed up CONFIRM_DELAY seconds more (a collector killed meanwhile loses what it
held in memory; we see it close and send again). Only confirmed positions are saved in the state file
(atomically and fsynced, next to the log). After a restart, a collector outage or any doubt, shipping resumes
from the confirmed position: at-least-once; the receiver drops duplicates by `seq`. A failed send or a collector
closing the connection keeps the reconnection backoff growing until a position is confirmed again. Datagram
targets (udp, unix) are confirmed when sent: UDP is lossy and documented so; a record too large for one datagram
goes as a stub (its seq, length and SHA-256: syslog.oversize_stub), counted as an error.

Reading the file and following it through rotation: offhost/log_reader.py; the state file: offhost/ship_state.py.
"""

from __future__ import annotations

import os
import ssl
import sys
import threading
import time
from collections import deque
from typing import Any

from relay_shell.audit.log import AuditLog
from relay_shell.metrics import Metrics
from relay_shell.offhost.journald import JournaldSink, journal_message
from relay_shell.offhost.log_reader import LogReader
from relay_shell.offhost.positions import Position
from relay_shell.offhost.ship_state import StateFileError, read_state, state_path_for, write_state
from relay_shell.offhost.sink import Sink
from relay_shell.offhost.syslog import UDP_MAX, SyslogSink, local_hostname, oversize_stub, syslog_message
from relay_shell.settings.offhost import SyslogTarget

PACE = 9.0  # while calls write records, rest this many times as long as a batch took (its GIL share ≤ 1/10)
PENDING_MAX = 256  # positions awaiting confirmation at most: past it, neighbours merge (resolution halves)
SEEN_MAX = 256  # (seq, time) observations of the log kept for lag_seconds at most: past it, every other goes
POLL_SECONDS = 0.02  # how often an idle shipper looks for new records
CONFIRM_DELAY = 2.0  # seconds a connection must stay up after the collector's TCP acknowledged a position
SAVE_EVERY = 0.25  # seconds between state file writes while records flow
BACKOFF_MAX = 5.0  # seconds between reconnection attempts at most
PENDING_MERGE = 0.02  # positions sent within this many seconds share one confirmation entry


class Shipper:
    def __init__(
        self,
        log: AuditLog,
        target: SyslogTarget,
        tls: ssl.SSLContext | None,
        metrics: Metrics,
        target_label: str = "syslog",
    ) -> None:
        """`tls`: the context for a `tls://` target (syslog.tls_context, made at start-up; None: the system's CAs)."""
        self.log = log
        self.path = log.path
        self.target = target
        self.tls = tls
        self.metrics = metrics
        self.state_path = state_path_for(log.path, target_label)
        self.hostname = local_hostname()
        self.procid = str(os.getpid()).encode()
        self.shipped = metrics.audit_shipped_records.labels(target=target_label)
        self.errors = metrics.audit_ship_errors.labels(target=target_label)
        self.connection: Sink | None = None
        self.reader = LogReader(log.path, self._error)  # the sent and the confirmed positions
        self.acked: Position | None = None  # the position the collector acknowledged (what lag is measured by)
        # Positions sent on this connection and not yet confirmed, oldest first: (position, the collector's TCP
        # has acknowledged it when its bytes_acked reaches this, sent at, acknowledged at or None).
        self.pending: deque[tuple[Position, int, float, float | None]] = deque()
        # (seq, monotonic time): the log held records up to seq at that time; the first whose seq is past the
        # acknowledged one tells since when the oldest record not acknowledged exists (lag_seconds).
        self.seen: deque[tuple[int, float]] = deque()
        self.failures = 0  # sends or connections failed since a position was last confirmed (the backoff)
        self.last_error: str | None = None
        self.error_count = 0
        self.records_sent = 0
        self.state = "starting"
        self._stop = threading.Event()
        self._flush_timeout = 0.0
        self._saved_at = 0.0
        self._saved: Position | None = None
        self._thread = threading.Thread(target=self._run, name="audit-ship", daemon=True)

    # -- the outside: start, stop, what it shows ---------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_timeout: float = 3.0) -> None:
        """Ship what is left (for at most `flush_timeout` seconds), close the connection so the collector confirms
        it has read everything, save the position."""
        self._flush_timeout = flush_timeout
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(flush_timeout + CONFIRM_DELAY + 2.0)

    @property
    def gaps(self) -> int:
        """Positions that could no longer be found: records that may be missing from the collector."""
        return self.reader.gaps

    def lag_records(self) -> int:
        """Records written that the collector has not acknowledged yet (TCP/TLS: its TCP acknowledged the bytes;
        datagrams: sent). A collector that vanished without a word shows here while sends still succeed."""
        return max(0, self.log.seq - self._lag_base())

    def lag_seconds(self) -> float:
        """How long the oldest record the collector has not acknowledged has existed (to the shipper's poll)."""
        if self.lag_records() == 0:
            return 0.0
        base = self._lag_base()
        for seq, seen_at in list(self.seen):  # a copy: the shipper's thread changes it
            if seq > base:
                return max(0.0, time.monotonic() - seen_at)
        return 0.0

    def _lag_base(self) -> int:
        """The seq lag is measured from: what the collector acknowledged, but only what it confirmed while the
        connection keeps failing. A collector that acknowledges the bytes and then drops the connection (one that
        refuses our client certificate after the TLS 1.3 handshake) keeps nothing, and its lag must grow."""
        base = self.reader.confirmed if self.failures else self.acked
        return base.seq if base is not None else -1

    def describe(self) -> dict[str, Any]:
        sent, confirmed = self.reader.sent, self.reader.confirmed
        return {
            "target": self.target.url(),
            "state": self.state,
            "sent_seq": sent.seq if sent is not None else None,
            "acknowledged_seq": self.acked.seq if self.acked is not None else None,
            "confirmed_seq": confirmed.seq if confirmed is not None else None,
            "lag_records": self.lag_records(),
            "lag_seconds": round(self.lag_seconds(), 3),
            "records_sent": self.records_sent,
            "errors": self.error_count,
            "gaps": self.gaps,
            "last_error": self.last_error,
            "state_file": str(self.state_path),
        }

    # -- the thread --------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._resume(self._load_state())
            while True:
                if self._stop.is_set():
                    self._flush()
                    return
                self._observe()
                if self.connection is None:
                    if self.failures:  # kept until a position is confirmed: no reconnect-and-resend loop
                        self.state = "reconnecting"
                        self._stop.wait(min(BACKOFF_MAX, 0.1 * 2 ** min(self.failures, 10)))
                        if self._stop.is_set():
                            continue
                    if not self._connect():
                        self.failures += 1
                        continue
                    self.state = "connected"
                seq_before = self.log.seq
                started = time.monotonic()
                if not self._ship_batch():
                    self._confirm()
                    self._stop.wait(POLL_SECONDS)
                elif self.log.seq != seq_before:
                    # Catching up while calls write records: rest, so the calls' thread gets the GIL at once.
                    self._stop.wait((time.monotonic() - started) * PACE)
        except Exception as exc:  # never take the server down; say why shipping stopped
            self._error(f"shipping stopped: {type(exc).__name__}: {exc}")
            self.state = "stopped"
        finally:
            self.reader.close()
            if self.connection is not None:
                self.connection.close()
            self._save(force=True)

    def _connect(self) -> bool:
        try:
            if self.target.scheme == "journald":
                self.connection = JournaldSink(self.target.path)
            else:
                self.connection = SyslogSink(self.target, self.tls)
        except OSError as exc:  # ssl.SSLError (a certificate that does not verify) is an OSError
            self._error(f"cannot connect to {self.target.url()}: {exc}")
            return False
        # Whatever was sent and not confirmed on an earlier connection is sent again.
        self._resume(self.reader.confirmed)
        return True

    def _resume(self, position: Position | None) -> None:
        """Read the log again from `position` (None: the start of the current file): nothing sent is pending."""
        self.pending.clear()
        self.acked = position
        self.reader.resume(position)

    def _read_lines(self) -> list[tuple[bytes, dict[str, Any]]]:
        """The next complete lines after the sent position, reopening the log at the confirmed one when it is
        not open."""
        if not self.reader.opened:
            self._resume(self.reader.confirmed)
        return self.reader.read_lines()

    def _ship_batch(self) -> bool:
        """Read and send one batch; False when there was nothing new."""
        lines = self._read_lines()
        if not lines:
            return False
        connection = self.connection
        sent = self.reader.sent
        assert connection is not None and sent is not None
        if self.target.scheme == "journald":
            messages = [journal_message(line, record) for line, record in lines]
        else:
            messages = [syslog_message(line, self.hostname, self.procid, record) for line, record in lines]
        stubs = 0
        if self.target.scheme == "udp":
            for index, message in enumerate(messages):
                if len(message) > UDP_MAX:
                    messages[index] = self._stub(lines[index])
                    stubs += 1
        try:
            stubs += connection.send(messages, lambda index: self._stub(lines[index]))
        except (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError):
            # The collector hung up while we wrote: the same refusal as one seen between sends (_confirm).
            self._drop(self._closed_message())
            return True
        except OSError as exc:
            self._drop(f"sending to {self.target.url()} failed: {exc}")
            return True
        if stubs:
            self._error(
                f"{stubs} record(s) too large for one datagram to {self.target.url()} were sent as stubs (seq, length "
                "and SHA-256 of the record); the file holds them whole"
            )
        self.records_sent += len(lines)
        self.shipped.inc(len(lines))
        if not connection.stream:
            self.reader.confirmed = self.acked = sent
            self.failures = 0
        else:
            self._pend(sent, connection.acknowledged_end())
        self._confirm()
        return True

    def _stub(self, item: tuple[bytes, dict[str, Any]]) -> bytes:
        return oversize_stub(item[0], self.hostname, self.procid, item[1])

    def _drop(self, why: str) -> None:
        """The connection failed or the collector closed it: what it did not confirm is sent again, after the
        backoff (a collector that accepts and drops, or a UDP port nobody listens on, is no hot loop)."""
        self._error(why)
        if self.connection is not None:
            self.connection.close()
        self.connection = None
        self.pending.clear()
        self.failures += 1

    def _pend(self, position: Position, end: int) -> None:
        """A position now sent: acknowledged once the connection's bytes_acked reaches `end`."""
        now = time.monotonic()
        last = self.pending[-1] if self.pending else None
        if last is not None and last[3] is None and now - last[2] < PENDING_MERGE:
            self.pending[-1] = (position, end, last[2], None)  # one entry spans at most PENDING_MERGE seconds
            return
        self.pending.append((position, end, now, None))
        if len(self.pending) > PENDING_MAX:
            # Bounded whatever the rate and the round trip: neighbours merge (the later position, acknowledged when
            # the later one is), so every entry still has a fixed end that the collector's TCP reaches.
            entries = list(self.pending)
            pairs = zip(entries[::2], entries[1::2], strict=False)
            merged = [(second[0], second[1], first[2], second[3]) for first, second in pairs]
            self.pending = deque(merged + ([entries[-1]] if len(entries) % 2 else []))

    def _observe(self) -> None:
        """Note the log's seq now (for lag_seconds) and forget what the collector has acknowledged."""
        seq = self.log.seq
        now = time.monotonic()
        if not self.seen or seq > self.seen[-1][0]:
            self.seen.append((seq, now))
            if len(self.seen) > SEEN_MAX:  # keep the oldest (it is the lag), every other one after it
                entries = list(self.seen)
                self.seen = deque(entries[:1] + entries[2::2])
        base = self._lag_base()
        while len(self.seen) > 1 and self.seen[0][0] <= base:
            self.seen.popleft()

    def _closed_message(self) -> str:
        return (
            f"{self.target.url()} closed the connection; resending what it may not have kept (a collector "
            "that requires a client certificate closes right after the handshake: check "
            "RELAY_SHELL_AUDIT_SYSLOG_CERT/_KEY and the collector's permittedPeer)"
        )

    def _confirm(self) -> None:
        """Move the confirmed position: acknowledged by the collector's TCP, and the connection up since."""
        now = time.monotonic()
        connection = self.connection
        if connection is not None and connection.stream and self.pending:
            if connection.peer_closed():
                self._drop(self._closed_message())
                return
            # Each position on its own: acknowledged once the collector's TCP has acknowledged its last byte,
            # whatever is in flight after it (continuous traffic over a real round trip keeps some always).
            bytes_acked = connection.bytes_acked()
            for index in range(len(self.pending)):
                position, end, sent_at, acked_at = self.pending[index]
                if acked_at is not None:
                    continue
                if end > bytes_acked:
                    break
                self.pending[index] = (position, end, sent_at, now)
                self.acked = position
            while self.pending and (acked_at := self.pending[0][3]) is not None and now - acked_at >= CONFIRM_DELAY:
                self.reader.confirmed = self.pending.popleft()[0]
                self.failures = 0
        self._save()

    def _flush(self) -> None:
        """At shutdown: send what is left, then half-close; the collector closing too confirms everything."""
        deadline = time.monotonic() + self._flush_timeout
        while self.connection is not None and time.monotonic() < deadline:
            if not self._ship_batch():
                break
        if self.connection is not None:
            if self.connection.close_gracefully(max(0.1, deadline - time.monotonic())):
                self.reader.confirmed = self.acked = self.reader.sent
                self.pending.clear()
                self._observe()
            self.connection = None
        self.state = "stopped"

    # -- the state file ----------------------------------------------------------------------------------

    def _load_state(self) -> Position | None:
        try:
            position = read_state(self.state_path, self.target.url())
        except StateFileError as exc:
            self._error(f"state file {self.state_path} unreadable ({exc}); shipping the current file from its start")
            return None
        if position is not None:
            self.reader.confirmed = position
        return position

    def _save(self, force: bool = False) -> None:
        position = self.reader.confirmed
        now = time.monotonic()
        if position is None or position == self._saved or (not force and now - self._saved_at < SAVE_EVERY):
            return
        try:
            write_state(self.state_path, self.target.url(), position)
        except OSError as exc:
            self._error(f"cannot save the shipping position in {self.state_path}: {exc.strerror or exc}")
            return
        self._saved = position
        self._saved_at = now

    def _error(self, message: str) -> None:
        self.error_count += 1
        self.errors.inc()
        if message != self.last_error:
            print(f"relay-shell: audit shipping: {message}", file=sys.stderr, flush=True)
        self.last_error = message
