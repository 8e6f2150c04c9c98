"""Where a downloaded file's bytes go: SHA-256 and the temporary file, in order, on a worker thread a batch at
a time (`Sink`).

On the event loop, hashing and writing took about half of a download's CPU (SHA-256 ~0.6 s and the write ~0.3 s
per GiB here) beside asyncssh's decryption and packets, so a download went as fast as one core allowed. On a
worker thread they run beside the event loop (hashlib and os.write release the GIL): ~0.3 s more CPU per GiB
in all, ~0.9 s less on the event loop (ADR 0029). One hand-off per MiB or more; one per block cost more than it saved
(ADR 0012). A file smaller than a batch is hashed and written inline. An upload reads and hashes inline: there
the thread's extra CPU bought nothing (measured), asyncssh's sending and the remote side being the larger part.
The worker never outlives the copy: `stop` waits for it before the descriptor is closed or the temporary file
removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import anyio

# One hand-off per batch of at least this (an `scp -f` read is a whole channel window, 2 MiB, and goes at once).
# At most two batches are held: the one on the worker and the next, which waits for it (the back-pressure).
BATCH = 1024 * 1024


class Sink:
    """A downloaded file's bytes, hashed and written in order."""

    def __init__(self, descriptor: int, expected: int) -> None:
        self.descriptor = descriptor
        self.threaded = expected >= BATCH
        self.digest = hashlib.sha256()
        self.batch: list[bytes] = []
        self.batch_bytes = 0
        self.writing: asyncio.Future[None] | None = None

    async def add(self, data: bytes) -> None:
        if not self.threaded:
            _hash_and_write(self.digest, self.descriptor, [data])
            return
        self.batch.append(data)
        self.batch_bytes += len(data)
        if self.batch_bytes >= BATCH:
            await self._hand_over()

    async def finish(self) -> str:
        """Every byte hashed and written: the file's SHA-256."""
        await self._hand_over()
        await self._wait()
        return self.digest.hexdigest()

    async def stop(self) -> None:
        """After a failure or a cancellation: the worker has let go of the descriptor when this returns."""
        writing, self.writing = self.writing, None
        await _worker_done(writing)

    async def _hand_over(self) -> None:
        await self._wait()  # the previous batch first: the digest sees the bytes in order, one writer at a time
        if self.batch:
            batch, self.batch, self.batch_bytes = self.batch, [], 0
            loop = asyncio.get_running_loop()
            self.writing = loop.run_in_executor(None, _hash_and_write, self.digest, self.descriptor, batch)

    async def _wait(self) -> None:
        if self.writing is not None:
            # Shielded: a cancellation must not mark the batch done while the worker still writes it (`stop`).
            await asyncio.shield(self.writing)  # the worker's OSError (a full disk) is the copy's
            self.writing = None


async def _worker_done(work: asyncio.Future[Any] | None) -> None:
    """Wait until the worker has finished its batch, whatever is being cancelled meanwhile (a batch takes
    milliseconds; closing the descriptor under it could send a write into whichever file gets the number next).
    Its outcome is dropped: the failure that brought us here is the one reported."""
    if work is None:
        return
    cancelled = False
    with anyio.CancelScope(shield=True):
        while not work.done():
            try:
                await asyncio.wait([work])
            except asyncio.CancelledError:
                cancelled = True
    if not work.cancelled():
        work.exception()
    if cancelled:
        raise asyncio.CancelledError


def _hash_and_write(digest: Any, descriptor: int, blocks: list[bytes]) -> None:
    for data in blocks:
        digest.update(data)  # releases the GIL for large buffers, as os.write does
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
