"""Review finding S3: a tools/call the MCP SDK refuses over streamable HTTP after relay-shell's message guard let
it through (no MCP session id, an unknown session or another token's, an Accept header without JSON or SSE, an
MCP-Protocol-Version nobody serves) leaves exactly one audit record saying why: `http_status`, the SDK's refusal
as `reason`, the tool, the token's name, the arguments redacted as every record's are, and the digest of the
request body. A well-formed call still leaves exactly its
own records and no refusal record.

A real relay-shell serving HTTP with bearer tokens; raw HTTP requests for the refused ones (the SDK's client
never sends them), the SDK's client for the well-formed calls. HOSTILE_TEST_SERVER_DIR=/path/to/a/checkout runs
them against that checkout's server (how they were shown to fail before the fix).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conftest import read_records, text_of
from tests.e2e.http.server import TOKENS, write_token_file
from tests.fuzz.peers import HttpPeer, initialize, server_dir

pytestmark = pytest.mark.anyio

SECRET = "hunter2-s3-secret-81c4e0"
JSON_AND_SSE = "application/json, text/event-stream"


@pytest.fixture(scope="module")
async def peer(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HttpPeer]:
    """A server with alice's and bob's tokens, and an MCP session alice opened."""
    where = tmp_path_factory.mktemp("refused-by-sdk")
    tokens = write_token_file(where / "tokens", TOKENS)
    started = await HttpPeer.start(server_dir(), where / "audit.jsonl", token_file=str(tokens), ssh_config="")
    started.client.headers["Authorization"] = f"Bearer {TOKENS['alice']}"
    await initialize(started, client="s3-client")
    yield started
    await started.close()


def call_body(request_id: int, meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": "shell_exec", "arguments": {"command": "echo hi", "env": {"DB_PASSWORD": SECRET}}}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "s3-modern", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}

# name: (headers beyond the token (SESSION: alice's session id), token, the status, what the reason says, the envelope)
SESSION = "<alice's session>"
CASES: dict[str, tuple[dict[str, str], str, int, str, dict[str, Any] | None]] = {
    "no Mcp-Session-Id": ({"Accept": JSON_AND_SSE}, "alice", 400, "Missing session ID", None),
    "an unknown session": (
        {"Accept": JSON_AND_SSE, "Mcp-Session-Id": "0" * 32, "MCP-Protocol-Version": "2025-11-25"},
        "alice",
        404,
        "Session not found",
        None,
    ),
    "another token's session": (
        {"Accept": JSON_AND_SSE, "Mcp-Session-Id": SESSION, "MCP-Protocol-Version": "2025-11-25"},
        "bob",
        404,
        "Session not found",
        None,
    ),
    "Accept: text/plain": (
        {"Accept": "text/plain", "Mcp-Session-Id": SESSION, "MCP-Protocol-Version": "2025-11-25"},
        "alice",
        406,
        "Not Acceptable",
        None,
    ),
    "an MCP-Protocol-Version nobody serves, in a session": (
        {"Accept": JSON_AND_SSE, "Mcp-Session-Id": SESSION, "MCP-Protocol-Version": "1999-01-01"},
        "alice",
        400,
        "envelope keys",  # any version but a handshake one is the 2026-07-28 era's: the SDK asks for its envelope
        None,
    ),
    "an MCP-Protocol-Version nobody serves, with its envelope": (
        {
            "Accept": JSON_AND_SSE,
            "MCP-Protocol-Version": "1999-01-01",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "shell_exec",
        },
        "alice",
        400,
        "Unsupported protocol version",
        {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "1999-01-01"},
    ),
    "Accept: text/plain without a session (2026-07-28)": (
        {"Accept": "text/plain", "MCP-Protocol-Version": "2026-07-28"},
        "alice",
        406,
        "Not Acceptable",
        MODERN_META,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_tool_call_the_sdk_refuses_has_exactly_one_record_saying_why(peer: HttpPeer, case: str) -> None:
    extra, token, status, reason, meta = CASES[case]
    request_id = 700 + list(CASES).index(case)
    body = call_body(request_id, meta)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS[token]}"}
    headers |= {name: peer.session_id or "" if value == SESSION else value for name, value in extra.items()}
    before = len(read_records(peer.audit_path))
    async with httpx2.AsyncClient(timeout=30) as http:  # no cookies or defaults of the peer's client
        response = await http.post(peer.url, content=body, headers=headers)
    assert response.status_code == status, response.text
    records = read_records(peer.audit_path)[before:]
    assert len(records) == 1, records
    record = records[0]
    assert record["tool"] == "shell_exec" and record["phase"] == "end" and record["outcome"] == "error"
    assert record["request_id"] == str(request_id)
    assert record["http_status"] == status
    assert reason in record["reason"] and f"HTTP {status}" in record["reason"], record["reason"]
    assert record["client_id"] == f"http:{token}"
    assert record["message_len"] == len(body)
    assert record["message_sha256"] == hashlib.sha256(body).hexdigest()
    assert record["args"]["command"] == "echo hi"
    assert SECRET not in json.dumps(record) and "DB_PASSWORD" in json.dumps(record["args"])


async def test_a_refusal_by_the_message_guard_says_its_http_status_too(peer: HttpPeer) -> None:
    """The guard's own refusals (adr/0016) carry the status they were answered with, as the SDK's now do."""
    before = len(read_records(peer.audit_path))
    line = b'{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"server_info","arguments":{}}}'
    status, _, _ = await peer.post(line)
    assert status == 400
    records = read_records(peer.audit_path)[before:]
    assert [(record["request_id"], record["http_status"]) for record in records] == [("1.5", 400)]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_well_formed_call_leaves_exactly_its_own_records(peer: HttpPeer, mode: str) -> None:
    """The SDK's own client, in both eras: shell_exec's start and end records, server_info's end record, and
    no refusal record."""
    before = len(read_records(peer.audit_path))
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKENS['alice']}"})
    async with Client(streamable_http_client(peer.url, http_client=http), mode=mode) as connected:  # type: ignore[arg-type]
        result = await connected.call_tool("shell_exec", {"command": "echo well-formed"})
        assert text_of(result) == "[exit 0]\nwell-formed\n"
        await connected.call_tool("server_info", {})
    records = read_records(peer.audit_path)[before:]
    calls = [(record["tool"], record.get("phase")) for record in records if record["tool"] != "session:end"]
    assert calls == [("shell_exec", "start"), ("shell_exec", "end"), ("server_info", "end")], records
    assert not [record for record in records if "http_status" in record or "message_sha256" in record]
    assert {record["client_id"] for record in records} == {"http:alice"}
