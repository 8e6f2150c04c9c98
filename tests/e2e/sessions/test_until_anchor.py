"""End to end: `until` anchors on the line break before an answer, in local and SSH PTY sessions.

A pattern matches the new output as it would match the terminal stream (escape codes stripped, CRLF and lone
CR read as line ends, MULTILINE), the echo of the typed line aside: `\\n42\\r?\\n`, `^42$` and `42` all match
Python's answer to `print(6*7)`, and `42\\r\\n` (pexpect style, naming the CR) does too; a pattern found only
in the echo (`6\\*7`) does not match. Each case types into a fresh `python3 -q`, so that no prompt printed
after an earlier match arrives between the write and the echo.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import connect, fields, text_of
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]

ANSWER_PATTERNS = [r"\n42\r?\n", r"^42$", "42", r"42\r\n", r"\r\n42\r\n"]
ECHO_ONLY_PATTERNS = [r"6\*7", r"^print\(", r"\)$"]  # found in the echo of `print(6*7)`, never in the answer
PROMPT = "^>>> "


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory, fleet: SshFleet) -> AsyncIterator[Client]:
    audit_path = tmp_path_factory.mktemp("until-anchor") / "audit.jsonl"
    async with connect(audit_path, ssh_config=str(fleet.ssh_config)) as server:
        yield server


async def python_session(client: Client, remote: bool) -> str:
    if remote:
        arguments = {"host": "h01", "command": "python3 -q", "until": PROMPT, "timeout": 15}
        spawned = await client.call_tool("ssh_spawn", arguments)
    else:
        spawned = await client.call_tool("shell_spawn", {"command": "python3 -q", "until": PROMPT, "timeout": 10})
    assert fields(spawned)["wait"] == "match", text_of(spawned)
    return str(fields(spawned)["session_id"])


async def send(client: Client, session_id: str, until: str, timeout: float) -> CallToolResult:
    arguments = {"session_id": session_id, "data": "print(6*7)", "until": until, "timeout": timeout}
    return await client.call_tool("session_send", arguments)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "ssh"])
@pytest.mark.parametrize("until", ANSWER_PATTERNS)
async def test_until_matches_the_answer_after_the_echoed_line(client: Client, remote: bool, until: str) -> None:
    session_id = await python_session(client, remote)
    try:
        result = await send(client, session_id, until, timeout=10)
        assert not result.is_error, text_of(result)
        assert fields(result)["wait"] == "match", text_of(result)
        assert "42" in fields(result)["match_text"], text_of(result)
    finally:
        await client.call_tool("session_kill", {"session_id": session_id})


@pytest.mark.parametrize("remote", [False, True], ids=["local", "ssh"])
async def test_the_echo_of_the_typed_line_does_not_match(client: Client, remote: bool) -> None:
    session_id = await python_session(client, remote)
    try:
        for until in ECHO_ONLY_PATTERNS:
            result = await send(client, session_id, until, timeout=1.5)
            assert fields(result)["wait"] == "timeout", (until, text_of(result))
            assert "42" in text_of(result)  # the answer did arrive: only the echo held the pattern
    finally:
        await client.call_tool("session_kill", {"session_id": session_id})
