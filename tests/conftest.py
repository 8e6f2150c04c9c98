"""Shared fixtures: a real relay-shell server started as a subprocess, driven over stdio by the SDK client."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, TextContent

# The project root: test servers run from here, and scripts/test.sh installs the Node clients under .cache/npm.
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def server_env(audit_path: Path, **settings: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(audit_path)
    env.update({f"RELAY_SHELL_{name.upper()}": value for name, value in settings.items()})
    return env


@asynccontextmanager
async def connect(audit_path: Path, mode: str = "auto", **settings: str) -> AsyncIterator[Client]:
    """A real stdio connection: mode "legacy" is the 2025-11-25 initialize handshake, "auto" negotiates
    the newest era the server speaks (2026-07-28)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "relay_shell"], env=server_env(audit_path, **settings)
    )
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def read_records(audit_path: Path) -> list[dict[str, Any]]:
    if not audit_path.exists():
        return []
    return [orjson.loads(line) for line in audit_path.read_bytes().splitlines()]
