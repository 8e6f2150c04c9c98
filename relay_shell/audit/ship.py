"""Shipping the audit log to a syslog collector, behind the file: the file is the spool (adr/0020).

A thread reads the log from where it stopped and sends every line, exactly as written, as one RFC 5424 message
(audit/syslog.py). Calls never wait for it: nothing on the call path knows it exists, it polls the file, and what
it holds in memory is one batch (at most BATCH_BYTES), at most PENDING_MAX positions awaiting confirmation and at
most SEEN_MAX observations of the log's seq. It shares the GIL with the calls: each line is parsed once, batches
are small, and while calls write records a catch-up rests PACE times as long as each batch took.

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

Rotation, as audit/log.py does it. Renamed: the old file is read to its end, then the new one from its start.
Copy-truncated: the rest of the old content is read from the copy (a file in the same directory whose name starts
with the log's name and which holds our last shipped record at our offset), then the new content. A position is
found again the same way after a restart: the log's path first, then those copies. Each record read must continue
the chain of the one before; one that does not means the file changed under us, and the position is looked up
again. A position that can no longer be found (the copy was compressed or removed) is a gap: counted as an error,
shown in server_info, and shipping goes on from the start of the current file.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from relay_shell.audit.journald import JournalConnection, journal_message
from relay_shell.audit.log import AuditLog, read_last_line
from relay_shell.audit.syslog import (
    UDP_MAX,
    SyslogConnection,
    local_hostname,
    oversize_stub,
    parse_line,
    syslog_message,
)
from relay_shell.metrics import Metrics
from relay_shell.settings.offhost import SyslogTarget

BATCH_BYTES = 16 * 1024  # read and sent at once: a small batch holds the GIL briefly (~0.5 ms; calls keep latency)
LINE_MAX = 1 << 20  # a line is read whole up to this (a record is at most 64 KiB); longer is shipped cut
PACE = 9.0  # while calls write records, rest this many times as long as a batch took (its GIL share ≤ 1/10)
PENDING_MAX = 256  # positions awaiting confirmation at most: past it, neighbours merge (resolution halves)
SEEN_MAX = 256  # (seq, time) observations of the log kept for lag_seconds at most: past it, every other goes
POLL_SECONDS = 0.02  # how often an idle shipper looks for new records
CONFIRM_DELAY = 2.0  # seconds a connection must stay up after the collector's TCP acknowledged a position
SAVE_EVERY = 0.25  # seconds between state file writes while records flow
BACKOFF_MAX = 5.0  # seconds between reconnection attempts at most
PENDING_MERGE = 0.02  # positions sent within this many seconds share one confirmation entry
COMPRESSED = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".z", ".zip")


@dataclass(frozen=True)
class Position:
    dev: int
    ino: int
    offset: int  # just after the last line shipped
    seq: int  # that line's record's seq; -1 before the first
    chain: str  # the chain the record at `offset` continues: the last shipped record's, or at a file's start its
    # first record's prev; "" for a file that was empty


def state_path_for(audit_path: Path, target_label: str = "syslog") -> Path:
    """`.audit.jsonl.ship-state.json` beside the log (`.audit.jsonl.journald-state.json` for journald): hidden, and
    no name a rotation glob (`audit.jsonl*`) takes."""
    kind = "ship" if target_label == "syslog" else target_label
    return audit_path.with_name(f".{audit_path.name}.{kind}-state.json")


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
        self.connection: SyslogConnection | JournalConnection | None = None
        self.handle: BinaryIO | None = None
        self.sent: Position | None = None
        self.confirmed: Position | None = None
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
        self.gaps = 0
        self.records_sent = 0
        self.state = "starting"
        self.left: Position | None = None  # the end of the file shipping last moved on from (rotation)
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
        base = self.confirmed if self.failures else self.acked
        return base.seq if base is not None else -1

    def describe(self) -> dict[str, Any]:
        return {
            "target": self.target.url(),
            "state": self.state,
            "sent_seq": self.sent.seq if self.sent is not None else None,
            "acknowledged_seq": self.acked.seq if self.acked is not None else None,
            "confirmed_seq": self.confirmed.seq if self.confirmed is not None else None,
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
            self._close_handle()
            if self.connection is not None:
                self.connection.close()
            self._save(force=True)

    def _connect(self) -> bool:
        try:
            if self.target.scheme == "journald":
                self.connection = JournalConnection(self.target.path)
            else:
                self.connection = SyslogConnection(self.target, self.tls)
        except OSError as exc:  # ssl.SSLError (a certificate that does not verify) is an OSError
            self._error(f"cannot connect to {self.target.url()}: {exc}")
            return False
        # Whatever was sent and not confirmed on an earlier connection is sent again.
        self._resume(self.confirmed)
        return True

    def _ship_batch(self) -> bool:
        """Read and send one batch; False when there was nothing new."""
        lines = self._read_lines()
        if not lines:
            return False
        connection = self.connection
        assert connection is not None and self.sent is not None
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
            self.confirmed = self.acked = self.sent
            self.failures = 0
        else:
            self._pend(self.sent, connection.acknowledged_end())
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

    def _confirm(self) -> None:
        """Move the confirmed position: acknowledged by the collector's TCP, and the connection up since."""
        now = time.monotonic()
        connection = self.connection
        if connection is not None and connection.stream and self.pending:
            if connection.peer_closed():
                self._drop(
                    f"{self.target.url()} closed the connection; resending what it may not have kept (a collector "
                    "that requires a client certificate closes right after the handshake: check "
                    "RELAY_SHELL_AUDIT_SYSLOG_CERT/_KEY and the collector's permittedPeer)"
                )
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
                self.confirmed = self.pending.popleft()[0]
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
                self.confirmed = self.acked = self.sent
                self.pending.clear()
                self._observe()
            self.connection = None
        self.state = "stopped"

    # -- reading the file --------------------------------------------------------------------------------

    def _read_lines(self) -> list[tuple[bytes, dict[str, Any]]]:
        """The next complete lines after the sent position (following rotation), advancing it."""
        if self.handle is None or self.sent is None:
            self._resume(self.confirmed)
            if self.handle is None or self.sent is None:
                return []
        offset = self.sent.offset
        if offset > 0 and os.pread(self.handle.fileno(), 1, offset - 1) != b"\n":
            # Not at the start of a line: the file was cut and written again past our offset.
            self._relocate(f"{self.path} was truncated and rewritten past byte {offset}", skip_path=True)
            return []
        data = self.handle.read(BATCH_BYTES)
        if not data:
            self._at_end()
            return []
        if len(data) == BATCH_BYTES and b"\n" not in data:  # one record longer than a batch (up to 64 KiB)
            data += self.handle.read(LINE_MAX - BATCH_BYTES)
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < LINE_MAX:  # a line still being written (one write, but we may read between)
                self.handle.seek(self.sent.offset)
                return []
            end = len(data)  # a line this long is no record the log writes: ship it cut, as it is
        if end < len(data):
            self.handle.seek(self.sent.offset + end)
        parts = data[:end].split(b"\n")  # lines end at "\n" only, as the log writes them
        lines = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        position = self.sent
        shipped: list[tuple[bytes, dict[str, Any]]] = []
        for line in lines:
            record = parse_line(line) if line.endswith(b'"}\n') else {}  # once: its chain and its message
            seq, prev, chain = _chain_fields(line, record)
            if prev is not None and position.offset == 0 and not position.chain and self.confirmed == position:
                # The file was empty when opened: now its first record says what the start continues (a copy-
                # truncate before anything was confirmed moves it to the copy, which is then found by it).
                self.confirmed = replace(position, chain=prev)
            if chain is not None and position.chain and prev != position.chain:
                # The record does not continue the one shipped before: the file changed under us.
                if shipped:
                    break  # ship what continued; look the position up again at the next read
                self._relocate(f"the record at byte {position.offset} of {self.path} does not continue the chain")
                return []
            offset = position.offset + len(line)
            if chain is not None and seq is not None:
                position = replace(position, offset=offset, seq=seq, chain=chain)
            else:
                position = replace(position, offset=offset)
            shipped.append((line, record))
        if len(shipped) < len(lines):
            self.handle.seek(position.offset)
        self.sent = position
        return shipped

    def _at_end(self) -> None:
        """End of our file: move on if the log was rotated away from it."""
        assert self.handle is not None and self.sent is not None
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return  # renamed and not yet recreated: the writer creates it at its next record
        if (info.st_dev, info.st_ino) != (self.sent.dev, self.sent.ino):
            if self.handle.read(1):  # appended after our last read: not at the end after all
                self.handle.seek(self.sent.offset)
                return
            self.left = self.sent  # a record the writer added to the old file after all is looked up from here
            self._open(self.path, Position(info.st_dev, info.st_ino, 0, self.sent.seq, self.sent.chain))
        elif info.st_size < self.sent.offset:
            self._relocate(f"{self.path} was truncated (copy-truncate rotation)", skip_path=True)

    def _resume(self, position: Position | None) -> None:
        """Open the log at `position` (None: the start of the current file), wherever the file now is."""
        self.pending.clear()
        self.acked = position
        if position is None:
            self._open_current(None)
            return
        found = _locate(self.path, position)
        if found is None:
            self._gap(position, f"the last confirmed record (seq {position.seq}) is no longer at its place")
            return
        self._open(found, position)

    def _relocate(self, why: str, skip_path: bool = False) -> None:
        """Find the sent position again (in the file we just left, when we are at the start of the next one)."""
        assert self.sent is not None
        position = self.sent if self.sent.offset > 0 or self.left is None else self.left
        found = _locate(self.path, position, skip_path=skip_path) if position.offset > 0 else None
        if found is not None:
            with contextlib.suppress(OSError):
                info = found.stat()
                if (info.st_dev, info.st_ino) == (self.sent.dev, self.sent.ino) and position == self.sent:
                    found = None  # the very place that does not continue: looking again would find it again
        if found is None:
            self._gap(position, why)
            return
        self._open(found, position)

    def _gap(self, position: Position, why: str) -> None:
        """The position cannot be found: some records may never be shipped. Say so; ship the current file."""
        self.gaps += 1
        self._error(
            f"{why}; records after seq {position.seq} that were in rotated files no longer found beside the log "
            "may be missing from the collector; shipping continues from the start of the current file"
        )
        self._open_current(position)

    def _open_current(self, previous: Position | None) -> None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self._close_handle()
            self.sent = previous
            return
        seq = previous.seq if previous is not None else -1
        # The current file's first record may not continue the last one shipped (that is the gap): no chain to
        # continue, and a rewind after an outage comes back here.
        self._open(self.path, Position(info.st_dev, info.st_ino, 0, seq, ""))
        self.confirmed = self.sent

    def _open(self, path: Path, position: Position) -> None:
        self._close_handle()
        try:
            handle = open(path, "rb")
        except FileNotFoundError:
            self.sent = position
            return
        info = os.fstat(handle.fileno())
        if position.offset == 0 and not position.chain:
            # From a file's start with nothing to continue: the first record's prev is what the position must
            # continue, so the file is known again after a copy-truncate moved this content to a copy.
            position = replace(position, chain=_chain_fields(handle.readline())[1] or "")
        handle.seek(position.offset)
        self.handle = handle
        self.sent = replace(position, dev=info.st_dev, ino=info.st_ino)
        confirmed = self.confirmed
        same_file = confirmed is not None and (confirmed.dev, confirmed.ino) == (info.st_dev, info.st_ino)
        if confirmed is None or (same_file and confirmed.offset == 0 and not confirmed.chain):
            self.confirmed = self.sent  # a start that now knows what it continues

    def _close_handle(self) -> None:
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None

    # -- the state file ----------------------------------------------------------------------------------

    def _load_state(self) -> Position | None:
        try:
            state = orjson.loads(self.state_path.read_bytes())
            if state.get("target") != self.target.url():
                return None  # another collector: it gets the current file from its start
            position = Position(
                int(state["dev"]), int(state["ino"]), int(state["offset"]), int(state["seq"]), str(state["chain"])
            )
        except FileNotFoundError:
            return None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            self._error(f"state file {self.state_path} unreadable ({exc}); shipping the current file from its start")
            return None
        self.confirmed = position
        return position

    def _save(self, force: bool = False) -> None:
        position = self.confirmed
        now = time.monotonic()
        if position is None or position == self._saved or (not force and now - self._saved_at < SAVE_EVERY):
            return
        state = {"version": 1, "target": self.target.url(), **asdict(position), "saved": time.time()}
        temporary = self.state_path.with_name(self.state_path.name + ".tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(orjson.dumps(state))
                handle.flush()
                os.fsync(handle.fileno())  # on disk before the rename: a crash leaves the old state or the new
            os.replace(temporary, self.state_path)
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


def _chain_fields(line: bytes, record: dict[str, Any] | None = None) -> tuple[int | None, str | None, str | None]:
    """seq, prev and chain of a log line (`record`: the line already parsed); Nones for no chained record."""
    if not line.endswith(b'"}\n') or line[-77:-67] != b',"chain":"':
        return None, None, None
    if record is None:
        record = parse_line(line)
    seq, prev, chain = record.get("seq"), record.get("prev"), record.get("chain")
    if not isinstance(seq, int) or not isinstance(prev, str) or not isinstance(chain, str):
        return None, None, None
    return seq, prev, chain


def _locate(path: Path, position: Position, skip_path: bool = False) -> Path | None:
    """The file that holds `position`: the log's own path, else a rotated copy beside it (newest first), whose
    line ending at the position's offset is the record with the position's chain."""
    candidates = [] if skip_path else [path]
    with contextlib.suppress(OSError):
        siblings = [
            entry
            for entry in path.parent.iterdir()
            if entry.name.startswith(path.name)
            and entry.name != path.name
            and not entry.name.lower().endswith(COMPRESSED)
            and entry.is_file()
        ]
        candidates += sorted(siblings, key=lambda entry: entry.stat().st_mtime, reverse=True)
    for candidate in candidates:
        try:
            info = candidate.stat()
        except OSError:
            continue
        if info.st_size < position.offset:
            continue
        if not position.chain:  # an empty file when we opened it: that file, by identity
            if (info.st_dev, info.st_ino) == (position.dev, position.ino):
                return candidate
            continue
        if position.offset == 0:  # a file's start: the file whose first record continues the chain
            if _first_prev(candidate) == position.chain:
                return candidate
            continue
        last = read_last_line(candidate, end=position.offset)
        if last is not None and _chain_fields(last + b"\n")[2] == position.chain:
            return candidate
    return None


def _first_prev(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return _chain_fields(handle.readline())[1]
    except OSError:
        return None
