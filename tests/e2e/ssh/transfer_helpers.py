"""ssh_upload and ssh_download as a client calls them, and what a test checks with the file system itself:
content, modes, times, leftovers, and the server's memory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import fields, read_records, text_of

GIB = 1024**3
PATTERN = 64 * 1024**2
MTIME = 1_600_000_000
ATIME = 1_500_000_000


async def upload(client: Client, local: Path | str, remote: Path | str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(
        "ssh_upload", {"host": "h01", "local_path": str(local), "remote_path": str(remote), **arguments}
    )


async def download(client: Client, remote: Path | str, local: Path | str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(
        "ssh_download", {"host": "h01", "remote_path": str(remote), "local_path": str(local), **arguments}
    )


def assert_ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    got = fields(result)
    assert got["status"] == "ok" and got.get("partial", False) is False, got
    return got


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def make_file(path: Path, data: bytes, mode: int, mtime: int = MTIME) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    os.utime(path, (ATIME, mtime))
    return path


def temporaries(directory: Path) -> list[str]:
    """Our temporary names (`.NAME.relay-XXXXXXXX.part`) left anywhere below `directory`."""
    return [
        name for _, _, names in os.walk(directory) for name in names if ".relay-" in name and name.endswith(".part")
    ]


def records(audit_path: Path, tool: str) -> list[dict[str, Any]]:
    """The record of each call of `tool` (its end record: a call that ran also has a start record before it)."""
    return [record for record in read_records(audit_path) if record["tool"] == tool and record.get("phase") != "start"]


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)
