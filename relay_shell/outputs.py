"""Cut results readable in full (adr/0028). A one-shot result keeps the head and the tail of a long output; every
byte the command produced stays readable for a while under an output id (`o-…`), paged with
`session_recv(session_id=OUTPUT_ID, since=N, max_bytes=M)`.

Held in memory only — never on disk, never in the audit log (which keeps its digest, `raw_sha256`, the digest of
exactly these bytes) — within one bound for all of them together (RELAY_SHELL_OUTPUT_STORE_BYTES): output still
being produced counts as well as output kept, and the oldest kept output is dropped first to make room, so memory
stays within the bound whatever runs at once. A stream that would take the store past the bound once no kept output
is left to drop stops being kept (its result says so). Kept output is dropped after RELAY_SHELL_OUTPUT_RETENTION
seconds; reading it then says it is gone and why.

The bytes of a stream that will be cut are kept in blocks of 1 MiB (a copy of what the pipes or the channel
delivered): pieces of any size would cost the allocator more than the bytes (see Keeper).
"""

from __future__ import annotations

import asyncio
import bisect
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from relay_shell.capture import BoundedCapture, utf8_safe_head
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Plan

OUTPUT_PREFIX = "o-"
BLOCK = 1024 * 1024  # bytes a kept output is held in, per piece
GONE_REMEMBERED = 4096  # ids of dropped outputs kept to answer "gone, and why" rather than "unknown"


class Keeper:
    """Every byte of one stream while its call runs, charged to the store as it arrives. Up to `budget` bytes (what
    its result shows whole) the chunks are kept as delivered, by reference; a stream that grows past it will be cut,
    and its bytes are copied into blocks of BLOCK bytes from then on: chunks of any size would each cost the
    allocator a page-rounded mapping or a hole of its own, 10-20 % more than the bytes (bench_jobs, measured),
    where blocks of one size are reused as they are dropped."""

    __slots__ = ("block", "budget", "chunks", "filled", "overflowed", "size", "store")

    def __init__(self, store: OutputStore, budget: int) -> None:
        self.store = store
        self.budget = budget
        self.chunks: list[bytes] = []  # the chunks as delivered, then (past the budget) full blocks
        self.block: bytearray | None = None  # past the budget: the block being filled, BLOCK bytes
        self.filled = 0
        self.size = 0
        self.overflowed = False  # the stream outgrew the store's bound: nothing of it is kept

    def feed(self, chunk: bytes) -> None:
        if self.overflowed:
            return
        self.size += len(chunk)
        if self.block is None and self.size <= self.budget:
            self.chunks.append(chunk)
        else:
            if self.block is None:  # it will be cut: into blocks, what came so far first
                delivered, self.chunks, self.block = self.chunks, [], bytearray(BLOCK)
                for earlier in delivered:
                    self._copy(earlier)
            self._copy(chunk)
        self.store.charge(self, len(chunk))

    def _copy(self, chunk: bytes) -> None:
        assert self.block is not None
        view = memoryview(chunk)
        while view:
            taken = min(len(view), BLOCK - self.filled)
            self.block[self.filled : self.filled + taken] = view[:taken]
            self.filled += taken
            view = view[taken:]
            if self.filled == BLOCK:
                self.chunks.append(bytes(self.block))
                self.filled = 0

    def blocks(self) -> list[bytes]:
        """Every byte kept, in order (the block being filled closed)."""
        if self.block is not None and self.filled:
            self.chunks.append(bytes(self.block[: self.filled]))
        self.block, self.filled = None, 0
        return self.chunks

    def last(self, count: int) -> bytes:
        """The last `count` bytes kept so far (b"" once overflowed)."""
        taken: list[bytes] = [bytes(self.block[: self.filled]) if self.block is not None else b""]
        size = self.filled
        for chunk in reversed(self.chunks):
            if size >= count:
                break
            taken.append(chunk)
            size += len(chunk)
        data = b"".join(reversed(taken))
        return data[-count:] if count else b""

    def drop(self) -> None:
        self.chunks = []
        self.block, self.filled = None, 0
        self.size = 0
        self.overflowed = True

    def release(self) -> None:
        """The stream's call is over and its bytes are not kept: give their room back."""
        self.store.uncharge(self)


