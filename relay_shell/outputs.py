"""Cut results readable in full (adr/0028). A one-shot result keeps the head and the tail of a long output; every
byte the command produced stays readable for a while under an output id (`o-…`), paged with
`session_recv(session_id=OUTPUT_ID, since=N, max_bytes=M)`.

Held in memory only — never on disk, never in the audit log (which keeps its digest, `raw_sha256`, the digest of
exactly these bytes) — within one bound for all of them together (RELAY_SHELL_OUTPUT_STORE_BYTES): output still
being produced counts as well as output kept, and the oldest kept output is dropped first to make room, so memory
stays within the bound whatever runs at once. A stream that would take the store past the bound once no kept output
is left to drop stops being kept (its result says so). Kept output is dropped after RELAY_SHELL_OUTPUT_RETENTION
seconds; reading it then says it is gone and why.

The bytes of a stream that will be cut are kept in blocks of 1 MiB, each an anonymous mapping of its own (a copy
of what the pipes or the channel delivered), and the store charges what it really holds: every page of a block
before it is written, a chunk kept by reference with its object and the allocator's rounding (see Keeper). The
bound is on memory, not on the output's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from relay_shell.capture import BoundedCapture, utf8_safe_head
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Plan

if TYPE_CHECKING:
    import mmap

OUTPUT_PREFIX = "o-"
BLOCK = 1024 * 1024  # bytes a kept output is held in, per mapping (a multiple of the page size)
PAGE = os.sysconf("SC_PAGESIZE")
MALLOC_HEADER = 16  # glibc's chunk header and alignment, per object the allocator hands out
MMAP_THRESHOLD = 128 * 1024  # glibc's default: an object from this size on may be a mapping of its own
GONE_REMEMBERED = 4096  # ids of dropped outputs kept to answer "gone, and why" rather than "unknown"


def held_by(chunk: bytes) -> int:
    """The memory a bytes object kept by reference holds: the object (header and bytes) with the allocator's
    header, rounded to its 16-byte granule, or to whole pages from the size at which it may be a mapping."""
    size = sys.getsizeof(chunk) + MALLOC_HEADER
    granule = PAGE if size >= MMAP_THRESHOLD else 16
    return -(-size // granule) * granule


def pages(size: int) -> int:
    return -(-size // PAGE) * PAGE


class Keeper:
    """Every byte of one stream while its call runs, charged to the store as it is held. Up to `budget` bytes (what
    its result shows whole) the chunks are kept as delivered, by reference, each charged with what it holds
    (`held_by`); a stream that grows past it will be cut, and its bytes are copied from then on into blocks of
    BLOCK bytes, each an anonymous mapping whose pages are charged before they are written. Pieces from the
    allocator would cost it 10-20 % more than the bytes (holes between them that are never given back: bench_jobs
    measured 1.10-1.12x the bound), where a mapping costs its pages and is given back whole when it is dropped."""

    __slots__ = ("block", "blocks", "budget", "delivered", "filled", "held", "overflowed", "size", "store")

    def __init__(self, store: OutputStore, budget: int) -> None:
        self.store = store
        self.budget = budget
        self.delivered: list[bytes] | None = []  # the chunks as delivered; None once the stream is copied
        self.blocks: list[mmap.mmap] = []  # past the budget: the full blocks
        self.block: mmap.mmap | None = None  # past the budget: the block being filled
        self.filled = 0
        self.size = 0  # bytes of the stream
        self.held = 0  # memory charged to the store for them
        self.overflowed = False  # the stream outgrew the store's bound: nothing of it is kept

    def feed(self, chunk: bytes) -> None:
        if self.overflowed or not chunk:
            return
        self.size += len(chunk)
        delivered = self.delivered
        if delivered is not None and self.size <= self.budget:
            self.store.charge(self, held_by(chunk))
            if not self.overflowed:
                delivered.append(chunk)
            return
        if delivered is not None:  # it will be cut: into blocks, what came so far first, then let go of
            self.delivered = None
            for earlier in delivered:
                self._copy(earlier)
            if not self.overflowed:
                self.store.refund(self, sum(held_by(earlier) for earlier in delivered))
        self._copy(chunk)

    def _copy(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view and not self.overflowed:
            if self.block is None:  # address space only: a page is memory once written, and charged before
                import mmap  # here: an idle server does not load it (adr/0030), a cut stream's first block does

                self.block, self.filled = mmap.mmap(-1, BLOCK), 0
            taken = min(len(view), BLOCK - self.filled)
            grown = pages(self.filled + taken) - pages(self.filled)
            if grown:
                self.store.charge(self, grown)  # may drop older output first, or this stream
                if self.overflowed:
                    return
            self.block[self.filled : self.filled + taken] = view[:taken]
            self.filled += taken
            view = view[taken:]
            if self.filled == BLOCK:
                self.blocks.append(self.block)
                self.block = None

    def close(self) -> list[mmap.mmap]:
        """Every block, the last one shrunk to the pages its bytes take (the address space of the rest let go)."""
        block, self.block = self.block, None
        if block is not None:
            with contextlib.suppress(OSError, SystemError, ValueError):  # kept whole: its unwritten pages cost nothing
                block.resize(pages(self.filled))
            self.blocks.append(block)
        return self.blocks

    def last(self, count: int) -> bytes:
        """The last `count` bytes kept so far (b"" once overflowed)."""
        if count <= 0:
            return b""
        if self.delivered is not None:
            return b"".join(self.delivered)[-count:]
        taken: list[bytes] = []
        size = 0
        pieces: list[tuple[mmap.mmap, int]] = [(block, BLOCK) for block in self.blocks]
        if self.block is not None:
            pieces.append((self.block, self.filled))
        for block, length in reversed(pieces):
            if size >= count:
                break
            taken.append(block[max(0, length - (count - size)) : length])
            size += len(taken[-1])
        return b"".join(reversed(taken))

    def drop(self) -> None:
        self.delivered, self.blocks, self.block = None, [], None
        self.filled = self.size = self.held = 0
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
    blocks: list[mmap.mmap]  # BLOCK bytes of the output each, the last one its rest
    size: int  # bytes of the output
    held: int  # memory its blocks hold, charged to the store
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
    limit: int  # RELAY_SHELL_OUTPUT_STORE_BYTES: memory, kept outputs and running streams together
    retention: float  # RELAY_SHELL_OUTPUT_RETENTION, seconds
    stored: OrderedDict[str, StoredOutput] = field(default_factory=OrderedDict)  # oldest first
    stored_bytes: int = 0  # memory the kept outputs hold
    pending_bytes: int = 0  # memory held by streams still running
    gone: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)  # id -> (owner, why)
    _timer: asyncio.TimerHandle | None = None

    def sink(self, budget: int) -> StreamSink:
        """A stream's sink: its capture within `budget` bytes, and its keeper."""
        return StreamSink(BoundedCapture(budget), Keeper(self, budget))

    def charge(self, keeper: Keeper, size: int) -> None:
        """`size` more bytes of memory about to be held by `keeper`: the oldest kept output is dropped to make room,
        and a stream that cannot have it stops being kept (keeper.overflowed)."""
        keeper.held += size
        self.pending_bytes += size
        if self.stored_bytes + self.pending_bytes <= self.limit:
            return
        if keeper.held > self.limit:  # it can never be kept: stop keeping it, and free what it held
            self.uncharge(keeper)
            return
        while self.stored and self.stored_bytes + self.pending_bytes > self.limit:
            oldest = next(iter(self.stored.values()))
            self._drop(oldest, f"dropped for newer output (RELAY_SHELL_OUTPUT_STORE_BYTES={self.limit})")
        if self.stored_bytes + self.pending_bytes > self.limit:
            # Only running streams are left and together they pass the bound: the one growing now stops being
            # kept (its result says so), so the bound holds whatever runs at once (review S2).
            self.uncharge(keeper)

    def refund(self, keeper: Keeper, size: int) -> None:
        """`keeper` let go of `size` bytes of memory it was charged for."""
        keeper.held -= size
        self.pending_bytes -= size

    def uncharge(self, keeper: Keeper) -> None:
        self.pending_bytes -= keeper.held
        keeper.drop()  # and nothing more is kept (a late chunk from a pipe still draining)

    def keep(self, keeper: Keeper, capture: BoundedCapture, owner: str) -> str | None:
        """A finished stream whose result was cut: every byte kept under a new output id, or None when they could not
        be (the stream outgrew the bound). Its room is given back either way unless kept."""
        if keeper.overflowed or keeper.delivered is not None or keeper.size != capture.total:
            keeper.release()
            return None
        blocks = keeper.close()
        size, held = keeper.size, keeper.held
        self.pending_bytes -= held
        keeper.blocks, keeper.size, keeper.held, keeper.overflowed = [], 0, 0, True
        self._expire()
        output_id = OUTPUT_PREFIX + secrets.token_hex(6)
        expires_at = time.monotonic() + self.retention
        sha256 = capture.digest.hexdigest()
        self.stored[output_id] = StoredOutput(output_id, owner, blocks, size, held, sha256, expires_at)
        self.stored_bytes += held
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
        self.stored_bytes -= stored.held
        stored.blocks = []  # unmapped as the last reference goes (a page read copies what it returns)
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
    parts: list[bytes] = []
    for index in range(start // BLOCK, (end - 1) // BLOCK + 1):
        block_start = index * BLOCK
        parts.append(stored.blocks[index][max(0, start - block_start) : end - block_start])
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
