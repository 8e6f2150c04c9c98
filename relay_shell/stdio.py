"""The stdio transport, on the event loop instead of worker threads.

The SDK's `stdio_server` reads and writes through `anyio.wrap_file`: every line in and every response out
hops to a worker thread and back, three hops per call, which is a measurable share of a sub-millisecond
call. This transport reads and writes the same pipes with asyncio's pipe transports, same framing (one
JSON-RPC message per line) and the same protections: while serving, fd 0 reads /dev/null and fd 1 goes to
stderr, so neither the server nor anything it starts can write into the protocol stream. When stdin or
stdout is not a pipe, socket or terminal (a regular file, /dev/null), it falls back to the SDK's transport.

Every line is read by `wire.read_message`; a tools/call it refuses (its id, encoding, shape or size) is handed
to `on_refused` with the client name the connection declared first, before the error is written back, so the
call's record is in the log by the time the client reads the answer (adr/0016).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from relay_shell.wire import ID_SCAN_BYTES, Reading, RefusedCall, declared_client, oversized, read_message

MAX_LINE = 256 * 1024 * 1024  # one JSON-RPC message; megabyte arguments are fine, a runaway line is not
SKIP_CHUNK = 1024 * 1024  # a line over MAX_LINE is consumed this much at a time


@asynccontextmanager
async def stdio_transport(
    on_refused: Callable[[str, RefusedCall], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    if not (_streamable(0) and _streamable(1)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    stdin_fd = _divert(0, os.open(os.devnull, os.O_RDONLY))
    stdout_fd = _divert(1, os.dup(2))
    read_transport: asyncio.ReadTransport | None = None
    write_transport: asyncio.WriteTransport | None = None
    try:
        reader = asyncio.StreamReader(limit=MAX_LINE)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin_fd, "rb", buffering=0)
        )
        write_transport, write_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(stdout_fd, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
        read_stream_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
        write_stream, write_stream_reader = create_context_streams[SessionMessage](0)

        async def stdin_reader() -> None:
            async with read_stream_writer:
                with contextlib.suppress(anyio.ClosedResourceError, ConnectionError):
                    await read_lines()

        async def read_lines() -> None:
            client_name: str | None = None  # the first name the connection declares is its name in the log

            def answer(reading: Reading) -> None:
                if reading.refused is not None and on_refused is not None:
                    on_refused(client_name or reading.refused.client_name or "unknown", reading.refused)
                if reading.answer is not None:  # answer it, or the client waits for a reply forever
                    writer.write(reading.answer + b"\n")

            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    line = exc.partial  # the last line without a newline, or EOF
                    if not line:
                        return
                except asyncio.LimitOverrunError as exc:
                    # A line longer than the transport reads: skip it in bounded memory, answer it, go on.
                    skipped = await _skip_line(reader, exc)
                    if skipped is None:
                        return  # EOF inside the line: the client is gone
                    answer(skipped)
                    continue
                if not line.strip():
                    continue
                reading = read_message(line[:-1] if line.endswith(b"\n") else line)
                if client_name is None and reading.message is not None:
                    client_name = declared_client(reading.message)
                answer(reading)
                if reading.message is not None:
                    await read_stream_writer.send(SessionMessage(reading.message))

        async def stdout_writer() -> None:
            # A client that closed its end is a client that left: stop writing, the server shuts down on EOF.
            async with write_stream_reader:
                with contextlib.suppress(anyio.ClosedResourceError, ConnectionError):
                    async for session_message in write_stream_reader:
                        data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        writer.write(data.encode("utf-8") + b"\n")
                        await writer.drain()

        async with anyio.create_task_group() as group:
            group.start_soon(stdin_reader)
            group.start_soon(stdout_writer)
            yield read_stream, write_stream
    finally:
        for transport in (read_transport, write_transport):
            if transport is not None:
                transport.close()
        _restore(0, stdin_fd)
        _restore(1, stdout_fd)


async def _skip_line(reader: asyncio.StreamReader, overrun: asyncio.LimitOverrunError) -> Reading | None:
    """Consume a line longer than MAX_LINE in chunks, keeping only its first and last bytes (where a client
    writes the id) and its digest, and return the answer to it; None when the stream ends inside the line."""
    head = b""
    tail = b""
    size = 0
    digest = hashlib.sha256()
    while True:
        found = "Separator is found" in str(overrun)  # asyncio says which, and how far it may consume
        remaining = overrun.consumed
        while remaining > 0:
            chunk = await reader.read(min(remaining, SKIP_CHUNK))
            if not chunk:
                return None
            remaining -= len(chunk)
            size += len(chunk)
            digest.update(chunk)
            head = head or chunk[:ID_SCAN_BYTES]
            tail = (tail + chunk)[-ID_SCAN_BYTES:]
        if found:
            await reader.readexactly(1)  # the newline
            return oversized(head, tail, size, MAX_LINE, digest.hexdigest())
        try:
            rest = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as again:
            overrun = again
            continue
        except asyncio.IncompleteReadError:
            return None
        size += len(rest) - 1
        digest.update(rest[:-1])
        tail = (tail + rest[:-1])[-ID_SCAN_BYTES:]
        return oversized(head, tail, size, MAX_LINE, digest.hexdigest())


def _streamable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    # epoll refuses regular files and most character devices (/dev/null); terminals it takes.
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _divert(fd: int, replacement: int) -> int:
    """Keep the wire on a private descriptor and point `fd` at `replacement`."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(replacement, fd)
    os.close(replacement)
    return private


def _restore(fd: int, private: int) -> None:
    with contextlib.suppress(OSError):
        os.dup2(private, fd)
