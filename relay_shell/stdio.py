"""The stdio transport, on the event loop instead of worker threads.

The SDK's `stdio_server` reads and writes through `anyio.wrap_file`: every line in and every response out
hops to a worker thread and back, three hops per call, which is a measurable share of a sub-millisecond
call. This transport reads and writes the same pipes with asyncio's pipe transports, same framing (one
JSON-RPC message per line) and the same protections: while serving, fd 0 reads /dev/null and fd 1 goes to
stderr, so neither the server nor anything it starts can write into the protocol stream. When stdin or
stdout is not a pipe, socket or terminal (a regular file, /dev/null), which epoll cannot watch, a thread copies
between it and a pipe, so the messages take the same path (the same bounds, the same refusal records).

Every line is read by `wire.read_message`; a tools/call it refuses (its id, encoding, shape or size) is handed
to `on_refused` with the client name the connection declared first, before the error is written back, so the
call's record is in the log by the time the client reads the answer (adr/0016). So is a tools/call the SDK
answers with an error before the call router saw it (the 2026-07-28 envelope in a handshake connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import stat
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from relay_shell.wire import ID_SCAN_BYTES, Reading, RefusedCall, declared_client, oversized, read_message
from relay_shell.wire_lenient import CallScanner
from relay_shell.wire_routed import CallsInFlight

MAX_LINE = 256 * 1024 * 1024  # one JSON-RPC message; megabyte arguments are fine, a runaway line is not
SKIP_CHUNK = 1024 * 1024  # a line over MAX_LINE is consumed this much at a time
COPY_CHUNK = 1024 * 1024  # bytes a copying thread moves at a time between a regular file and its pipe
COPY_DRAIN_SECONDS = 10.0  # how long a stop waits for the last answers to reach a regular file on stdout


@asynccontextmanager
async def stdio_transport(
    on_refused: Callable[[str, RefusedCall], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    loop = asyncio.get_running_loop()
    stdin_private = _divert(0, os.open(os.devnull, os.O_RDONLY))
    stdout_private = _divert(1, os.dup(2))
    stdin_fd, stdout_fd, copier = _watchable(stdin_private, stdout_private)
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
        calls = CallsInFlight(on_refused)  # and the name the connection declared first, its name in the log

        async def stdin_reader() -> None:
            async with read_stream_writer:
                with contextlib.suppress(anyio.ClosedResourceError, ConnectionError):
                    await read_lines()

        async def read_lines() -> None:
            def answer(reading: Reading) -> None:
                for refused in reading.refused:  # one record per tools/call (a batch holds several)
                    calls.record(refused)
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
                if calls.client_name is None and reading.message is not None:
                    calls.client_name = declared_client(reading.message)
                answer(reading)
                if reading.message is not None:
                    await calls.pass_on(read_stream_writer, reading.message, line)

        async def stdout_writer() -> None:
            # A client that closed its end is a client that left: stop writing, the server shuts down on EOF.
            async with write_stream_reader:
                with contextlib.suppress(anyio.ClosedResourceError, ConnectionError):
                    async for session_message in write_stream_reader:
                        calls.answered(session_message.message)  # the SDK's refusal of a call is recorded
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
        if copier is not None:
            await anyio.to_thread.run_sync(copier.join, COPY_DRAIN_SECONDS)  # the answers reach the file
        _restore(0, stdin_private)
        _restore(1, stdout_private)


async def _skip_line(reader: asyncio.StreamReader, overrun: asyncio.LimitOverrunError) -> Reading | None:
    """Consume a line longer than MAX_LINE in chunks, keeping only its first and last bytes (where a client
    writes the id) and its digest, and return the answer to it; None when the stream ends inside the line."""
    head = b""
    tail = b""
    size = 0
    digest = hashlib.sha256()
    scanner = CallScanner()
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
            scanner.feed(chunk)
            head = head or chunk[:ID_SCAN_BYTES]
            tail = (tail + chunk)[-ID_SCAN_BYTES:]
        if found:
            await reader.readexactly(1)  # the newline
            return oversized(head, tail, size, MAX_LINE, digest.hexdigest(), scanner.finish())
        try:
            rest = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as again:
            overrun = again
            continue
        except asyncio.IncompleteReadError:
            return None
        size += len(rest) - 1
        digest.update(rest[:-1])
        scanner.feed(rest[:-1])
        tail = (tail + rest[:-1])[-ID_SCAN_BYTES:]
        return oversized(head, tail, size, MAX_LINE, digest.hexdigest(), scanner.finish())


def _watchable(stdin_fd: int, stdout_fd: int) -> tuple[int, int, threading.Thread | None]:
    """Descriptors the loop can watch for stdin and stdout, and the thread copying to stdout if there is one.

    epoll refuses a regular file or /dev/null (`relay-shell < in.jsonl > out.jsonl`): a thread copies between it
    and a pipe the loop watches, so every message goes through the same reader, bounds and refusal records."""
    stdin_watched = stdin_fd if _streamable(stdin_fd) else _pipe_from(stdin_fd)
    stdout_watched, copier = (stdout_fd, None) if _streamable(stdout_fd) else _pipe_to(stdout_fd)
    return stdin_watched, stdout_watched, copier


def _pipe_from(source: int) -> int:
    """The read end of a pipe a daemon thread fills from `source` (a regular file, /dev/null) until its end; the
    thread stops at EOF, or when the server closed the read end (EPIPE)."""
    read_end, write_end = os.pipe()
    # The thread's own copy of `source`: `source` is restored to fd 0 afterwards.
    threading.Thread(target=_copy, args=(os.dup(source), write_end), name="relay-shell-stdin", daemon=True).start()
    return read_end


def _pipe_to(target: int) -> tuple[int, threading.Thread]:
    """The write end of a pipe a thread drains into `target` (a regular file, /dev/null) until the server
    closes it; the thread, to wait for the last answers."""
    read_end, write_end = os.pipe()
    thread = threading.Thread(target=_copy, args=(read_end, os.dup(target)), name="relay-shell-stdout", daemon=True)
    thread.start()
    return write_end, thread


def _copy(source: int, target: int) -> None:
    """Copy until `source` ends or `target` takes no more (the server stopped reading, the file is full: what is
    left is lost as it would be without the thread), then close both."""
    try:
        while chunk := os.read(source, COPY_CHUNK):
            view = memoryview(chunk)
            while view:
                view = view[os.write(target, view) :]
    except OSError:
        pass
    finally:
        os.close(source)
        os.close(target)


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
