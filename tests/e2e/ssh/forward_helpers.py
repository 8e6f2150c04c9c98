"""ssh_forward as a client uses it, what carries traffic through a forward (a real HTTP server, a hashing TCP
sink), and an in-process server for tests that need two clients of one server."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import CallToolResult

from relay_shell.audit.log import AuditLog
from relay_shell.server import Assembly, build_server
from relay_shell.settings.model import Settings, by_area
from tests.conftest import fields, read_records, text_of
from tests.sshd import SshFleet

PAYLOAD_BYTES = 1024 * 1024 + 17  # an HTTP body over many SSH packets and channel windows
ALLOWED_ADDRESS = "127.0.0.9"  # the guarded server's allowed destination


@asynccontextmanager
async def in_process(tmp_path: Path, fleet: SshFleet, **settings: Any) -> AsyncIterator[tuple[Assembly, Path]]:
    audit_path = tmp_path / "audit.jsonl"
    audit_log = AuditLog(audit_path, chain=True, fsync=False)
    audit_log.open()
    assembly = build_server(
        Settings(**by_area({"audit_path": audit_path, "ssh_config": fleet.ssh_config, **settings})), audit_log
    )
    try:
        yield assembly, audit_path
    finally:
        await assembly.shutdown()
        audit_log.close()


def payload_sha(www: Path) -> str:
    return hashlib.sha256((www / "payload.bin").read_bytes()).hexdigest()


class HttpServer:
    """`python -m http.server` on address:free port, serving `root`."""

    def __init__(self, address: str, root: Path) -> None:
        self.address = address
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
            probe.bind((address, 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", address, str(self.port), "--directory", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def __enter__(self) -> int:
        deadline = time.monotonic() + 10
        while not accepts(self.address, self.port):
            assert self.process.poll() is None, "http.server exited"
            assert time.monotonic() < deadline, "http.server did not start"
            time.sleep(0.02)
        return self.port

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except ConnectionRefusedError:
        return False


async def forward(client: Client, spec: str, host: str = "h01", **arguments: Any) -> CallToolResult:
    return await client.call_tool("ssh_forward", {"host": host, "spec": spec, **arguments})


def opened(result: CallToolResult) -> tuple[str, int]:
    """The forward id and the port its listener got."""
    assert not result.is_error, text_of(result)
    got = fields(result)
    return got["forward_id"], got["listen_port"]


async def listed(client: Client) -> dict[str, dict[str, Any]]:
    result = await client.call_tool("ssh_forward_list", {})
    assert not result.is_error, text_of(result)
    # an empty list is the field's default, left out of structuredContent
    return {item["forward_id"]: item for item in fields(result).get("forwards", [])}


async def close(client: Client, forward_id: str) -> CallToolResult:
    result = await client.call_tool("ssh_forward_close", {"forward_id": forward_id})
    assert not result.is_error, text_of(result)
    return result


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=20) as response:
        data: bytes = response.read()
        return data


def curl(*arguments: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["curl", "-sS", "--max-time", "20", *arguments], capture_output=True, check=False)


async def until(condition: Callable[[], bool], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.05)
    return True


def records(audit_path: Path, tool: str) -> list[dict[str, Any]]:
    """The record of each call of `tool` (its end record: a call that ran also has a start record before it)."""
    return [record for record in read_records(audit_path) if record["tool"] == tool and record.get("phase") != "start"]


def end_record(audit_path: Path, forward_id: str) -> dict[str, Any]:
    ends = [record for record in records(audit_path, "forward:end") if record["forward_id"] == forward_id]
    assert len(ends) == 1, ends
    return ends[0]


class HashingSink:
    """A TCP server (a thread in this process) that reads each connection to EOF, then answers with the byte
    count and SHA-256 of what it read: the far end of a bulk transfer through a forward."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                digest = hashlib.sha256()
                total = 0
                while chunk := connection.recv(1 << 16):
                    digest.update(chunk)
                    total += len(chunk)
                connection.sendall(f"{total} {digest.hexdigest()}\n".encode())

    def close(self) -> None:
        self.listener.close()


def send_through(port: int, data: bytes) -> bytes:
    """Send `data`, half-close, and read the answer until the far side closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(1 << 16):
            answer += chunk
        return answer
