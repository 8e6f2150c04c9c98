"""Tier-3 confirmation as a client sees it: a file to destroy, the CONFIRM REQUIRED token, and the calls."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import fields, read_records, text_of

SHRED = "shred -u victim"  # tier 3; relative, so the cwd decides which file it destroys


def victim_in(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    victim = directory / "victim"
    victim.write_text("precious\n")
    return victim


def token_of(result: CallToolResult) -> str:
    """The token of a CONFIRM REQUIRED result, checked against the text a model reads."""
    text = text_of(result)
    assert result.is_error, text
    assert text.startswith("[CONFIRM REQUIRED tier 3: "), text
    token = fields(result)["confirm_token"]
    assert fields(result)["status"] == "confirm_required"
    assert f'operation_confirm(token="{token}")' in text
    return str(token)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def linked(audit_path: Path, confirmation: str) -> list[tuple[str, str]]:
    return [
        (record["tool"], record.get("outcome", record.get("phase")))
        for record in read_records(audit_path)
        if record.get("confirmation") == confirmation
    ]


def assert_never_logged(audit_path: Path, *tokens: str) -> None:
    log = audit_path.read_bytes()
    for token in tokens:
        assert token.encode() not in log, "a confirmation token reached the audit log"


async def shred(client: Client, cwd: Path | str, **more: Any) -> CallToolResult:
    return await client.call_tool("shell_exec", {"command": SHRED, "cwd": str(cwd), **more})


async def confirm(client: Client, token: str) -> CallToolResult:
    return await client.call_tool("operation_confirm", {"token": token})


async def armed(client: Client, result: CallToolResult) -> str:
    token = token_of(result)
    answer = await confirm(client, token)
    assert not answer.is_error and text_of(answer).startswith("[ok]\nArmed."), text_of(answer)
    return token
