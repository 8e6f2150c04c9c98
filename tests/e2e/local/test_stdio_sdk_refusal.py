"""Found with review finding S3: over stdio a tools/call the MCP SDK answers with an error before relay-shell's
call router sees it (the 2026-07-28 envelope in a connection that made the 2025-11-25 handshake) leaves exactly
one audit record, written before the error reaches the client: the SDK's refusal as `reason`, the tool, the
declared client, the arguments redacted, the digest of the line. Calls the router sees keep exactly their own
records, also when two in flight share an id.

A real relay-shell on pipes with a raw JSON-RPC peer (the SDK's client never sends these messages).
HOSTILE_TEST_SERVER_DIR=/path/to/a/checkout runs them against that checkout's server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import read_records
from tests.fuzz.peers import StdioPeer, ask, initialize, server_dir

pytestmark = pytest.mark.anyio

SECRET = "hunter2-stdio-secret-4b9e12"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "enveloped", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
async def peer(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[StdioPeer]:
    audit_path = tmp_path_factory.mktemp("stdio-sdk-refusal") / "audit.jsonl"
    started = await StdioPeer.start(server_dir(), audit_path, ssh_config="")
    await initialize(started, client="handshaken")
    yield started
    await started.close()


def call(request_id: int, meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": "shell_exec", "arguments": {"command": "echo hi", "env": {"DB_PASSWORD": SECRET}}}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


async def test_the_envelope_in_a_handshake_connection_is_refused_with_one_record(peer: StdioPeer) -> None:
    line = call(41, ENVELOPE)
    answer = await ask(peer, line, ("int", "41"))
    assert answer is not None and "handshake protocol era" in answer["error"]["message"], answer
    records = [record for record in read_records(peer.audit_path) if record["tool"] != "server:start"]
    assert len(records) == 1, records
    record = records[0]
    assert (record["tool"], record["phase"], record["outcome"], record["request_id"]) == (
        "shell_exec",
        "end",
        "error",
        "41",
    )
    assert record["reason"] == answer["error"]["message"] + "; nothing ran"
    assert record["client_id"] == "stdio:handshaken"
    assert record["message_len"] == len(line) and record["message_sha256"] == hashlib.sha256(line).hexdigest()
    assert SECRET not in json.dumps(record) and record["args"]["command"] == "echo hi"
    assert "http_status" not in record


async def test_calls_the_router_sees_keep_exactly_their_own_records(peer: StdioPeer) -> None:
    """A refused call and a served one with the same id, then a served one: shell_exec's start and end for each
    served call, and the refusal's one record."""
    assert await peer.send(call(42, ENVELOPE))
    assert await peer.send(call(42))
    deadline = asyncio.get_running_loop().time() + 30
    while len(peer.answers.get(("int", "42"), [])) < 2 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    answers = peer.answers[("int", "42")]
    assert sorted("error" in answer for answer in answers) == [False, True], answers
    assert (await ask(peer, call(43), ("int", "43"))) is not None
    records = [record for record in read_records(peer.audit_path) if record["tool"] == "shell_exec"]
    kinds = sorted((record["request_id"], record["phase"], "message_sha256" in record) for record in records)
    assert kinds == [
        ("42", "end", False),
        ("42", "end", True),
        ("42", "start", False),
        ("43", "end", False),
        ("43", "start", False),
    ]
