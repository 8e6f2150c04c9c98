"""relay-shell serving streamable HTTP as a real process, and the SDK client over HTTP with a bearer token."""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT, create_mcp_http_client

from tests.conftest import server_env

TOKENS = {"alice": "alice-token-6f1d2c", "bob": "bob-token-93ab07"}


@dataclass
class HttpServer:
    process: subprocess.Popen[str]
    url: str
    audit_path: Path
    stderr_lines: list[str]


def write_token_file(path: Path, tokens: dict[str, str], mode: int = 0o600) -> Path:
    path.write_text("".join(f"{name} {hashlib.sha256(token.encode()).hexdigest()}\n" for name, token in tokens.items()))
    path.chmod(mode)
    return path


def start(tmp_path: Path, **settings: str) -> HttpServer:
    audit_path = tmp_path / "audit.jsonl"
    env = server_env(audit_path, transport="http", http_port="0", **settings)
    process = subprocess.Popen(
        [sys.executable, "-m", "relay_shell"], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        found = re.search(r"speaking MCP at (http://\S+/mcp)", line)
        if found:
            return HttpServer(process, found.group(1), audit_path, lines)
    process.kill()
    raise AssertionError(f"the server did not start: {''.join(lines)}")


def stop(server: HttpServer) -> int:
    server.process.send_signal(signal.SIGTERM)
    return server.process.wait(timeout=15)


@asynccontextmanager
async def client(server: HttpServer, token: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # A request queued for one of the pool's 100 connections waits as long as a read may (the SDK's pool wait is
    # 30 s): the concurrency tests send 250-500 calls at once, which on a loaded two-core machine queue for longer.
    # They check records and results, not speed (that is benchmarks/bench_http.py).
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT, pool=MCP_DEFAULT_SSE_READ_TIMEOUT)
    http_client = create_mcp_http_client(headers=headers, timeout=timeout)
    transport = streamable_http_client(server.url, http_client=http_client)
    async with Client(transport, mode=mode) as connected:  # type: ignore[arg-type]
        yield connected


async def call(connected: Client, tool: str, **arguments: Any) -> Any:
    return await connected.call_tool(tool, arguments)