class StreamSink:
    """One stream of a running command: the bounded capture its result shows, the keeper of all of it, and, once
    its call yielded, the job that shows it as it comes (`listener`)."""

    __slots__ = ("capture", "keeper", "listener")

    def __init__(self, capture: BoundedCapture, keeper: Keeper) -> None:
        self.capture = capture
        self.keeper = keeper
        self.listener: Callable[[bytes], None] | None = None

    def feed(self, chunk: bytes) -> None:
        self.capture.feed(chunk)
        self.keeper.feed(chunk)
        if self.listener is not None:
            self.listener(chunk)

    @property
    def total(self) -> int:
        return self.capture.total

    def recent(self, count: int) -> bytes:
        """Up to the last `count` bytes produced so far, from the keeper, else (overflowed) the capture's tail."""
        if not self.keeper.overflowed:
            return self.keeper.last(count)
        capture = self.capture
        if capture.total <= capture.budget:
            return (bytes(capture.head) + bytes(capture.tail))[-count:]
        return bytes(capture.tail[len(capture.tail) - capture.tail_budget :])[-count:]


@dataclass
class StoredOutput:
    output_id: str
    owner: str
    chunks: list[bytes]
    starts: list[int]  # offset of each chunk's first byte
    size: int
    sha256: str
    expires_at: float  # time.monotonic()
    read_cursor: int = 0


@dataclass(frozen=True)
class OutputPage:
    output_id: str
    data: bytes
    start: int
    end: int
    size: int
    sha256: str  # of the whole output (the call's raw_sha256)
    expires_in: float


