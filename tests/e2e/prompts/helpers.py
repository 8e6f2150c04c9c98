"""What the prompt tests read answers with, and a relay-shell spoken to in raw JSON-RPC lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, TextContent

from tests.conftest import server_env

NODES = 150  # more hosts sharing a prefix than one completion answer may carry (100)


def prompt_text(result: Any) -> str:
    assert len(result.messages) == 1
    content = result.messages[0].content
    assert isinstance(content, TextContent)
    return content.text


async def invalid_params(client: Client, name: str, arguments: dict[str, str] | None) -> str:
    """The message of the error a prompts/get must fail with: JSON-RPC invalid params."""
    with pytest.raises(MCPError) as raised:
        await client.get_prompt(name, arguments)
    assert raised.value.code == INVALID_PARAMS, raised.value
    return raised.value.message


def user_data_section(text: str) -> list[str]:
    """The lines between the user-data heading and its end marker, split at every line break Python knows."""
    lines = text.splitlines()
    start = lines.index("## User data")
    end = lines.index("[end of user data]")
    return lines[start + 1 : end]


def quoted_value(text: str, argument: str) -> str:
    """Read a value back from the rendered prompt: the `| ` lines after its heading, prefixes removed."""
    lines = text.split("\n")
    heading = next(
        index for index, line in enumerate(lines) if line.startswith(f"{argument} (") and line.endswith("):")
    )
    value_lines = []
    for line in lines[heading + 1 :]:
        if not line.startswith("| "):
            break
        value_lines.append(line[2:])
    return "\n".join(value_lines)


def children(pid: int) -> set[int]:
    """Every process whose parent is `pid` (the children lists of all its threads)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


class RawServer:
    """relay-shell on pipes, spoken to in raw JSON-RPC lines (2025-11-25 handshake)."""

    def __init__(self, audit_path: Path) -> None:
        self.audit_path = audit_path
        self.process = subprocess.Popen(
            [sys.executable, "-m", "relay_shell"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=server_env(audit_path),
        )
        self.next_id = 1
        initialize = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        assert "result" in self.request("initialize", initialize)
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: Any) -> dict[str, Any]:
        assert self.process.stdout is not None
        request_id = self.next_id
        self.next_id += 1
        self.send(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        response: dict[str, Any] = orjson.loads(self.process.stdout.readline())
        assert response["id"] == request_id, response
        return response

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
