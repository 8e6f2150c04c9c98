"""What the confinement tests call: a stdio server with extra environment, a process outside every call."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import read_records, server_env

NO_LANDLOCK = str(Path(__file__).with_name("no_landlock.py"))


@asynccontextmanager
async def serve(
    audit_path: Path, extra_env: dict[str, str], launcher: list[str] | None = None, **settings: str
) -> AsyncIterator[Client]:
    """A real stdio server (optionally started through `launcher`, e.g. no_landlock.py) with `extra_env` added
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
