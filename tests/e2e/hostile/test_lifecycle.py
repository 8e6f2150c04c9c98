"""Issue 21, class 5: the client cannot change who it is in the log. Before `initialize` no tool runs (the call
is refused like tools/list, with an audit record naming no client); a second `initialize` on the same
connection is refused and every later record keeps the first name; a 2026-07-28 client, which declares
itself on every request, keeps the name its connection first declared. Over stdio and HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_records
from tests.fuzz.calls import ENVELOPE_KEYS, MODERN, PROTOCOL
from tests.fuzz.peers import HttpPeer, StdioPeer, ask, initialize, server_dir, tool_call

pytestmark = pytest.mark.anyio


def initialize_line(request_id: int, name: str) -> bytes:
    params = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}).encode()


def clients_of(audit_path: Path, request_ids: list[str]) -> list[str]:
    return [str(record["client_id"]) for record in read_records(audit_path) if record.get("request_id") in request_ids]


async def test_no_tool_runs_before_initialize(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    peer = await StdioPeer.start(server_dir(), tmp_path / "audit.jsonl")  # open mode: it would run
    try:
        answer = await ask(peer, tool_call(1, "shell_exec", {"command": f"touch {marker}"}), ("int", "1"))
        assert answer is not None and "error" in answer, f"a tool call before initialize was served: {answer}"
        assert "NotInitialized" in answer["error"]["message"]
        listing = await ask(peer, b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}', ("int", "2"))
        assert listing is not None and "error" in listing
        await initialize(peer, "late")
        after = await ask(peer, tool_call(3, "shell_exec", {"command": "true"}), ("int", "3"))
        assert after is not None and after["result"]["content"][0]["text"].startswith("[exit 0]")
    finally:
        await peer.close()
    assert not marker.exists()
    (refused,) = [record for record in read_records(tmp_path / "audit.jsonl") if record.get("request_id") == "1"]
    assert refused["outcome"] == "error" and refused["client_id"] == "stdio:unknown"
    assert refused["reason"].startswith("NotInitialized")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_second_initialize_is_refused_and_the_name_stays(tmp_path: Path, transport: str) -> None:
    kind = StdioPeer if transport == "stdio" else HttpPeer
    peer = await kind.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    try:
        await initialize(peer, "first")
        await ask(peer, tool_call(10, "server_info", {}), ("int", "10"))
        again = await ask(peer, initialize_line(11, "impostor"), ("int", "11"))
        assert again is not None and "error" in again, f"a second initialize was accepted: {str(again)[:200]}"
        assert again["error"]["code"] == -32600 and "already initialized" in again["error"]["message"]
        await ask(peer, tool_call(12, "server_info", {}), ("int", "12"))
    finally:
        await peer.close()
    assert clients_of(tmp_path / "audit.jsonl", ["10", "12"]) == [f"{transport}:first"] * 2


async def test_a_2026_client_keeps_the_name_its_connection_first_declared(tmp_path: Path) -> None:
    def call(request_id: int, name: str) -> bytes:
        meta = {ENVELOPE_KEYS[0]: MODERN, ENVELOPE_KEYS[1]: {"name": name, "version": "1"}, ENVELOPE_KEYS[2]: {}}
        params: dict[str, Any] = {"name": "server_info", "arguments": {}, "_meta": meta}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()

    peer = await StdioPeer.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    try:
        for request_id, name in ((20, "first"), (21, "impostor"), (22, "first")):
            answer = await ask(peer, call(request_id, name), ("int", str(request_id)))
            assert answer is not None and "result" in answer
    finally:
        await peer.close()
    assert clients_of(tmp_path / "audit.jsonl", ["20", "21", "22"]) == ["stdio:first"] * 3
