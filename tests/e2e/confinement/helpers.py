"""What the confinement tests call: a stdio server with extra environment, a process outside every call."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import read_records, server_env

NO_LANDLOCK = [str(Path(__file__).parents[2] / "refuse_syscall.py"), "landlock_create_ruleset"]


@asynccontextmanager
async def serve(
    audit_path: Path, extra_env: dict[str, str], launcher: list[str] | None = None, **settings: str
) -> AsyncIterator[Client]:
    """A real stdio server (optionally started through `launcher`, e.g. tests/refuse_syscall.py) with `extra_env` added
    to its environment, and the SDK's client."""
    env = server_env(audit_path, **settings)
    env.update(extra_env)
    args = [*launcher, sys.executable, "-m", "relay_shell"] if launcher else ["-m", "relay_shell"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with Client(params) as client:  # type: ignore[arg-type]
        yield client


def start_victim() -> subprocess.Popen[bytes]:
    """A process no call started: kill(2) of it from a readonly call must fail."""
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def end_record(audit_path: Path, call_index: int = -1, tool: str = "shell_exec") -> dict[str, Any]:
    records = read_records(audit_path)
    ends = [record for record in records if record.get("tool") == tool and record.get("phase") == "end"]
    return ends[call_index]


class Daemon:
    """What a readonly call may still talk to (adr/0024): a daemon listening on a unix socket by path, on an
    abstract one and on loopback TCP, writing down the first line of every request (an HTTP request line) and
    answering `{}`."""

    def __init__(self, path: Path) -> None:
        self.requests: list[str] = []
        self.abstract_name = f"relay-daemon-{os.getpid()}-{id(self)}"
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.listeners = [self.tcp]
        for address in (str(path), "\0" + self.abstract_name):
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(address)
            listener.listen()
            self.listeners.append(listener)
        for listener in self.listeners:
            threading.Thread(target=self._serve, args=(listener,), daemon=True).start()

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data.split(b"\r\n", 1)[0].decode())
                with contextlib.suppress(OSError):  # a client that only sends has gone already
                    connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()
