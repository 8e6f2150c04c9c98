"""The session output buffer: a fixed-size ring addressed by a monotonically increasing byte offset.

Offset 0 is the first byte the session ever produced. The ring keeps the last `capacity` bytes; a reader
asking for older bytes gets what is still there and the count of bytes it missed. Memory is the capacity,
whatever the session produces, and an append never moves the bytes already stored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RingRead:
    data: bytes
    start: int  # offset of data[0]
    end: int  # offset after the last byte returned (the caller's next cursor)
    dropped: int  # bytes between the requested offset and `start` that the ring no longer holds


class OutputRing:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buffer = bytearray(capacity)
        self.end = 0  # offset after the newest byte

    @property
    def start(self) -> int:
        """Offset of the oldest byte still held."""
        return max(0, self.end - self.capacity)

    def append(self, data: bytes) -> None:
        if len(data) >= self.capacity:
            # Only the last `capacity` bytes can survive; write them as if appended one by one.
            self.end += len(data) - self.capacity
            data = data[-self.capacity :]
        position = self.end % self.capacity
        first = min(len(data), self.capacity - position)
        self.buffer[position : position + first] = data[:first]
        if first < len(data):
            self.buffer[: len(data) - first] = data[first:]
        self.end += len(data)

    def read(self, since: int, limit: int | None = None) -> RingRead:
        """Bytes from offset `since` (clamped into what is held) to the end, at most `limit` of them."""
        since = min(max(since, 0), self.end)
        start = max(since, self.start)
        end = self.end if limit is None else min(self.end, start + limit)
        position = start % self.capacity
        length = end - start
        if position + length <= self.capacity:
            data = bytes(self.buffer[position : position + length])
        else:
            data = bytes(self.buffer[position:]) + bytes(self.buffer[: length - (self.capacity - position)])
        return RingRead(data=data, start=start, end=end, dropped=start - since)
