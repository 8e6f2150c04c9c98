"""The append-only, hash-chained JSON Lines audit log.

Each record is one `write` on an O_APPEND descriptor, so concurrent writers never interleave and a record
reaches the kernel before the caller returns its result. With the chain on, every record carries
`seq`, `prev` (the previous record's chain) and `chain = sha256(prev ‖ canonical record without chain)`,
where the canonical record is the sorted-key orjson serialization. The line on disk is exactly the
canonical bytes with `"chain"` appended as the last key, so `verify` can hash the line without
re-serializing it.

Rotation (rename or copy-truncate) is detected before every write; the new file starts with an
`audit:continue` record whose `prev` links to the last record of the previous file, so the chain resumes
across rotation and restarts.

Whole records or none: a write the disk could only take in part (a short write on a full file system) is
taken back at once, so no torn line is left for `verify` to trip on. Damage found at the end of the file when it
is (re)opened (the process died before taking a write back, the host lost power, or the file is append-only and
cannot be cut) is repaired and recorded in an `audit:repair` record: an incomplete last line is cut off
(`removed_bytes`, `removed_sha256`); where cutting is not allowed, or complete lines that are no record precede
it, the damaged bytes are closed off and named by the repair record (`marked_bytes`, `marked_sha256`), which
`verify` accepts in their place. After any failure the next write reopens the path, so the log recovers by
itself once it is writable again and the chain resumes from the file's last record (adr/0014).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from relay_shell.audit.record import MAX_RECORD_BYTES, bound_record, fit_record

RECORD_VERSION = 1
GENESIS = "0" * 64
CONTINUE_TOOL = "audit:continue"
REPAIR_TOOL = "audit:repair"
# Closes a torn fragment that cannot be cut off: the closed line is never valid JSON, so `verify` cannot take a
# fragment that happens to parse for a record, and it must be followed by the repair record that names it.
TORN_CLOSE = b" <torn>\n"
MAX_DAMAGE_SCAN = 1 << 20  # bytes at the end of the file examined for damage
# The chain field is appended last: `,"chain":"<64 hex>"}` is 76 bytes before the newline.
CHAIN_SUFFIX_LEN = len(',"chain":"') + 64 + len('"}')


class AuditWriteError(Exception):
    """The record could not be written; the message says why (path and OS error)."""


_second_stamp: tuple[int, str] = (-1, "")  # the last second formatted, and its text


def utc_timestamp() -> str:
    """`2026-01-31T12:00:00.123456Z`. Every record has one (two per call): the date and time of the second
    is formatted once per second, only the microseconds per record."""
    global _second_stamp
    seconds, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    second, text = _second_stamp
    if second != seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second_stamp = (seconds, text)
    return f"{text}.{nanoseconds // 1000:06d}Z"


def chain_hash(prev: str, canonical: bytes) -> str:
    return hashlib.sha256(prev.encode("ascii") + canonical).hexdigest()


def encode_line(record: dict[str, Any], prev: str | None) -> bytes:
    """Serialize a record; with a `prev`, append the chain over the canonical bytes as the last key."""
    canonical = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    if prev is None:
        return canonical + b"\n"
    chain = chain_hash(prev, canonical)
    return canonical[:-1] + b',"chain":"' + chain.encode("ascii") + b'"}\n'


def parse_line(line: bytes) -> dict[str, Any]:
    """The record a log line holds; {} for a line that is no JSON object (damage `audit:repair` names)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}


def damaged_tail(path: Path, size: int) -> tuple[int, bool] | None:
    """Where the damage at the end of a file starts (an incomplete last line, and the lines before it that are no
    JSON record), and whether it is only the incomplete line; None when the file ends with a whole record."""
    with open(path, "rb") as handle:
        handle.seek(max(0, size - 65536))  # the usual case, a whole last record, needs only the last line
        tail = handle.read()
        if tail.endswith(b"\n") and _is_record(tail[tail.rfind(b"\n", 0, len(tail) - 1) + 1 :]):
            return None
        window_start = max(0, size - MAX_DAMAGE_SCAN)
        handle.seek(window_start)
        data = handle.read(size - window_start)
    lines = data.splitlines(keepends=True)
    start = size
    only_incomplete = True
    for line in reversed(lines):
        if line.endswith(b"\n"):
            if _is_record(line):
                break
            only_incomplete = False
        start -= len(line)
    return None if start == size else (start, only_incomplete)


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def read_last_line(path: Path, end: int | None = None) -> bytes | None:
    """The last complete line of a file (of its first `end` bytes), read backwards in blocks so a large log costs
    one seek."""
    try:
        with open(path, "rb") as handle:
            if end is None:
                end = handle.seek(0, os.SEEK_END)
            if end == 0:
                return None
            block = 8192
            data = b""
            position = end
            while position > 0:
                step = min(block, position)
                position -= step
                handle.seek(position)
                data = handle.read(step) + data
                stripped = data.rstrip(b"\n")
                newline = stripped.rfind(b"\n")
                if newline >= 0:
                    return stripped[newline + 1 :]
            return data.rstrip(b"\n") or None
    except FileNotFoundError:
        return None