@dataclass
class OutputStore:
    limit: int  # RELAY_SHELL_OUTPUT_STORE_BYTES
    retention: float  # RELAY_SHELL_OUTPUT_RETENTION, seconds
    stored: OrderedDict[str, StoredOutput] = field(default_factory=OrderedDict)  # oldest first
    stored_bytes: int = 0
    pending_bytes: int = 0  # bytes kept by streams still running
    gone: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)  # id -> (owner, why)
    _timer: asyncio.TimerHandle | None = None

    def sink(self, budget: int) -> StreamSink:
        """A stream's sink: its capture within `budget` bytes, and its keeper."""
        return StreamSink(BoundedCapture(budget), Keeper(self, budget))

    def charge(self, keeper: Keeper, size: int) -> None:
        self.pending_bytes += size
        if self.stored_bytes + self.pending_bytes <= self.limit:
            return
        if keeper.size > self.limit:  # it can never be kept: stop keeping it, and free what it held
            self.pending_bytes -= keeper.size
            keeper.drop()
            return
        while self.stored and self.stored_bytes + self.pending_bytes > self.limit:
            oldest = next(iter(self.stored.values()))
            self._drop(oldest, f"dropped for newer output (RELAY_SHELL_OUTPUT_STORE_BYTES={self.limit})")
        if self.stored_bytes + self.pending_bytes > self.limit:
            # Only running streams are left and together they pass the bound: the one growing now stops being
            # kept (its result says so), so the bound holds whatever runs at once (review S2).
            self.pending_bytes -= keeper.size
            keeper.drop()

    def uncharge(self, keeper: Keeper) -> None:
        self.pending_bytes -= keeper.size
        keeper.drop()  # and nothing more is kept (a late chunk from a pipe still draining)

    def keep(self, keeper: Keeper, capture: BoundedCapture, owner: str) -> str | None:
        """A finished stream whose result was cut: every byte kept under a new output id, or None when they could not
        be (the stream outgrew the bound). Its room is given back either way unless kept."""
        if keeper.overflowed or keeper.size != capture.total:
            keeper.release()
            return None
        chunks = keeper.blocks()
        self.pending_bytes -= keeper.size
        keeper.chunks, keeper.size, keeper.overflowed = [], 0, True
        starts: list[int] = []
        offset = 0
        for chunk in chunks:
            starts.append(offset)
            offset += len(chunk)
        self._expire()
        output_id = OUTPUT_PREFIX + secrets.token_hex(6)
        expires_at = time.monotonic() + self.retention
        sha256 = capture.digest.hexdigest()
        self.stored[output_id] = StoredOutput(output_id, owner, chunks, starts, offset, sha256, expires_at)
        self.stored_bytes += offset
        self._arm()
        return output_id

    def read(self, owner: str, output_id: str, since: int | None, limit: int) -> OutputPage:
        """Up to `limit` bytes from `since` (default: after this owner's last read), ending on a whole UTF-8
        character unless it is the end."""
        self._expire()
        stored = self.get(owner, output_id)
        start = stored.read_cursor if since is None else since
        if start < 0 or start > stored.size:
            raise ArgumentError(f"since: {start} is outside output {output_id}; allowed: 0 to {stored.size}")
        end = min(stored.size, start + limit)
        data = _slice(stored, start, end)
        if end < stored.size:
            data = utf8_safe_head(data) or data  # a character cut in half is read whole on the next page
        end = start + len(data)
        stored.read_cursor = end
        expires_in = max(0.0, stored.expires_at - time.monotonic())
        return OutputPage(output_id, data, start, end, stored.size, stored.sha256, expires_in)

    def get(self, owner: str, output_id: str) -> StoredOutput:
        self._expire()
        stored = self.stored.get(output_id)
        if stored is not None and stored.owner == owner:
            return stored
        remembered = self.gone.get(output_id)
        if stored is not None or (remembered is not None and remembered[0] != owner):
            raise ToolError("SessionNotOwned", f"output {output_id!r} belongs to another client; outputs are private")
        if remembered is not None:
            raise ToolError("OutputGone", f"output {output_id!r} is gone: {remembered[1]}; run the command again")
        raise ToolError(
            "UnknownSession",
            f"no output {output_id[:64]!r}; a cut result names its output_id (ids look like o-1a2b3c4d5e6f)",
        )

    def status(self) -> dict[str, int]:
        self._expire()
        return {"outputs": len(self.stored), "stored_bytes": self.stored_bytes, "pending_bytes": self.pending_bytes}

    def _drop(self, stored: StoredOutput, why: str) -> None:
        del self.stored[stored.output_id]
        self.stored_bytes -= stored.size
        stored.chunks = []
        self.gone[stored.output_id] = (stored.owner, why)
        while len(self.gone) > GONE_REMEMBERED:
            self.gone.popitem(last=False)

    def _expire(self) -> None:
        now = time.monotonic()
        while self.stored:
            oldest = next(iter(self.stored.values()))
            if oldest.expires_at > now:
                return
            self._drop(oldest, f"kept {self.retention:g}s after the call (RELAY_SHELL_OUTPUT_RETENTION)")

    def _arm(self) -> None:
        """Free expired output on time even if nothing reads the store meanwhile."""
        if self._timer is not None or not self.stored:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, next(iter(self.stored.values())).expires_at - time.monotonic())
        self._timer = loop.call_later(delay + 0.01, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._expire()
        self._arm()


def _slice(stored: StoredOutput, start: int, end: int) -> bytes:
    if start >= end:
        return b""
    first = bisect.bisect_right(stored.starts, start) - 1
    parts: list[bytes] = []
    index = first
    while index < len(stored.chunks) and stored.starts[index] < end:
        chunk_start = stored.starts[index]
        chunk = stored.chunks[index]
        parts.append(chunk[max(0, start - chunk_start) : end - chunk_start])
        index += 1
    return b"".join(parts)


def keep_if_cut(outputs: OutputStore, owner: str, sink: StreamSink, plan: Plan) -> dict[str, str]:
    """At a command's end: when its result is cut, every byte kept under an output id, which the result names
    (`output_id`, and a note saying how to read it) and the end record too; else its room given back."""
    capture = sink.capture
    if capture.total <= capture.budget:  # not cut (capture.py)
        sink.keeper.release()
        return {}
    output_id = outputs.keep(sink.keeper, capture, owner)
    if output_id is None:
        plan.notes.append(
            f"the full output ({capture.total} bytes) is not kept: it is over "
            f"RELAY_SHELL_OUTPUT_STORE_BYTES={outputs.limit}; narrow the command (grep, head, tail) to see the middle"
        )
        return {}
    plan.notes.append(
        f"output cut: all {capture.total} bytes are kept as {output_id} for {outputs.retention:g}s "
        f'(or less, if newer outputs need the room): read them with session_recv(session_id="{output_id}", '
        "since=0), then since=cursor until cursor = total_bytes"
    )
    plan.record_fields = {**(plan.record_fields or {}), "output_id": output_id}
    return {"output_id": output_id}
