"""The stdio transport, on the event loop instead of worker threads.

The SDK's `stdio_server` reads and writes through `anyio.wrap_file`: every line in and every response out
hops to a worker thread and back, three hops per call, which is a measurable share of a sub-millisecond
call. This transport reads and writes the same pipes with asyncio's pipe transports, same framing (one
JSON-RPC message per line) and the same protections: while serving, fd 0 reads /dev/null and fd 1 goes to
stderr, so neither the server nor anything it starts can write into the protocol stream. When stdin or
stdout is not a pipe, socket or terminal (a regular file, /dev/null), it falls back to the SDK's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

MAX_LINE = 256 * 1024 * 1024  # one JSON-RPC message; megabyte arguments are fine, a runaway line is not


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
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
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as exc:
                    line = exc.partial  # the last line without a newline, or EOF
                    if not line:
                        return
                except asyncio.LimitOverrunError:
                    await read_stream_writer.send(ValueError(f"message longer than {MAX_LINE} bytes"))
                    return
                if not line.strip():
                    continue
                try:
                    text = line.decode("utf-8", errors="replace")
                    message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                except Exception as exc:
                    await read_stream_writer.send(exc)
                    refusal = _unreadable_request(text)
                    if refusal is not None:  # answer it, or the client waits for a reply forever
                        writer.write(refusal)
                    continue
                await read_stream_writer.send(SessionMessage(message))

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


def _unreadable_request(text: str) -> bytes | None:
    """The JSON-RPC error for a line that is not a valid message: -32700 when it is not JSON at all (id
    null), -32600 for a request the SDK cannot read (a lone surrogate, a wrong shape), with the request's id
    when it has one. Notifications and responses get no answer, as JSON-RPC says."""
    try:
        parsed = json.loads(text)
    except ValueError:
        code, request_id, message = -32700, None, "Parse error: the line is not JSON"
    else:
        if not isinstance(parsed, dict) or "method" not in parsed or "id" not in parsed:
            return None if isinstance(parsed, dict) else _error_line(-32600, None, "Invalid Request: not an object")
        request_id = parsed["id"] if isinstance(parsed["id"], (str, int)) else None
        code, message = -32600, "Invalid Request: the message does not match JSON-RPC/MCP (or holds a lone surrogate)"
    return _error_line(code, request_id, message)


def _error_line(code: int, request_id: str | int | None, message: str) -> bytes:
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(error, ensure_ascii=True).encode() + b"\n"


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