class AuditLog:
    """One open log file. The server writes from its event loop; a lock still keeps a record written from
    another thread (the SDK runs synchronous resource functions in worker threads) from taking the same chain
    link as one written meanwhile (os.write releases the GIL)."""

    def __init__(self, path: Path, chain: bool = True, fsync: bool = False) -> None:
        self.path = path
        self.chain_enabled = chain
        self.fsync = fsync
        self.fd: int | None = None
        self.inode: tuple[int, int] | None = None
        self.size = 0
        self.seq = -1
        self.prev = GENESIS
        self.records_written = 0
        self.write_errors = 0
        self.last_error: str | None = None
        # Called after each record `write` appended (outside the lock): signed checkpoints count records with it.
        self.on_appended: Callable[[], None] | None = None
        self._lock = threading.Lock()

    # -- opening -----------------------------------------------------------------------------------------

    def open(self) -> None:
        """Open (creating 0600 in a 0700 directory) and resume the chain from the file's last record."""
        self._close_fd()
        self.ensure_open()

    def _open_file(self) -> None:
        directory = self.path.parent
        if not directory.exists():
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        info = os.fstat(fd)
        self._close_fd()
        self.fd = fd
        self.inode = (info.st_dev, info.st_ino)
        self.size = info.st_size
        if info.st_size == 0:
            self._start_file(reason="new file")
            return
        damage = damaged_tail(self.path, self.size)
        repair = self._repair_tail(*damage) if damage is not None else None
        last = read_last_line(self.path, end=damage[0] if damage is not None else None)
        continue_reason = None
        if last is None:  # the file held nothing but damage
            continue_reason = "new file"
        elif self.chain_enabled:
            try:
                record = orjson.loads(last)
                self.seq = int(record["seq"])
                self.prev = str(record["chain"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                # The tail is not a chained record (chain was off, or the file was damaged): start a new
                # segment that says so; `verify` reports the damage at its line.
                continue_reason = "previous record unreadable or unchained"
        if repair is not None and "marked_bytes" in repair[0]:
            self._write_repair(*repair)  # a mark must follow the bytes it names directly
            repair = None
        if continue_reason == "new file":
            self._start_file(reason=continue_reason)
        elif continue_reason is not None:
            self._write_continue(reason=continue_reason)
        if repair is not None:
            self._write_repair(*repair)

    def _write_repair(self, fields: dict[str, Any], closing: bytes) -> None:
        self._append({"v": RECORD_VERSION, "ts": utc_timestamp(), "tool": REPAIR_TOOL, **fields}, prefix=closing)

    def _repair_tail(self, start: int, only_incomplete: bool) -> tuple[dict[str, Any], bytes]:
        """Repair the damage at the end of the file from `start`: cut an incomplete last line off where the file
        allows it; otherwise close the damaged bytes off (the closing goes out with the repair record, in one
        write) and name them. Returns the repair record's fields and that closing."""
        assert self.fd is not None
        with open(self.path, "rb") as handle:
            handle.seek(start)
            damaged = handle.read(self.size - start)
        if only_incomplete:
            try:
                os.ftruncate(self.fd, start)
            except OSError:  # an append-only file (chattr +a): it can only be marked
                pass
            else:
                self.size = start
                reason = "an incomplete last line (a write that did not complete) was removed"
                digest = hashlib.sha256(damaged).hexdigest()
                return {"reason": reason, "removed_bytes": len(damaged), "removed_sha256": digest}, b""
        closing = b"" if damaged.endswith(b"\n") else TORN_CLOSE
        marked = damaged + closing
        reason = "the lines above are no record (writes that did not complete) and could not be removed"
        digest = hashlib.sha256(marked).hexdigest()
        return {"reason": reason, "marked_bytes": len(marked), "marked_sha256": digest}, closing

    def _start_file(self, reason: str) -> None:
        """A fresh file: genesis if we have no chain yet, otherwise a continuation record linking back."""
        if not self.chain_enabled or self.seq < 0:
            return
        self._write_continue(reason=reason)

    def _write_continue(self, reason: str) -> None:
        record = {"v": RECORD_VERSION, "ts": utc_timestamp(), "tool": CONTINUE_TOOL, "reason": reason}
        self._append(record)

    def _close_fd(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        self._close_fd()

    # -- writing -----------------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self.fd is not None and self.last_error is None

    def ensure_open(self) -> None:
        """Before a call runs: reopen a log that failed or was rotated away, so a failure refuses the call
        before anything executes (fail closed). Raises AuditWriteError."""
        with self._lock:
            self._ensure_open()

    def _ensure_open(self) -> None:
        try:
            if self.fd is None or self.last_error is not None:
                self._open_file()
            else:
                self._follow_rotation()
        except OSError as exc:
            self._fail(f"cannot open audit log {self.path}: {exc.strerror or exc}")
            raise AuditWriteError(self.last_error) from exc
        self.last_error = None

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (fields in `record`, chain fields added here). Raises AuditWriteError.
        Every field is bounded here, whoever wrote the record, and the line is at most MAX_RECORD_BYTES."""
        record = bound_record(record)
        with self._lock:
            self._write(record)
        if self.on_appended is not None:
            self.on_appended()

    def write_at_head(self, build: Callable[[int, str], dict[str, Any]]) -> None:
        """Append a record made from the chain position it takes: `build(seq, prev)` is called under the lock,
        after rotation is followed, so a checkpoint signs exactly the head it follows. Raises AuditWriteError."""
        with self._lock:
            self._write(build)

    def _write(self, record: dict[str, Any] | Callable[[int, str], dict[str, Any]]) -> None:
        try:
            if self.fd is None or self.last_error is not None:
                self._open_file()  # after a failure: reopen, repair a torn tail, resume the chain from disk
            else:
                self._follow_rotation()
            self._append(record if isinstance(record, dict) else bound_record(record(self.seq + 1, self.prev)))
        except OSError as exc:
            self._fail(f"cannot write audit log {self.path}: {exc.strerror or exc}")
            raise AuditWriteError(self.last_error) from exc
        except TypeError as exc:  # orjson: a value JSON cannot carry; the log itself is fine
            self.write_errors += 1
            raise AuditWriteError(f"cannot encode the audit record: {exc}") from exc
        self.last_error = None

    def _follow_rotation(self) -> None:
        """Reopen after rename/delete (the path no longer names our file) or copy-truncate (it shrank)."""
        assert self.fd is not None
        try:
            path_info = os.stat(self.path)
            renamed = (path_info.st_dev, path_info.st_ino) != self.inode
        except FileNotFoundError:
            renamed = True
        if renamed:
            self._close_fd()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            info = os.fstat(fd)
            self.fd = fd
            self.inode = (info.st_dev, info.st_ino)
            self.size = info.st_size
            self._start_file(reason="rotated by rename")
            return
        size = path_info.st_size  # the path names our file: its size is the descriptor's, no second look
        if size < self.size:
            self.size = size
            self._start_file(reason="rotated by copy-truncate")

    def _append(self, record: dict[str, Any], prefix: bytes = b"") -> None:
        assert self.fd is not None
        if self.chain_enabled:
            record["seq"] = self.seq + 1
            record["prev"] = self.prev
        line = encode_line(record, self.prev if self.chain_enabled else None)
        if len(line) > MAX_RECORD_BYTES:  # bounded fields, but many of them: the largest become digests
            line = encode_line(fit_record(record, len(line)), self.prev if self.chain_enabled else None)
        line = prefix + line
        written = os.write(self.fd, line)
        if written != len(line):
            after = "was removed" if self._take_back(written) else "is repaired when the log is reopened"
            raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes; the partial record {after})")
        if self.fsync:
            os.fsync(self.fd)
        if self.chain_enabled:
            self.seq += 1
            self.prev = line[-67:-3].decode("ascii")
        self.size += written
        self.records_written += 1

    def _take_back(self, written: int) -> bool:
        """Remove the part of a record a short write left at the end of the file, if it is still the end (no
        other writer appended after it): truncation needs no free space, so it works on a full disk."""
        assert self.fd is not None
        try:
            end = os.lseek(self.fd, 0, os.SEEK_CUR)  # O_APPEND: just past the bytes this write added
            if os.fstat(self.fd).st_size != end:
                return False
            os.ftruncate(self.fd, end - written)
        except OSError:
            return False
        return True

    def _fail(self, message: str) -> None:
        self.write_errors += 1
        self.last_error = message


def check_writable(path: Path) -> str | None:
    """For --check-config: None if the log can be opened for append, else why not."""
    try:
        directory = path.parent
        if directory.exists() and not directory.is_dir():
            return f"{directory} is not a directory"
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            return f"{path} is not a regular file"
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.close(fd)
    except OSError as exc:
        return f"cannot open {path} for append: {exc.strerror or exc}"
    return None
